"""Checks for every value wattlab hands to sbatch, srun or torchrun.

A value that reaches an ``#SBATCH`` line of a generated script, or torchrun's command line,
must not smuggle in a second line or a second option: ``--partition $'debug\\ntouch x #'``
would otherwise put ``touch x`` into the batch script. Each check raises a ConfigError of one
sentence naming the flag, before anything is written or started. Commands are always run
from argument lists, never through a shell.
"""

from __future__ import annotations

import ipaddress
import re

from wattlab.errors import ConfigError, echo

# SLURM names (partitions, accounts, QOS, job names): letters, digits and a few separators;
# a comma separates several partitions.
_SLURM_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.,:+@-]{0,254}")
_HOST_LABEL_RE = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def has_control_characters(text: str) -> bool:
    """Whether ``text`` holds a newline, a tab, NUL or any other control character."""
    return bool(_CONTROL_RE.search(text))


def check_plain_text(flag: str, value: str) -> str:
    """``value`` on one line: no newline or other control character (an sbatch option's value,
    a comment)."""
    if not isinstance(value, str) or has_control_characters(value):
        raise ConfigError(
            f"{flag} must be text on one line without control characters (no newline), "
            f"got {echo(value)}."
        )
    return value


def check_slurm_name(flag: str, value: str) -> str:
    """A partition, account or job name: letters, digits, '_', '.', ',', ':', '+', '@', '-'."""
    check_plain_text(flag, value)
    if not _SLURM_NAME_RE.fullmatch(value):
        raise ConfigError(
            f"{flag} must be a SLURM name of letters, digits and _ . , : + @ - (at most 255), "
            f"got {echo(value)}."
        )
    return value


def check_host(flag: str, host: str) -> str:
    """A host name (RFC 1123 labels), an IPv4 address or an IPv6 address."""
    check_plain_text(flag, host)
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    labels = host.rstrip(".").split(".") if host else []
    if not labels or len(host) > 253 or not all(_HOST_LABEL_RE.fullmatch(x) for x in labels):
        raise ConfigError(f"{flag}: {echo(host)} is not a host name or an IP address.")
    return host


def check_port(flag: str, port: object) -> int:
    """A TCP port, 1..65535."""
    text = str(port)
    if not text.isdigit() or not 1 <= int(text) <= 65_535:
        raise ConfigError(
            f"{flag}: the port must be a whole number from 1 to 65535, got {echo(port)}."
        )
    return int(text)


def parse_endpoint(flag: str, endpoint: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[IPv6]:PORT`` for IPv6) as (host, port); a ConfigError otherwise."""
    check_plain_text(flag, endpoint)
    if endpoint.startswith("["):
        host, sep, port = endpoint[1:].partition("]:")
        if not sep or ":" not in host:
            raise ConfigError(f"{flag} must be HOST:PORT or [IPv6]:PORT, got {echo(endpoint)}.")
    else:
        host, sep, port = endpoint.rpartition(":")
        if not sep or not host or ":" in host:
            raise ConfigError(
                f"{flag} must be HOST:PORT (e.g. node001:29500, [::1]:29500), got {echo(endpoint)}."
            )
    return check_host(flag, host), check_port(flag, port)
