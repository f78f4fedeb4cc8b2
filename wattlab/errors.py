"""Errors meant for people: one sentence naming the bad value and what is allowed.

The CLI prints a WattlabError's message and exits with code 2, without a traceback.
"""

from __future__ import annotations


class WattlabError(Exception):
    """A user-facing error: the message is one sentence a person can act on."""

    exit_code = 2  # bad input: nothing ran


class WorkStopped(WattlabError):
    """The work had started and cannot go on (the database vanished mid-sweep): exit code 1."""

    exit_code = 1


class ConfigError(WattlabError):
    """A bad flag, configuration value or sweep spec."""


class MeterError(WattlabError):
    """A meter could not be opened or read (missing driver, permission, MIG, ...)."""


class DataError(WattlabError):
    """A dataset, database or CSV that is missing or not in the expected shape."""


class PowerLimitError(WattlabError):
    """A power limit that is out of range, or that this process may not set."""


class Interrupted(BaseException):
    """SIGTERM or SIGHUP arrived (SIGINT is KeyboardInterrupt): the run in flight is stored as
    failed and the command stops (exit code 128 + signal number). A BaseException, like
    KeyboardInterrupt, so that no ``except Exception`` on the way (a library, a best-effort
    helper) swallows the stop and lets the run go on."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by signal {signum}")
        self.signum = signum


ECHO_LIMIT_CHARS = 200


def echo(value: object, limit: int = ECHO_LIMIT_CHARS) -> str:
    """A repr of ``value`` for an error message, at most about ``limit`` characters, computed
    without walking all of a huge value (a YAML bomb, a 1000x1000 grid)."""
    import reprlib

    short = reprlib.Repr()
    short.maxlevel = 3
    short.maxlist = short.maxtuple = short.maxset = short.maxdict = 8
    short.maxstring = short.maxother = limit
    short.maxlong = 40
    text = short.repr(value)
    if len(text) > limit:
        text = text[:limit] + "..."
    return text
