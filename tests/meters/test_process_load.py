"""The CPU estimate's process-tree load (``--cpu-load process``): a run's process tree counts its
children's CPU time, those that exited between two readings included, once; a busy process
beside it that is not in its tree counts for nothing.

Real processes, no timing thresholds: each child burns a given amount of CPU time (measured by
itself), and the bounds leave the helpers' own start-up and bookkeeping a generous margin."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from tests.fakes.clock import FakeClock
from wattlab.errors import ConfigError
from wattlab.meters.discover import discover_meters
from wattlab.meters.modelled import (
    CpuEstimateMeter,
    ProcessTreeCpuSeconds,
    ProcessTreeUtilisation,
)

# a child that burns CPU until its own CPU time reaches argv[1] seconds, says so, then either
# exits or (argv[2] == "wait") waits until its stdin closes
BURN = (
    "import sys, time\n"
    "while time.process_time() < float(sys.argv[1]):\n"
    "    pass\n"
    "print(time.process_time(), flush=True)\n"
    "if sys.argv[2] == 'wait':\n"
    "    sys.stdin.read()\n"
)
# a middle process: starts BURN (waiting) as its child, relays its line and pid, and exits on
# a line of its own stdin without waiting for that child, which then leaves the tree alive
MIDDLE = (
    "import subprocess, sys\n"
    "child = subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2], 'wait'],\n"
    "                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)\n"
    "print(child.stdout.readline().strip(), child.pid, flush=True)\n"
    "sys.stdin.readline()\n"
)
# the run: does what each line of its stdin says, then answers one line
HELPER = (
    "import subprocess, sys\n"
    "BURN, MIDDLE = sys.argv[1], sys.argv[2]\n"
    "child = middle = None\n"
    "for line in sys.stdin:\n"
    "    word, _, arg = line.strip().partition(' ')\n"
    "    if word == 'run':\n"
    "        done = subprocess.run([sys.executable, '-c', BURN, arg, 'exit'],\n"
    "                              capture_output=True, text=True)\n"
    "        print(done.stdout.strip(), flush=True)\n"
    "    elif word == 'start':\n"
    "        child = subprocess.Popen([sys.executable, '-c', BURN, arg, 'wait'],\n"
    "                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)\n"
    "        print(child.stdout.readline().strip(), flush=True)\n"
    "    elif word == 'end':\n"
    "        child.stdin.close()\n"
    "        child.wait()\n"
    "        print('ended', flush=True)\n"
    "    elif word == 'orphan':\n"
    "        middle = subprocess.Popen([sys.executable, '-c', MIDDLE, BURN, arg],\n"
    "                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)\n"
    "        print(middle.stdout.readline().strip(), flush=True)\n"
    "    elif word == 'release':\n"
    "        middle.stdin.write('go\\n')\n"
    "        middle.stdin.flush()\n"
    "        middle.wait()\n"
    "        print('released', flush=True)\n"
)
MARGIN_S = 0.4  # the helper's own work between readings, far above what it needs
TICK_S = 0.03  # /proc counts CPU time in clock ticks (10 ms), user and system each rounded


class Helper:
    """The run's root process, driven line by line."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HELPER, BURN, MIDDLE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture
def helper():
    run = Helper()
    yield run
    run.close()


@pytest.fixture
def neighbour():
    """A busy loop beside the run, not in its tree (another tenant's load)."""
    proc = subprocess.Popen([sys.executable, "-c", "while True:\n    pass\n"])
    yield psutil.Process(proc.pid)
    proc.kill()
    proc.wait()


def _cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def _until_busy(proc: psutil.Process, cpu_s: float) -> None:
    """Wait until ``proc`` has used ``cpu_s`` of CPU time (however loaded the machine is)."""
    deadline = time.monotonic() + 300
    while _cpu_s(proc) < cpu_s:
        assert time.monotonic() < deadline, "the busy loop got no CPU time in 5 minutes"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_child_that_exited_between_readings_counts_and_a_neighbour_does_not(helper, neighbour):
    tree = ProcessTreeCpuSeconds(helper.proc.pid)
    assert tree() < MARGIN_S
    burned = float(helper.ask("run 0.5"))  # started, burned and reaped between two readings
    assert burned >= 0.5
    _until_busy(neighbour, 1.5)  # the neighbour's time, if it counted, would show
    counted = tree()
    assert burned - TICK_S <= counted < burned + MARGIN_S


@pytest.mark.slow
def test_a_live_child_counts_and_counts_once_after_it_is_reaped(helper):
    tree = ProcessTreeCpuSeconds(helper.proc.pid)
    burned = float(helper.ask("start 0.5"))  # alive, waiting
    alive = tree()
    assert burned - TICK_S <= alive < burned + MARGIN_S
    assert helper.ask("end") == "ended"  # now in the helper's reaped children's time
    reaped = tree()
    assert alive <= reaped < alive + MARGIN_S  # not twice: that would add 0.5 s
    assert tree() >= reaped  # never backwards


@pytest.mark.slow
def test_a_child_that_leaves_the_tree_alive_is_followed_and_kept_when_it_ends(helper):
    tree = ProcessTreeCpuSeconds(helper.proc.pid)
    burned, pid = helper.ask("orphan 0.5").split()
    orphan = psutil.Process(int(pid))
    seen = tree()
    assert float(burned) - TICK_S <= seen
    assert helper.ask("release") == "released"  # its parent exited: it left the tree alive
    assert orphan.ppid() != helper.proc.pid and orphan not in helper_tree(helper)
    followed = tree()
    assert seen <= followed < seen + MARGIN_S
    orphan.kill()
    psutil.wait_procs([orphan], timeout=60)
    ended = tree()
    assert followed <= ended < followed + MARGIN_S
    # had its time been dropped when it left or ended, the running maximum would swallow the
    # next child's work up to the orphan's 0.5 s
    more = float(helper.ask("run 0.3"))
    assert tree() >= ended + more - TICK_S


def helper_tree(helper: Helper) -> list[psutil.Process]:
    return psutil.Process(helper.proc.pid).children(recursive=True)


def test_utilisation_is_the_trees_cpu_time_over_the_interval_and_the_cpus():
    clock = FakeClock(10.0)
    used = iter([0.0, 1.0, 1.0, 9.0])
    share = ProcessTreeUtilisation(logical_cpus=2, clock=clock, cpu_seconds=lambda: next(used))
    clock.advance(1.0)
    assert share() == pytest.approx(0.5)  # 1 CPU second in 1 s of 2 CPUs
    clock.advance(2.0)
    assert share() == 0.0
    clock.advance(1.0)
    assert share() == 1.0  # clipped: 8 CPU seconds in 1 s of 2 CPUs
    with pytest.raises(ConfigError, match="logical_cpus"):
        ProcessTreeUtilisation(logical_cpus=0, cpu_seconds=lambda: 0.0)


@pytest.mark.slow
def test_the_estimate_with_a_process_load_charges_the_tree_not_the_neighbour(helper, neighbour):
    clock = FakeClock(0.0)
    meter = CpuEstimateMeter(
        10.0, load="process", pid=helper.proc.pid, logical_cpus=1, idle_fraction=0.0, clock=clock
    )
    burned = float(helper.ask("run 0.5"))
    _until_busy(neighbour, 1.5)
    clock.advance(1.0)  # 1 s of 1 CPU: the utilisation is the tree's CPU seconds
    energy = meter.energy_j()
    assert 10.0 * (burned - TICK_S) <= energy < 10.0 * (burned + MARGIN_S)
    meter.close()


def test_the_description_and_details_say_which_load_was_used():
    machine = CpuEstimateMeter(10.0, load="machine")
    process = CpuEstimateMeter(10.0, load="process", logical_cpus=4)
    given = CpuEstimateMeter(10.0, lambda: 0.5)
    assert machine.info.details["cpu_load"] == "machine"
    assert machine.info.details["utilisation"] == "machine-wide"
    assert "the whole machine's CPU utilisation" in machine.info.description
    assert "every process's load counts as the run's" in machine.info.description
    assert process.info.details["cpu_load"] == "process"
    assert process.info.details["utilisation"] == "process-tree"
    assert process.info.details["utilisation_cpus"] == 4
    assert "the measured process tree's CPU time" in process.info.description
    assert "the machine's 4 logical CPUs" in process.info.description
    assert "other processes' load is not counted" in process.info.description
    assert "every process's load" not in process.info.description
    assert given.info.details["cpu_load"] == "given"
    for meter in (machine, process, given):
        meter.close()
    with pytest.raises(ConfigError, match="--cpu-load must be one of machine, process"):
        CpuEstimateMeter(10.0, load="everyone")


@pytest.mark.parametrize("load", ["machine", "process"])
def test_discovery_opens_the_cpu_estimate_with_the_load_asked_for(tmp_path, load):
    found = discover_meters(
        include_gpus=False, powercap_root=tmp_path, env={}, cpuinfo_text="", cpu_load=load
    )
    try:
        cpu = next(m for m in found.meters if m.info.component == "cpu:estimated")
        assert cpu.info.details["cpu_load"] == load
    finally:
        found.close()
    with pytest.raises(ConfigError, match="--cpu-load must be one of machine, process"):
        discover_meters(include_gpus=False, powercap_root=tmp_path, env={}, cpu_load="tree")


def test_a_process_load_shares_the_idle_power_with_the_machines_other_users():
    def energy(used: float, busy: float, load: str = "process") -> float:
        clock = FakeClock(0.0)
        meter = CpuEstimateMeter(10.0, lambda: used, load=load, idle_fraction=0.3, clock=clock,
                                 machine_utilisation_fn=lambda: busy)  # fmt: skip
        clock.advance(2.0)
        try:
            return meter.energy_j()
        finally:
            meter.close()

    # the tree alone keeps the machine busy: all of the idle power, 2 s x 10 W x (0.3 + 0.7 x u)
    assert energy(0.25, 0.25) == pytest.approx(2 * 10 * (0.3 + 0.7 * 0.25))
    # a neighbour keeps it busy 3x as much: the tree's share of the idle power is a quarter
    assert energy(0.25, 1.0) == pytest.approx(2 * 10 * (0.3 * 0.25 + 0.7 * 0.25))
    # nothing keeps it busy: the measured run is charged the idle power
    assert energy(0.0, 0.0) == pytest.approx(2 * 10 * 0.3)
    # the machine-wide load charges the run every watt whoever burns it
    assert energy(0.25, 1.0, load="machine") == pytest.approx(2 * 10 * (0.3 + 0.7 * 0.25))
    described = CpuEstimateMeter(10.0, load="process", logical_cpus=2)
    assert "share of the machine's busy CPU time" in described.info.description
    assert "idle_share" in described.info.details["model"]
    described.close()
