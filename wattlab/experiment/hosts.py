"""Host-qualified component names for runs that span several machines.

On one machine a component is named by kind and index (``gpu:0``, ``cpu:package-0``). When a
run spans several nodes, every node has a ``gpu:0`` and a ``cpu:package-0``, so the worker
prefixes each name with its host (``node-a/gpu:0``) before the ranks' measurements are combined:
the combined row then holds every host's components, once each, and ``combine_measurements``
still refuses a component metered twice. CPU and DRAM are metered by local rank 0 of each node.

The host is ``$WATTLAB_HOSTNAME`` when set (tests run two torchrun agents on one machine posing
as two nodes), else the machine's short host name.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import replace

from wattlab.monitor import Measurement

HOSTNAME_ENV = "WATTLAB_HOSTNAME"
HOST_SEPARATOR = "/"


def host_name(env: Mapping[str, str] | None = None) -> str:
    """This machine's name for results: $WATTLAB_HOSTNAME, else the short host name."""
    env = os.environ if env is None else env
    name = (env.get(HOSTNAME_ENV) or "").strip()
    return name or socket.gethostname().split(".", 1)[0]


def spans_several_nodes(env: Mapping[str, str] | None = None) -> bool:
    """True inside a torchrun worker of a run over more than one node."""
    env = os.environ if env is None else env
    try:
        groups = int(env.get("GROUP_WORLD_SIZE") or 0)
        world = int(env.get("WORLD_SIZE") or 1)
        local = int(env.get("LOCAL_WORLD_SIZE") or world)
    except ValueError:
        return False
    return groups > 1 or world > local


def qualified(host: str, component: str) -> str:
    """``node-a/gpu:0`` (a name that already carries a host is left as it is)."""
    return component if HOST_SEPARATOR in component else f"{host}{HOST_SEPARATOR}{component}"


def qualify_measurement(measurement: Measurement, host: str) -> Measurement:
    """The same measurement with every component name prefixed by ``host``."""

    def keys(d: dict) -> dict:
        return {qualified(host, k): v for k, v in d.items()}

    return replace(
        measurement,
        energy_j=keys(measurement.energy_j),
        provenance=keys(measurement.provenance),
        uncertainty_j=keys(measurement.uncertainty_j),
        in_total=keys(measurement.in_total),
        short_window=keys(measurement.short_window),
        idle_power_w=keys(measurement.idle_power_w),
        samples=[(t, qualified(host, c), p) for t, c, p in measurement.samples],
        utilization_percent=keys(measurement.utilization_percent),
        utilization_readings=keys(measurement.utilization_readings),
    )
