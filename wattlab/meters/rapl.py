"""CPU package, DRAM and platform (psys) energy from RAPL through Linux powercap sysfs.

Layout (``/sys/class/powercap``; Intel and AMD both use the ``intel-rapl`` names)::

    intel-rapl:0          name "package-0"   socket 0 (cores + uncore, not DRAM)
    intel-rapl:0:0        name "core"        part of package-0: not summed (double count)
    intel-rapl:0:1        name "uncore"      part of package-0: not summed
    intel-rapl:0:2        name "dram"        socket 0's memory (not inside package-0)
    intel-rapl:1          name "package-1"   socket 1, ...
    intel-rapl:2          name "psys"        whole platform: covers package + dram
    intel-rapl-mmio:0     name "package-0"   the same package through MMIO: skipped (duplicate)

Each zone has ``energy_uj`` (a microjoule counter that wraps to 0 after ``max_energy_range_uj``)
and the meter converts to joules. A reading lower than the previous one is a wrap, and the
meter's offset grows by ``max_energy_range_uj``; a poller must read every zone at least once per
wrap period (``required_poll_interval_s`` in ``info.details``) for this to count every wrap.

A wrap is believed only when the energy it implies fits the time since the last reading at the
zone's assumed maximum power (plus ``WRAP_SLACK_S``). A counter that steps back a little (1000 ->
999 uJ), turns negative or exceeds its range is a *glitch*: the meter says so, and from then on
``energy_j()`` raises a MeterError instead of reporting a made-up number as measured.

Since Linux 5.10 (CVE-2020-8694) ``energy_uj`` is readable by root only; an unreadable zone is
reported as a MeterProblem with the fix, and discovery falls back to the CPU/RAM estimates.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from wattlab.errors import MeterError
from wattlab.meters.base import CPU, DRAM, PSYS, MeterInfo, MeterProblem, Provenance

DEFAULT_POWERCAP_ROOT = Path("/sys/class/powercap")
POWERCAP_ROOT_ENV = "WATTLAB_POWERCAP_ROOT"
# Power used to size the poll interval: above any single CPU package or DRAM zone today. Units: W.
ASSUMED_MAX_POWER_W = 1000.0
# RAPL's energy status registers update about every millisecond. Units: s.
RAPL_UPDATE_PERIOD_S = 0.001
# Extra time allowed when judging a wrap plausible (read jitter, a slow poller). Units: s.
WRAP_SLACK_S = 1.0

CPU_FALLBACK = "estimated CPU power (TDP x utilisation model)"
RAM_FALLBACK = "estimated memory power (W per GiB of memory in use)"
PSYS_FALLBACK = "none (psys is informational: package and dram are summed instead)"

_ZONE_RE = re.compile(r"^(intel-rapl|intel-rapl-mmio):(\d+)(?::(\d+))?$")
_PACKAGE_RE = re.compile(r"^package-(\d+)$")

ReadText = Callable[[Path], str]


def _read_text(path: Path) -> str:
    # Zone names are not guaranteed UTF-8: keep odd bytes visible instead of failing.
    with open(path, encoding="utf-8", errors="backslashreplace") as f:
        return f.read()


def resolve_powercap_root(
    root: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Path:
    """The powercap root: ``root``, else $WATTLAB_POWERCAP_ROOT, else /sys/class/powercap."""
    if root is not None:
        return Path(root)
    env = os.environ if env is None else env
    value = env.get(POWERCAP_ROOT_ENV)
    return Path(value) if value else DEFAULT_POWERCAP_ROOT


def time_to_wrap_s(max_energy_range_uj: int, power_w: float) -> float:
    """Seconds for a RAPL counter to wrap at a steady ``power_w``. Units: s (input uJ, W)."""
    if power_w <= 0:
        raise ValueError(f"power_w must be positive, got {power_w}")
    return max_energy_range_uj / 1e6 / power_w


@dataclass(frozen=True)
class RaplZone:
    """One powercap zone as found on disk."""

    zone_id: str  # "intel-rapl:0:2"
    path: Path  # the zone's directory
    name: str  # contents of its name file: "package-0", "dram", "core", "psys", ...
    control_type: str  # "intel-rapl" or "intel-rapl-mmio"
    parent_id: str | None  # "intel-rapl:0" for a subzone, None for a top-level zone
    parent_name: str | None  # "package-0" for a subzone of package-0

    @property
    def role(self) -> str:
        """'package', 'dram', 'psys', 'core', 'uncore' or the raw name."""
        if _PACKAGE_RE.match(self.name):
            return "package"
        return self.name


def _sort_key(zone_id: str) -> tuple[object, ...]:
    m = _ZONE_RE.match(zone_id)
    if m is None:
        return (zone_id,)
    return (m.group(1), int(m.group(2)), int(m.group(3) or -1))


def scan_zones(root: Path, read_text: ReadText = _read_text) -> list[RaplZone]:
    """Every RAPL zone under ``root``: the flat /sys/class/powercap links and nested
    directories (/sys/devices/virtual/powercap/intel-rapl/intel-rapl:0/intel-rapl:0:0) alike.
    Zones whose name file cannot be read are left out."""
    found: dict[str, Path] = {}
    # Breadth first, so the flat /sys/class/powercap/<zone> links win over nested paths.
    queue: list[tuple[Path, int]] = [(root, 0)]
    while queue:
        directory, depth = queue.pop(0)
        try:
            entries = sorted(directory.iterdir(), key=lambda p: _sort_key(p.name))
        except OSError:
            continue
        for entry in entries:
            if _ZONE_RE.match(entry.name) and entry.is_dir():
                found.setdefault(entry.name, entry)
                if depth < 3:
                    queue.append((entry, depth + 1))
            elif depth == 0 and entry.name in ("intel-rapl", "intel-rapl-mmio") and entry.is_dir():
                queue.append((entry, depth + 1))

    names: dict[str, str] = {}
    for zone_id, path in found.items():
        try:
            names[zone_id] = read_text(path / "name").strip()
        except (OSError, ValueError):  # unreadable, or bytes a custom reader cannot decode
            continue
    zones = []
    for zone_id in sorted(names, key=_sort_key):
        m = _ZONE_RE.match(zone_id)
        assert m is not None
        parent_id = f"{m.group(1)}:{m.group(2)}" if m.group(3) is not None else None
        zones.append(
            RaplZone(
                zone_id=zone_id,
                path=found[zone_id],
                name=names[zone_id],
                control_type=m.group(1),
                parent_id=parent_id,
                parent_name=names.get(parent_id) if parent_id else None,
            )
        )
    return zones


class RaplMeter:
    """One RAPL zone's cumulative energy. Units: J (sysfs gives uJ), W for power.

    ``read_text`` reads a sysfs file (a seam for tests); ``clock`` is monotonic seconds.
    Construction reads ``energy_uj`` once and raises OSError (PermissionError when not root)
    if it cannot.
    """

    def __init__(
        self,
        zone: RaplZone,
        component: str,
        kind: str,
        *,
        read_text: ReadText = _read_text,
        clock: Callable[[], float] = time.monotonic,
        max_energy_range_uj: int | None = None,
        assumed_max_power_w: float = ASSUMED_MAX_POWER_W,
        extra_details: Mapping[str, object] | None = None,
    ) -> None:
        self.zone = zone
        self._read = read_text
        self._clock = clock
        self._lock = threading.Lock()
        self._closed = False
        if max_energy_range_uj is None:
            max_energy_range_uj = int(read_text(zone.path / "max_energy_range_uj").strip())
        self.max_energy_range_uj = max_energy_range_uj
        self._start_uj = self._read_uj()
        if not 0 <= self._start_uj <= max_energy_range_uj:
            raise ValueError(
                f"energy_uj reads {self._start_uj}, outside the counter's range "
                f"0..{max_energy_range_uj}"
            )
        self._last_uj = self._start_uj
        self._last_t = clock()
        self.assumed_max_power_w = assumed_max_power_w
        self.glitch: str | None = None  # set when the counter did something no wrap explains
        self._offset_uj = 0  # max_energy_range_uj per observed wrap
        self.wraps = 0
        self.read_errors = 0
        self._energy_j = 0.0
        self._polls: list[tuple[float, float]] = []  # last two (time s, energy J) from poll()
        wrap_s = time_to_wrap_s(max_energy_range_uj, assumed_max_power_w)
        details: dict[str, object] = {
            "zone": zone.zone_id,
            "zone_name": zone.name,
            "path": str(zone.path),
            "max_energy_range_j": max_energy_range_uj / 1e6,
            "assumed_max_power_w": assumed_max_power_w,
            "time_to_wrap_s": wrap_s,
            # Poll at least this often; half the wrap time at the assumed power, for margin.
            "required_poll_interval_s": wrap_s / 2.0,
        }
        details.update(extra_details or {})
        self.info = MeterInfo(
            component=component,
            kind=kind,
            provenance=Provenance.MEASURED,
            source="rapl",
            description=f"RAPL {zone.name} energy counter ({zone.zone_id})",
            update_period_s=RAPL_UPDATE_PERIOD_S,
            details=details,
        )

    def _read_uj(self) -> int:
        return int(self._read(self.zone.path / "energy_uj").strip())

    def _update_locked(self) -> None:
        if self.glitch is not None:
            return
        raw = self._read_uj()
        now = self._clock()
        if not 0 <= raw <= self.max_energy_range_uj:
            self._flag_glitch(
                f"read {raw} uJ, outside the counter's range 0..{self.max_energy_range_uj}"
            )
            return
        if raw < self._last_uj:  # a wrap past max_energy_range_uj, or a glitch
            implied_j = (self.max_energy_range_uj - self._last_uj + raw) / 1e6
            elapsed_s = max(now - self._last_t, 0.0)
            possible_j = self.assumed_max_power_w * (elapsed_s + WRAP_SLACK_S)
            if implied_j > possible_j:
                self._flag_glitch(
                    f"stepped back from {self._last_uj} to {raw} uJ after {elapsed_s:.3g} s; as "
                    f"a wrap that would be {implied_j:.6g} J, more than "
                    f"{self.assumed_max_power_w:g} W could deliver"
                )
                return
            self.wraps += 1
            self._offset_uj += self.max_energy_range_uj
        self._last_uj = raw
        self._last_t = now
        self._energy_j = (self._offset_uj + raw - self._start_uj) / 1e6

    def _flag_glitch(self, what: str) -> None:
        self.glitch = (
            f"the RAPL counter {self.zone.path / 'energy_uj'} {what}: a glitch, not a wrap, so "
            f"{self.info.component} energy is not reported"
        )
        self.info.details["glitch"] = self.glitch

    def min_poll_interval_s(self, max_power_w: float) -> float:
        """Time for this zone's counter to wrap at ``max_power_w``: a poller must read it more
        often than this to count every wrap. Units: s."""
        return time_to_wrap_s(self.max_energy_range_uj, max_power_w)

    def energy_j(self) -> float:
        """Cumulative energy of this zone since the meter was opened. Units: J. Never
        decreases. Raises MeterError when the counter cannot be read."""
        with self._lock:
            if not self._closed:
                try:
                    self._update_locked()
                except (OSError, ValueError) as exc:
                    raise MeterError(
                        f"reading {self.zone.path / 'energy_uj'} failed ({exc}); check that "
                        "the powercap zone still exists and is readable."
                    ) from exc
            if self.glitch is not None:
                raise MeterError(self.glitch + ".")
            return self._energy_j

    def power_w(self) -> float | None:
        """Mean power between the last two polls. Units: W. None before two polls."""
        with self._lock:
            if len(self._polls) < 2:
                return None
            (t0, e0), (t1, e1) = self._polls
            return (e1 - e0) / (t1 - t0) if t1 > t0 else None

    def poll(self) -> None:
        """Read the counter (counting a wrap if it went down) and remember it for power_w()."""
        with self._lock:
            if self._closed:
                return
            try:
                self._update_locked()
            except (OSError, ValueError):
                self.read_errors += 1
                return
            if self.glitch is not None:
                return
            self._polls = [*self._polls[-1:], (self._clock(), self._energy_j)]

    def relative_uncertainty(self) -> float:
        """0.0: a hardware counter (its model error is not characterised here)."""
        return 0.0

    def close(self) -> None:
        """Stop reading; energy_j() then returns the last value. Idempotent."""
        with self._lock:
            self._closed = True


@dataclass
class RaplScan:
    """What ``open_rapl`` found: meters for readable zones, problems for the rest."""

    root: Path
    zones: list[RaplZone]
    meters: list[RaplMeter] = field(default_factory=list)
    problems: list[MeterProblem] = field(default_factory=list)

    def packages(self) -> list[RaplMeter]:
        return [m for m in self.meters if m.info.kind == CPU]

    def drams(self) -> list[RaplMeter]:
        return [m for m in self.meters if m.info.kind == DRAM]

    def psys(self) -> list[RaplMeter]:
        return [m for m in self.meters if m.info.kind == PSYS]


def _permission_problem(component: str, path: Path, root: Path, fallback: str) -> MeterProblem:
    pattern = root / "intel-rapl:*" / "energy_uj"
    return MeterProblem(
        component,
        f"{path} is not readable by this user (RAPL energy is root-only since Linux 5.10, "
        "CVE-2020-8694).",
        f"Run as root, or allow reading until the next reboot with `sudo chmod o+r {pattern} "
        f"{root / 'intel-rapl:*:*' / 'energy_uj'}` (a udev rule makes it "
        "permanent).",
        fallback,
    )


def open_rapl(
    root: str | os.PathLike[str] | None = None,
    *,
    read_text: ReadText | None = None,
    clock: Callable[[], float] = time.monotonic,
    env: Mapping[str, str] | None = None,
) -> RaplScan:
    """Open a meter for every readable package, dram and psys zone under the powercap root.

    core/uncore subzones are inside their package and MMIO zones duplicate the MSR ones: they
    are not metered, only listed in the package meter's details ("not_summed"). Unreadable zones
    become MeterProblems (permission: with the chmod fix). Never raises for a missing tree.
    """
    reader = read_text or _read_text
    base = resolve_powercap_root(root, env)
    zones = scan_zones(base, reader)
    scan = RaplScan(root=base, zones=zones)
    if not zones:
        scan.problems.append(
            MeterProblem(
                "rapl",
                f"no RAPL zones under {base} (not exposed in this VM or container, no RAPL on "
                "this CPU, or the intel_rapl_msr module is not loaded).",
                "On bare-metal Linux run `sudo modprobe intel_rapl_msr`; VMs and containers "
                "usually do not pass RAPL through.",
                f"{CPU_FALLBACK}; {RAM_FALLBACK}",
            )
        )
        return scan

    not_summed: dict[str, list[str]] = {}
    psys_count = 0
    for zone in zones:
        role = zone.role
        if zone.control_type != "intel-rapl":
            owner = zone.parent_name or zone.name
            not_summed.setdefault(owner, []).append(
                f"{zone.zone_id} ({zone.name}): MMIO duplicate of the MSR zone"
            )
            continue
        if role in ("core", "uncore"):
            not_summed.setdefault(zone.parent_name or "", []).append(
                f"{zone.zone_id} ({zone.name}): already inside its package"
            )
            continue
        if role == "package":
            component, kind, fallback = f"{CPU}:{zone.name}", CPU, CPU_FALLBACK
            label = f"rapl:{zone.name}"
        elif role == "dram":
            owner = zone.parent_name or zone.zone_id
            component, kind, fallback = f"{DRAM}:{owner}", DRAM, RAM_FALLBACK
            label = f"rapl:{owner}/dram"
        elif role == "psys":
            component, kind, fallback = f"{PSYS}:{psys_count}", PSYS, PSYS_FALLBACK
            label = f"rapl:psys-{psys_count}"
            psys_count += 1
        else:
            owner = zone.parent_name or zone.name
            not_summed.setdefault(owner, []).append(f"{zone.zone_id} ({zone.name}): unknown")
            continue
        try:
            meter = RaplMeter(zone, component, kind, read_text=reader, clock=clock)
        except PermissionError:
            scan.problems.append(
                _permission_problem(label, zone.path / "energy_uj", base, fallback)
            )
            continue
        except (OSError, ValueError) as exc:
            scan.problems.append(
                MeterProblem(
                    label,
                    f"{zone.path} could not be read ({exc}).",
                    "Check the powercap zone with `cat` as this user; report the kernel version "
                    "if it persists.",
                    fallback,
                )
            )
            continue
        scan.meters.append(meter)

    for meter in scan.packages():
        meter.info.details["not_summed"] = not_summed.get(meter.zone.name, [])
    return scan
