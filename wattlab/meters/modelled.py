"""CPU and memory power models for machines with no readable counter. Always ``estimated``.

CPU: ``power_w = tdp_w x (idle_fraction + (1 - idle_fraction) x utilisation)`` where
utilisation is, by choice (``CpuEstimateMeter(load=...)``, the CLI's ``--cpu-load``), either the
whole machine's busy CPU fraction between two polls (``"machine"``, from /proc/stat through
psutil, the default: every process's load counts as the run's) or the CPU time of the measured
process tree over the same interval as a share of the machine's logical CPUs (``"process"``:
the root process and all its descendants, those that exited included; other processes' load is
not counted, nor work the kernel does for the run outside its processes). Because the model is
linear in utilisation and utilisation is the interval's mean, ``power x interval`` is the
model's exact energy for that interval. The meter's description, ``details["cpu_load"]`` and
``details["utilisation"]`` say which was used. Stated uncertainty +-40 %.

TDP comes, in this order, from the user (``--cpu-tdp``), from a small table of CPU models
matched against /proc/cpuinfo's "model name" (scaled down when this machine sees fewer hardware
threads than one socket has, as in a VM), or from a per-thread fallback of 3.5 W per logical CPU
(the median of the table's TDP / threads is about 3.3 W; generic names such as the lent GPU
machine's "Intel(R) Xeon(R) Processor" with 16 vCPUs give 16 x 3.5 = 56 W).

Memory: ``power_w = 0.3725 W/GiB x memory in use`` (Green Algorithms, Lannelongue et al. 2021,
per GB of memory; wattlab reads GB as GiB = 2**30 bytes, the unit DIMM sizes are quoted in).
Memory in use is, by choice (``RamEstimateMeter(measure=...)``), either the whole system's
used memory (``"system"``, psutil.virtual_memory().used, the default) or the resident memory
(RSS) of the training process and its children (``"process"``, as the reference paper's
replication package does with the process's RSS). The meter's description and
``details["memory_measure"]`` say which was used. Stated uncertainty +-50 %.
"""

from __future__ import annotations

import abc
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from wattlab.errors import ConfigError
from wattlab.meters.base import CPU, RAM, MeterInfo, Provenance

CPU_IDLE_FRACTION = 0.3  # package power at 0 % utilisation, as a fraction of TDP
CPU_RELATIVE_UNCERTAINTY = 0.4
PER_THREAD_FALLBACK_W = 3.5  # W per logical CPU when the model is not in the table
RAM_W_PER_GIB = 0.3725  # Green Algorithms' memory power per GB (read as GiB)
RAM_RELATIVE_UNCERTAINTY = 0.5
ESTIMATE_UPDATE_PERIOD_S = 0.1  # the estimate changes at each sampler poll (~100 ms)
GIB = 2**30


@dataclass(frozen=True)
class CpuSpec:
    """A table entry: a substring of /proc/cpuinfo's model name, its TDP per socket (W) and its
    hardware threads per socket."""

    match: str
    tdp_w: float
    threads: int


# Vendor TDP (Intel "processor base power", AMD "default TDP") per socket.
CPU_TDP_TABLE: tuple[CpuSpec, ...] = (
    CpuSpec("Xeon(R) 6980P", 500, 256),
    CpuSpec("Xeon(R) Platinum 8592+", 350, 128),
    CpuSpec("Xeon(R) Platinum 8480+", 350, 112),
    CpuSpec("Xeon(R) Platinum 8480C", 350, 112),
    CpuSpec("Xeon(R) Platinum 8468", 350, 96),
    CpuSpec("Xeon(R) Platinum 8380", 270, 80),
    CpuSpec("Xeon(R) Platinum 8358", 250, 64),
    CpuSpec("Xeon(R) Platinum 8280", 205, 56),
    CpuSpec("Xeon(R) Gold 6338", 205, 64),
    CpuSpec("Xeon(R) Gold 6248", 150, 40),
    CpuSpec("Xeon(R) Gold 6148", 150, 40),
    CpuSpec("AMD EPYC 9754", 360, 256),
    CpuSpec("AMD EPYC 9654", 360, 192),
    CpuSpec("AMD EPYC 9554", 360, 128),
    CpuSpec("AMD EPYC 7763", 280, 128),
    CpuSpec("AMD EPYC 7742", 225, 128),
    CpuSpec("AMD EPYC 7543", 225, 64),
    CpuSpec("Threadripper PRO 5995WX", 280, 128),
    CpuSpec("Core(TM) i9-13900K", 125, 32),
    CpuSpec("Core(TM) i7-12700", 65, 20),
    CpuSpec("Core(TM) i5-1135G7", 28, 8),
    CpuSpec("Ryzen 9 7950X", 170, 32),
    CpuSpec("Ryzen 9 5950X", 105, 32),
    CpuSpec("Ryzen 7 5800X", 105, 16),
)


CPU_LOADS = ("machine", "process")  # what the CPU estimate's utilisation counts

_LOAD_WORDS = {
    "machine-wide": "the whole machine's CPU utilisation",
    "process-tree": (
        "the measured process tree's CPU time (the root process and its descendants, exited "
        "ones included) as a share of the machine's {cpus} logical CPUs"
    ),
    "given": "a given CPU utilisation",
}
# the idle part's factor, as the description writes it
_IDLE_WORDS = {
    "process-tree": " x the tree's share of the machine's busy CPU time",
}
# what each load leaves out or takes in, after the description's formula
_LOAD_CAVEATS = {
    "machine-wide": "; every process's load counts as the run's",
    "process-tree": (
        "; other processes' load is not counted, nor work the kernel does for the run outside "
        "its processes, and the idle power is shared by the processes that use the machine"
    ),
    "given": "",
}
_UTILISATION_OF_LOAD = {"machine": "machine-wide", "process": "process-tree"}


def _of_model(model: object) -> str:
    """ " of Intel(R) Xeon(R) Processor" for a meter's description ("" when not known)."""
    return f" of {model}" if isinstance(model, str) and model.strip() else ""


def _tdp_words(source: str) -> str:
    """Where a TDP came from, for a meter's description: an assumed fallback says so."""
    if source == "per-thread fallback":
        return (
            f"assumed: {PER_THREAD_FALLBACK_W:g} W per logical CPU, as the CPU model is not in "
            "wattlab's table; --cpu-tdp sets it"
        )
    return {"table": "from wattlab's table of CPU models", "user": "given with --cpu-tdp"}.get(
        source, source
    )


@dataclass(frozen=True)
class TdpChoice:
    """Where a CPU TDP came from, for info.details."""

    tdp_w: float  # for the whole machine as this process sees it
    source: str  # "user", "table" or "per-thread fallback"
    model: str  # /proc/cpuinfo model name ("" when unknown)
    logical_cpus: int
    sockets: int
    matched: str | None  # the table entry's match string


def read_cpuinfo(path: str | os.PathLike[str] = "/proc/cpuinfo") -> str:
    """/proc/cpuinfo's text, or "" where it does not exist."""
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def parse_cpuinfo(text: str) -> tuple[str, int, int]:
    """(model name of the first CPU, sockets, logical CPUs) from /proc/cpuinfo text."""
    model = ""
    sockets: set[str] = set()
    logical = 0
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "processor":
            logical += 1
        elif key == "model name" and not model:
            model = value
        elif key == "physical id":
            sockets.add(value)
    return model, max(1, len(sockets)), logical


def lookup_tdp(model: str) -> CpuSpec | None:
    """The table entry whose match string is the longest substring of ``model``."""
    hits = [s for s in CPU_TDP_TABLE if s.match.lower() in model.lower()]
    return max(hits, key=lambda s: len(s.match)) if hits else None


def resolve_cpu_tdp(
    cpu_tdp_w: float | None = None,
    *,
    cpuinfo_text: str | None = None,
    logical_cpus: int | None = None,
) -> TdpChoice:
    """Choose the TDP (W) for the CPU estimate: the user's value, the table, or the fallback.

    A table hit is scaled by min(sockets, logical_cpus / threads_per_socket), so a VM that sees
    16 threads of a 112-thread socket gets 16/112 of its TDP.
    """
    text = read_cpuinfo() if cpuinfo_text is None else cpuinfo_text
    model, sockets, counted = parse_cpuinfo(text)
    logical = logical_cpus or counted or os.cpu_count() or 1
    if cpu_tdp_w is not None:
        if not cpu_tdp_w > 0:
            raise ConfigError(f"--cpu-tdp must be a positive number of watts, got {cpu_tdp_w}.")
        return TdpChoice(float(cpu_tdp_w), "user", model, logical, sockets, None)
    spec = lookup_tdp(model)
    if spec is not None:
        share = min(float(sockets), logical / spec.threads)
        return TdpChoice(spec.tdp_w * share, "table", model, logical, sockets, spec.match)
    return TdpChoice(
        PER_THREAD_FALLBACK_W * logical, "per-thread fallback", model, logical, sockets, None
    )


class CpuTimesUtilisation:
    """Whole-machine busy CPU fraction (0-1) between successive calls, from psutil.cpu_times().

    Keeps its own previous reading, so it does not disturb psutil.cpu_percent() elsewhere.
    """

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self._last = self._totals()

    def _totals(self) -> tuple[float, float]:
        times = self._psutil.cpu_times()
        total = sum(times)
        idle = times.idle + getattr(times, "iowait", 0.0)
        return total, idle

    def __call__(self) -> float:
        total, idle = self._totals()
        d_total, d_idle = total - self._last[0], idle - self._last[1]
        self._last = (total, idle)
        if d_total <= 0:
            return 0.0
        return min(1.0, max(0.0, 1.0 - d_idle / d_total))


_ProcessKey = tuple[int, float]  # (pid, start time): one process, even after its pid is reused


def _tree_seconds(proc: object) -> float:
    """CPU seconds (user + system) of ``proc`` and of its children it has waited for."""
    times = proc.cpu_times()  # type: ignore[attr-defined]
    return float(
        times.user
        + times.system
        + getattr(times, "children_user", 0.0)
        + getattr(times, "children_system", 0.0)
    )


class ProcessTreeCpuSeconds:
    """CPU seconds (user + system) that the process tree of ``pid`` (default: this process) has
    used since this object was made: the root and every descendant, the ones that exited
    included. Units: s. Never decreases.

    Each reading sums, over the root and its live descendants (parents before children), a
    process's own CPU time and that of the children it has reaped (``children_user`` and
    ``children_system``). A child's time moves into its parent's reaped total when the parent
    waits for it, so a child that exits between two readings still counts, once. A child reaped
    between the reading of its parent and its own is missing from that reading only (never
    counted twice): the next reading finds it in its parent's total, and the running maximum
    keeps the result from going back meanwhile. A process that leaves the tree alive (a daemon
    that detaches itself) is still followed; when it ends, outside the tree, its last reading
    is kept. A process's time before this object was made does not count.
    """

    def __init__(self, pid: int | None = None) -> None:
        import psutil

        self._psutil = psutil
        self._root = psutil.Process(os.getpid() if pid is None else pid)
        self._last: dict[_ProcessKey, float] = {}  # each process's last reading
        self._adopted: set[_ProcessKey] = set()  # left the tree alive: followed
        self._retired_s = 0.0  # last readings of followed processes that ended
        self._high_s = self._sum()
        self._start_s = self._high_s

    def _key(self, proc: object) -> _ProcessKey:
        return (int(proc.pid), float(proc.create_time()))  # type: ignore[attr-defined]

    def _sum(self) -> float:
        """The tree's cumulative CPU seconds now, with the followed processes' and the ended
        followed processes' kept readings."""
        psutil = self._psutil
        gone = (psutil.NoSuchProcess, psutil.AccessDenied)
        procs = [self._root]
        try:
            procs += self._root.children(recursive=True)  # parents before their children
        except gone:
            pass
        now: dict[_ProcessKey, float] = {}
        self._read(procs, now)
        for key in [k for k in self._last if k not in now]:
            # not in the tree now: ended (its parent's reaped total holds it, or it was
            # followed, and its last reading is kept) or alive outside the tree (followed)
            try:
                proc = psutil.Process(key[0])
                alive = abs(proc.create_time() - key[1]) < 1e-6
            except gone:
                alive = False
            if alive:
                self._adopted.add(key)
                followed = [proc]
                try:
                    followed += proc.children(recursive=True)
                except gone:
                    pass
                self._read(followed, now)
            elif key in self._adopted:
                self._retired_s += self._last[key]
                self._adopted.discard(key)
        self._adopted &= set(now)
        self._last = now
        return sum(now.values()) + self._retired_s

    def _read(self, procs: Sequence[object], into: dict[_ProcessKey, float]) -> None:
        for proc in procs:
            try:
                key = self._key(proc)
                if key not in into:
                    into[key] = _tree_seconds(proc)
            except (self._psutil.NoSuchProcess, self._psutil.AccessDenied):
                continue  # ended (or not ours) since the listing: its parent's total holds it

    def __call__(self) -> float:
        self._high_s = max(self._high_s, self._sum())
        return self._high_s - self._start_s


class ProcessTreeUtilisation:
    """The busy fraction (0-1) of the process tree of ``pid`` between successive calls: its CPU
    seconds (``ProcessTreeCpuSeconds``) over the interval x ``logical_cpus`` (the CPUs the
    TDP covers), clipped to 0-1. ``clock`` measures the interval (s)."""

    def __init__(
        self,
        pid: int | None = None,
        *,
        logical_cpus: int,
        clock: Callable[[], float] = time.monotonic,
        cpu_seconds: Callable[[], float] | None = None,
    ) -> None:
        if logical_cpus < 1:
            raise ConfigError(f"logical_cpus must be at least 1, got {logical_cpus}.")
        self.logical_cpus = logical_cpus
        self._clock = clock
        self._cpu_s = cpu_seconds or ProcessTreeCpuSeconds(pid)
        self._last = (clock(), self._cpu_s())

    def __call__(self) -> float:
        now, used_s = self._clock(), self._cpu_s()
        d_t, d_used = now - self._last[0], used_s - self._last[1]
        self._last = (now, used_s)
        if d_t <= 0:
            return 0.0
        return min(1.0, max(0.0, d_used / (d_t * self.logical_cpus)))


class _IntegratingMeter(abc.ABC):
    """Shared machinery: integrate a modelled power at each poll and each energy_j()."""

    info: MeterInfo

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._closed = False
        self._energy_j = 0.0
        self._last_t = clock()
        self._last_p: float | None = None

    @abc.abstractmethod
    def _step_locked(self) -> None:
        """Integrate the model's power up to now. The caller holds the lock."""

    def energy_j(self) -> float:
        """Cumulative modelled energy since the meter was opened. Units: J. Never decreases."""
        with self._lock:
            if not self._closed:
                self._step_locked()
            return self._energy_j

    def power_w(self) -> float | None:
        """Modelled power over the last interval. Units: W. None before the first poll."""
        with self._lock:
            return self._last_p

    def poll(self) -> None:
        """Sampler tick: add the modelled energy since the previous tick."""
        with self._lock:
            if not self._closed:
                self._step_locked()

    def close(self) -> None:
        """Stop integrating; energy_j() then returns the last value. Idempotent."""
        with self._lock:
            self._closed = True


class CpuEstimateMeter(_IntegratingMeter):
    """Estimated CPU energy: TDP x (idle + (1 - idle) x utilisation). Units: W, J.

    ``load``: what the utilisation counts, "machine" (the whole machine's busy fraction,
    ``CpuTimesUtilisation``, the default) or "process" (the CPU time of process ``pid``,
    default this one, and its descendants over ``logical_cpus``: ``ProcessTreeUtilisation``).
    ``utilisation_fn()`` replaces the reading (tests): it returns the busy fraction (0-1) since
    its previous call and ``load``, when given, still names what it stands for. The reading is
    taken once here to start its first interval.
    """

    def __init__(
        self,
        tdp_w: float,
        utilisation_fn: Callable[[], float] | None = None,
        *,
        idle_fraction: float = CPU_IDLE_FRACTION,
        clock: Callable[[], float] = time.monotonic,
        tdp_source: str = "user",
        details: dict[str, object] | None = None,
        load: str | None = None,
        pid: int | None = None,
        logical_cpus: int | None = None,
        machine_utilisation_fn: Callable[[], float] | None = None,
    ) -> None:
        if not tdp_w > 0:
            raise ConfigError(f"--cpu-tdp must be a positive number of watts, got {tdp_w}.")
        if not 0.0 <= idle_fraction <= 1.0:
            raise ConfigError(f"idle_fraction must be between 0 and 1, got {idle_fraction}.")
        if load is not None and load not in CPU_LOADS:
            raise ConfigError(f"--cpu-load must be one of {', '.join(CPU_LOADS)}, got {load!r}.")
        self.tdp_w = float(tdp_w)
        self.idle_fraction = idle_fraction
        cpus = logical_cpus or os.cpu_count() or 1
        self._utilisation: Callable[[], float]
        if utilisation_fn is not None:
            self._utilisation = utilisation_fn
        elif load == "process":
            self._utilisation = ProcessTreeUtilisation(pid, logical_cpus=cpus, clock=clock)
        else:
            self._utilisation = CpuTimesUtilisation()
        if load is None:
            load = "machine" if utilisation_fn is None else None
        utilisation = _UTILISATION_OF_LOAD[load] if load else "given"
        self.load = load or "given"
        # a process load shares the idle power among the machine's users by their busy time
        self._machine: Callable[[], float] | None = None
        if load == "process":
            self._machine = machine_utilisation_fn or CpuTimesUtilisation()
            self._machine()  # start its first interval
        self._utilisation()  # start the first interval
        super().__init__(clock)
        info_details: dict[str, object] = {
            "tdp_w": self.tdp_w,
            "tdp_source": tdp_source,
            "idle_fraction": idle_fraction,
            "cpu_load": self.load,
            # machine-wide: every process's load counts as the run's; process-tree: the
            # measured process tree's CPU time only
            "utilisation": utilisation,
            "model": (
                "tdp_w * (idle_fraction * idle_share + (1 - idle_fraction) * utilisation), "
                "idle_share = utilisation / the machine's busy fraction (at most 1; 1 on a "
                "machine nothing keeps busy)"
                if load == "process"
                else "tdp_w * (idle_fraction + (1 - idle_fraction) * utilisation)"
            ),
            "relative_uncertainty": CPU_RELATIVE_UNCERTAINTY,
        }
        if load == "process":
            info_details["utilisation_cpus"] = cpus
            info_details["process_tree_root_pid"] = os.getpid() if pid is None else pid
        info_details.update(details or {})
        self.info = MeterInfo(
            component=f"{CPU}:estimated",
            kind=CPU,
            provenance=Provenance.ESTIMATED,
            source="model",
            description=(
                f"estimated CPU power{_of_model(info_details.get('cpu_model'))} = "
                f"{self.tdp_w:g} W TDP ({_tdp_words(tdp_source)}) x "
                f"({idle_fraction:g}{_IDLE_WORDS.get(utilisation, '')} + "
                f"{1 - idle_fraction:g} x "
                f"{_LOAD_WORDS[utilisation].format(cpus=cpus)}), "
                f"+-{CPU_RELATIVE_UNCERTAINTY:.0%}" + _LOAD_CAVEATS[utilisation]
            ),
            update_period_s=ESTIMATE_UPDATE_PERIOD_S,
            details=info_details,
        )

    @classmethod
    def from_machine(
        cls,
        cpu_tdp_w: float | None = None,
        utilisation_fn: Callable[[], float] | None = None,
        *,
        cpuinfo_text: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        load: str | None = None,
        pid: int | None = None,
    ) -> CpuEstimateMeter:
        """The estimate for this machine: TDP from ``cpu_tdp_w``, the table or the fallback;
        a "process" load is a share of the logical CPUs that TDP covers."""
        choice = resolve_cpu_tdp(cpu_tdp_w, cpuinfo_text=cpuinfo_text)
        return cls(
            choice.tdp_w,
            utilisation_fn,
            clock=clock,
            tdp_source=choice.source,
            load=load,
            pid=pid,
            logical_cpus=choice.logical_cpus,
            details={
                "cpu_model": choice.model,
                "logical_cpus": choice.logical_cpus,
                "sockets": choice.sockets,
                "table_match": choice.matched,
            },
        )

    def power_for(self, utilisation: float, idle_share: float = 1.0) -> float:
        """The model's power at a utilisation fraction (0-1), charged ``idle_share`` (0-1) of
        the idle power. Units: W."""
        u = min(1.0, max(0.0, utilisation))
        share = min(1.0, max(0.0, idle_share))
        return self.tdp_w * (self.idle_fraction * share + (1.0 - self.idle_fraction) * u)

    def _step_locked(self) -> None:
        now = self._clock()
        used = float(self._utilisation())
        share = 1.0
        if self._machine is not None:
            # the idle power is the machine's: shared by whoever keeps it busy, in proportion
            # (a tenant that stretches this run's wall time takes its part of the idle power)
            busy = float(self._machine())
            share = 1.0 if busy <= 0.0 else min(1.0, used / busy)
        power = self.power_for(used, share)
        dt = now - self._last_t
        if dt > 0:
            self._energy_j += power * dt
        self._last_t, self._last_p = now, power

    def relative_uncertainty(self) -> float:
        """The model's stated relative error: 0.4 (+-40 %)."""
        return CPU_RELATIVE_UNCERTAINTY


RAM_MEASURES = ("system", "process")


def _used_memory_bytes() -> float:
    import psutil

    return float(psutil.virtual_memory().used)


def process_tree_rss_bytes(pid: int | None = None) -> float:
    """Resident memory (bytes) of process ``pid`` (default: this one) and all its children, e.g.
    the data-loader workers. Children that exit between listing and reading are skipped."""
    import psutil

    root = psutil.Process(pid)
    total = float(root.memory_info().rss)
    for child in root.children(recursive=True):
        try:
            total += float(child.memory_info().rss)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


_MEASURE_TEXT = {
    "system": "psutil.virtual_memory().used (the whole system's used memory)",
    "process": "resident memory (RSS) of the training process and its children",
}


class RamEstimateMeter(_IntegratingMeter):
    """Estimated memory energy: ``w_per_gb`` W per GiB of memory in use, integrated with the
    trapezoid rule between polls. Units: W, J, bytes.

    ``measure``: "system" (the whole system's used memory) or "process" (RSS of process ``pid``,
    default this one, and its children, as the reference paper). ``used_bytes_fn`` replaces the
    reading (tests); ``measure`` still names what it stands for.
    """

    def __init__(
        self,
        w_per_gb: float = RAM_W_PER_GIB,
        *,
        measure: str = "system",
        pid: int | None = None,
        used_bytes_fn: Callable[[], float] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not w_per_gb > 0:
            raise ConfigError(f"w_per_gb must be a positive number of watts, got {w_per_gb}.")
        if measure not in RAM_MEASURES:
            raise ConfigError(
                f"the RAM measure must be one of {', '.join(RAM_MEASURES)}, got {measure!r}."
            )
        self.w_per_gb = w_per_gb
        self.measure = measure
        if used_bytes_fn is None:
            if measure == "process":
                root_pid = os.getpid() if pid is None else pid

                def used_bytes_fn() -> float:
                    return process_tree_rss_bytes(root_pid)

            else:
                used_bytes_fn = _used_memory_bytes
        self._used = used_bytes_fn
        super().__init__(clock)
        self._last_p = self._power_now()
        self.info = MeterInfo(
            component=f"{RAM}:estimated",
            kind=RAM,
            provenance=Provenance.ESTIMATED,
            source="model",
            description=(
                f"estimated memory power = {w_per_gb:g} W per GiB in use (Green Algorithms), "
                f"memory in use = {_MEASURE_TEXT[measure]}, +-{RAM_RELATIVE_UNCERTAINTY:.0%}"
            ),
            update_period_s=ESTIMATE_UPDATE_PERIOD_S,
            details={
                "w_per_gib": w_per_gb,
                "memory_unit": "GiB (2**30 bytes)",
                "memory_measure": _MEASURE_TEXT[measure],
                "ram_measure": measure,
                "relative_uncertainty": RAM_RELATIVE_UNCERTAINTY,
            },
        )

    def _power_now(self) -> float:
        return self.w_per_gb * float(self._used()) / GIB

    def _step_locked(self) -> None:
        now = self._clock()
        power = self._power_now()
        dt = now - self._last_t
        if dt > 0 and self._last_p is not None:
            self._energy_j += (self._last_p + power) / 2.0 * dt
        self._last_t, self._last_p = now, power

    def relative_uncertainty(self) -> float:
        """The model's stated relative error: 0.5 (+-50 %)."""
        return RAM_RELATIVE_UNCERTAINTY
