"""The one sweep driver: the plan (what runs, what is done, what is skipped) and the loop that
claims, runs, stores and resumes every kind of run under the sweep's lock."""
