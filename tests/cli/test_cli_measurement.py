"""The one builder of measurement settings that `run`, `sweep` and `monitor` share."""

from __future__ import annotations

from pathlib import Path

import pytest

from wattlab.cli.measurement import MeasurementFlags, powercap_root
from wattlab.errors import WattlabError


def test_flags_become_the_settings_the_library_takes(tmp_path: Path) -> None:
    flags = MeasurementFlags(
        interval_s=0.5,
        carbon_intensity=0.4,
        intensity_range="0.3:0.5",
        pue=1.2,
        powercap_root=str(tmp_path),
        cpu_tdp_w=95.0,
        ram_measure="process",
        cpu_load="process",
    )
    measuring = flags.settings()
    assert measuring.carbon.intensity_kg_per_kwh == pytest.approx(0.4)
    assert measuring.carbon.pue == pytest.approx(1.2)
    assert measuring.powercap_root == tmp_path
    opts = measuring.worker_options("r.db", progress=False, codecarbon_country="FRA")
    assert (opts.db_path, opts.interval_s, opts.powercap_root) == ("r.db", 0.5, str(tmp_path))
    assert (opts.cpu_tdp_w, opts.ram_measure, opts.progress) == (95.0, "process", False)
    assert opts.cpu_load == "process"
    assert opts.codecarbon_country == "FRA" and opts.carbon == measuring.carbon


def test_the_defaults_are_the_commands_defaults(monkeypatch) -> None:
    monkeypatch.delenv("WATTLAB_POWERCAP_ROOT", raising=False)
    opts = MeasurementFlags().settings().worker_options("w.db", progress=True)
    assert (opts.interval_s, opts.powercap_root, opts.cpu_tdp_w) == (0.1, None, None)
    assert opts.ram_measure == "system" and opts.codecarbon_country == "USA"
    assert opts.cpu_load == "machine"  # the whole machine's load, as before --cpu-load


def test_a_missing_powercap_root_is_one_sentence(tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(WattlabError, match="does not exist or is not a folder"):
        MeasurementFlags(powercap_root=str(tmp_path / "nope")).settings()
    monkeypatch.setenv("WATTLAB_POWERCAP_ROOT", str(tmp_path))
    assert powercap_root(None) == tmp_path  # the environment's root when no flag is given
    monkeypatch.setenv("WATTLAB_POWERCAP_ROOT", "")
    assert powercap_root(None) is None  # empty is unset, never the working folder


def test_a_trace_that_does_not_cover_now_is_refused_before_anything_runs(tmp_path: Path) -> None:
    trace = tmp_path / "grid.csv"
    trace.write_text(
        "timestamp,intensity_kg_per_kwh\n2020-01-01T00:00:00Z,0.2\n2020-01-01T01:00:00Z,0.3\n"
    )
    with pytest.raises(WattlabError, match="does not include now"):
        MeasurementFlags(intensity_trace=str(trace)).settings()


def test_the_flags_are_read_from_a_commands_parameters(tmp_path: Path) -> None:
    from wattlab.cli.measurement import PARAMETERS

    params = {name: None for name in PARAMETERS.values()}
    params |= {"interval": 0.25, "cpu_tdp": 65.0, "ram_measure": "process", "db": "x.db"}
    params |= {"cpu_load": "process"}
    flags = MeasurementFlags.from_params(params)
    assert (flags.interval_s, flags.cpu_tdp_w, flags.ram_measure) == (0.25, 65.0, "process")
    assert flags.cpu_load == "process"
    assert flags.powercap_root is None and flags.region is None
    only_carbon = MeasurementFlags.from_params({"carbon_intensity": 0.5, "pue": 1.5, "rows": 3})
    assert only_carbon == MeasurementFlags(carbon_intensity=0.5, pue=1.5)
    carbon = only_carbon.carbon()
    assert carbon.intensity_kg_per_kwh == pytest.approx(0.5) and carbon.pue == pytest.approx(1.5)


def test_every_measuring_command_takes_the_same_flags_with_the_same_defaults() -> None:
    """The flags are declared once (cli.options' aliases, these names and defaults): a command
    that renamed one, or gave it another default, would measure differently unnoticed."""
    import dataclasses
    import inspect

    from wattlab.cli import advise_cmd, estimate_cmd, monitor_cmd, run_cmd, sweep_cmd
    from wattlab.cli.measurement import CARBON_PARAMETERS, PARAMETERS

    defaults = {f.name: f.default for f in dataclasses.fields(MeasurementFlags)}
    commands = {
        run_cmd.run: PARAMETERS,
        sweep_cmd.sweep: PARAMETERS,
        monitor_cmd.monitor: PARAMETERS,
        estimate_cmd.estimate: {k: k for k in CARBON_PARAMETERS},
        advise_cmd.advise: {k: k for k in CARBON_PARAMETERS},
    }
    annotations: dict[str, set[str]] = {}
    for command, taken in commands.items():
        signature = inspect.signature(command)
        assert "ctx" in signature.parameters, command.__name__  # from_params reads ctx.params
        for field, name in taken.items():
            parameter = signature.parameters[name]
            assert parameter.default == defaults[field], (command.__name__, name)
            annotations.setdefault(name, set()).add(str(parameter.annotation))
    assert all(len(spelled) == 1 for spelled in annotations.values()), annotations
