"""What an estimate assumed is said where the estimate is: the fallback TDP, the machine-wide
load, the RAM model and the CPU's name, from the components a run stored."""

from __future__ import annotations

from wattlab.analysis.assumptions import assumptions_sentence, estimation_methods
from wattlab.experiment.db.record import estimate_assumptions
from wattlab.experiment.db.stored_run import StoredRun
from wattlab.meters.modelled import CpuEstimateMeter, RamEstimateMeter


def _run(cpu: dict, ram: dict | None = None, gpu_j: float = 0.0) -> StoredRun:
    comps = {"cpu:estimated": {"energy_j": 50.0, "provenance": "estimated", **cpu}}
    if ram is not None:
        comps["ram:estimated"] = {"energy_j": 5.0, "provenance": "estimated", **ram}
    if gpu_j:
        comps["gpu:0"] = {"energy_j": gpu_j, "provenance": "measured"}
    return StoredRun.from_row({"id": 1, "energy_total_j": 55.0 + gpu_j, "components_json": comps})


def test_a_fallback_tdp_and_a_machine_wide_load_are_said() -> None:
    text = "model name\t: Some Unknown CPU\nprocessor\t: 0\nprocessor\t: 1\n"
    cpu = CpuEstimateMeter.from_machine(cpuinfo_text=text)
    ram = RamEstimateMeter(used_bytes_fn=lambda: 2**30)
    run = _run(estimate_assumptions(cpu.info.details), estimate_assumptions(ram.info.details))
    (cpu_words, ram_words) = estimation_methods([run])
    assert cpu_words.startswith("the CPU (Some Unknown CPU) from an assumed TDP of 7 W")
    assert "3.5 W per logical CPU x 2 logical CPUs" in cpu_words and "fallback" in cpu_words
    assert "the whole machine's CPU utilisation" in cpu_words and "shared host" in cpu_words
    assert "(±40 %)" in cpu_words
    assert ram_words == (
        "the RAM at 0.3725 W per GiB of the system's used memory (Green Algorithms' figure, ±50 %)"
    )
    assert "wattlab's table" in cpu.info.description and "whole machine" in cpu.info.description
    cpu.close()
    ram.close()


def test_a_table_or_given_tdp_is_not_called_assumed_and_old_runs_say_not_recorded() -> None:
    table = _run({"tdp_w": 56.0, "tdp_source": "table", "utilisation": "machine-wide"})
    assert "its TDP from wattlab's table of CPU models (56 W)" in estimation_methods([table])[0]
    given = _run({"tdp_w": 120.0, "tdp_source": "user", "utilisation": "machine-wide"})
    assert "the TDP given with --cpu-tdp (120 W)" in estimation_methods([given])[0]
    assert "assumed" not in estimation_methods([table, given])[0]
    old = _run({})  # stored before the assumptions were kept
    words = estimation_methods([old])[0]
    assert "a TDP whose origin the runs did not record" in words
    assert "machine" not in words


def test_nothing_estimated_says_nothing() -> None:
    run = StoredRun.from_row(
        {
            "id": 1,
            "energy_total_j": 9.0,
            "components_json": {"gpu:0": {"energy_j": 9.0, "provenance": "measured"}},
        }
    )
    assert estimation_methods([run]) == [] and assumptions_sentence([run]) is None


def test_a_process_tree_load_is_said_and_a_mix_is_said_per_run() -> None:
    cpu = CpuEstimateMeter.from_machine(cpu_tdp_w=10.0, load="process")
    process = _run(estimate_assumptions(cpu.info.details))
    cpu.close()
    words = estimation_methods([process])[0]
    assert "the CPU time of the measured process tree" in words
    assert "other processes' load is not counted" in words and "whole machine" not in words
    machine = _run({"tdp_w": 10.0, "tdp_source": "user", "utilisation": "machine-wide"})
    mixed = estimation_methods([process, machine])[0]
    assert "the whole machine's CPU utilisation for some runs" in mixed
    assert "the CPU time of the measured process tree for some runs" in mixed
