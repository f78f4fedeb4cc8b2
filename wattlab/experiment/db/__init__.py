"""The SQLite store and what it holds: the schema, the runs table's columns and a run's row,
finished runs kept beside a locked database, and export."""
