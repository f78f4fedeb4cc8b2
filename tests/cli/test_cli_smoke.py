"""Smoke tests of the whole command line in whatever Python runs them: every command's --help, the
defaults click hands every command, and one cheap invocation of each command's default path, in
fresh subprocesses of this interpreter.

They hold for the versions the main .venv installs (near the newest), at the floors pyproject.toml
declares (the lowest-direct job of `make test`, `--without-extras`) and in a GPU image's own
Python with its own packages and only the missing wheels carried (docs/install.md):

    PYTHONPATH=$PWD python3 -m pytest -q -rs tests/cli/test_cli_smoke.py --without-extras

A test that needs an optional extra says so (``@pytest.mark.extra``); where that extra is missing
the same command must say so in one sentence, which the ``hide`` tests check everywhere by
hiding the package (``sys.modules[name] = None``: an import of it fails as if not installed).
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

# every command and subcommand; test_the_list_is_every_command keeps it complete
COMMANDS = (
    (),
    ("devices",),
    ("monitor",),
    ("run",),
    ("sweep",),
    ("report",),
    ("compare",),
    ("estimate",),
    ("estimate", "evaluate"),
    ("estimate", "power-limits"),
    ("advise",),
    ("advise", "evaluate"),
    ("export",),
    ("power",),
    ("power", "restore"),
)
# what a command needs on its command line before its defaults apply
REQUIRED_ARGS: dict[tuple[str, ...], list[str]] = {
    ("sweep",): ["spec.yaml"],
    ("monitor",): ["--", "true"],
    ("compare",): ["base.db"],  # the candidate is optional (--sides: one sweep holds both)
}
TRAIN = ("torch", "torchvision")

# `wattlab` with some packages made unimportable, as if not installed: a finder ahead of every
# other refuses to import them and importlib.util.find_spec finds none of them
# (``sys.modules[name] = None`` would leave the name in sys.modules, which libraries such as
# scipy read as "torch is loaded")
_RUN_CLI = textwrap.dedent(
    """
    import importlib.util
    import sys

    HIDDEN = set(filter(None, sys.argv.pop(1).split(",")))

    class Hide:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in HIDDEN:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Hide())
    real_find_spec = importlib.util.find_spec

    def find_spec(name, package=None):
        if name.split(".")[0] in HIDDEN:
            return None
        return real_find_spec(name, package)

    importlib.util.find_spec = find_spec
    sys.argv[0] = "wattlab"
    from wattlab.cli import main

    main()
    """
)


def wattlab(
    args: list[str], cwd: Path, *, hide: tuple[str, ...] = (), timeout_s: float = 300
) -> subprocess.CompletedProcess[str]:
    """``wattlab ARGS`` in a fresh subprocess of this interpreter, with the packages in ``hide``
    made unimportable (as if not installed)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["WATTLAB_STATE_DIR"] = str(cwd / "state")  # the power-limit journal
    env["WATTLAB_FORBID_POWER_LIMITS"] = "1"
    env["COLUMNS"] = "200"
    return subprocess.run(
        [sys.executable, "-c", _RUN_CLI, ",".join(hide), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
    )


def said(result: subprocess.CompletedProcess[str]) -> str:
    out, err = result.stdout[-3000:], result.stderr[-3000:]
    return f"exit {result.returncode}\nstdout:\n{out}\nstderr:\n{err}"


def ok(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback (most recent call last)" not in result.stderr, said(result)
    assert result.returncode == 0, said(result)


def one_sentence_exit_2(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The error contract: exit 2, one line on stderr, no traceback; returns the line."""
    assert "Traceback" not in result.stderr, said(result)
    assert result.returncode == 2, said(result)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("wattlab: error: "), said(result)
    for needle in needles:
        assert needle in lines[0], said(result)
    return lines[0]


def names_the_extra(line: str, extra: str) -> None:
    """The missing-extra sentence: which extra, and an install line for it."""
    assert f"(wattlab's {extra!r} extra), which is not installed" in line, line
    assert re.search(r"install it with: .*pip.* install .*\[" + extra + r"\]'?$", line), line


# -- every command: its help and the defaults it gets ---------------------------------------


def command_tree() -> dict[tuple[str, ...], Any]:
    """Every command of the typer app as click sees it, by path (typer may vendor click)."""
    import typer

    from wattlab.cli.app import app

    found: dict[tuple[str, ...], Any] = {}

    def walk(command: Any, path: tuple[str, ...]) -> None:
        found[path] = command
        for name, sub in (getattr(command, "commands", None) or {}).items():
            walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return found


def test_the_list_is_every_command():
    assert sorted(command_tree()) == sorted(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "wattlab")
def test_every_command_has_help(command: tuple[str, ...], tmp_path: Path) -> None:
    result = wattlab([*command, "--help"], tmp_path)
    ok(result)
    assert f"Usage: wattlab {' '.join(command)}".rstrip() in result.stdout, said(result)
    options = [
        opt
        for param in command_tree()[command].params
        for opt in param.opts
        if opt.startswith("--")
    ]
    for option in options:  # every option is listed (a help that breaks midway lists fewer)
        assert option in result.stdout, (option, said(result))


@pytest.mark.parametrize(
    "command", [c for c in COMMANDS if c not in ((), ("power",))], ids=" ".join
)
def test_every_option_reaches_the_command_with_its_declared_default(command: tuple[str, ...]):
    """What the command function receives when an option is not given is the default its
    signature declares, whatever typer and click versions build the parser (no enum, no None
    turned into something else)."""
    click_command = command_tree()[command]
    ctx = click_command.make_context(
        " ".join(("wattlab", *command)), list(REQUIRED_ARGS.get(command, []))
    )
    signature = inspect.signature(click_command.callback)  # typer's wrapper keeps __wrapped__
    checked = 0
    for param in click_command.params:
        declared = signature.parameters[param.name].default
        if declared is inspect.Parameter.empty:
            continue  # a required argument, given above
        got = ctx.params[param.name]
        if getattr(param, "multiple", False) and declared is None:
            assert got in (None, ()), (param.name, got)  # the command takes either
        else:
            assert got == declared and type(got) is type(declared), (param.name, got, declared)
        checked += 1
    assert checked == sum(1 for p in click_command.params if not p.required)


# -- each command's default path -------------------------------------------------------------


def test_bare_wattlab_prints_its_help_and_exits_2(tmp_path: Path) -> None:
    result = wattlab([], tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, said(result)
    assert "Usage: wattlab" in result.stderr and "devices" in result.stderr, said(result)


def test_devices_lists_every_meter_with_a_reason_for_each_missing_one(tmp_path: Path) -> None:
    result = wattlab(["devices", "--json", "-"], tmp_path)
    ok(result)
    meters = json.loads(result.stdout)["meters"]
    assert any(m["status"] == "ok" and m["in_total"] for m in meters), meters
    for meter in meters:
        assert meter["status"] in ("ok", "missing"), meter
        if meter["status"] == "missing":
            assert meter["reason"] and meter["fix"], meter
        else:
            assert meter["provenance"] in ("measured", "sampled", "estimated"), meter


def test_monitor_measures_a_command_at_its_default_interval(tmp_path: Path) -> None:
    result = wattlab(
        ["monitor", "--json", "-", "--", sys.executable, "-c", "import time; time.sleep(0.3)"],
        tmp_path,
    )
    ok(result)
    measured = json.loads(result.stdout)
    assert measured["exit_code"] == 0 and measured["interval_s"] == 0.1, measured
    assert measured["duration_s"] >= 0.3 and measured["energy_kwh"] > 0, measured


def test_monitor_passes_on_the_commands_exit_code(tmp_path: Path) -> None:
    result = wattlab(["monitor", "--", sys.executable, "-c", "raise SystemExit(3)"], tmp_path)
    assert result.returncode == 3 and "Traceback" not in result.stderr, said(result)


def test_run_without_torch_names_the_train_extra_and_writes_nothing(tmp_path: Path) -> None:
    result = wattlab(["run", "--epochs", "1", "--db", "w.db"], tmp_path, hide=TRAIN)
    names_the_extra(one_sentence_exit_2(result, "training a model needs"), "train")
    assert not (tmp_path / "w.db").exists()


@pytest.mark.slow  # trains
@pytest.mark.extra("train")
def test_run_trains_and_stores_one_run(tmp_path: Path) -> None:
    result = wattlab(
        ["run", "--model", "mobilenet_v3_small", "--stem", "imagenet", "--train-samples", "256",
         "--test-samples", "64", "--batch-size", "64", "--epochs", "1", "--warmup-steps", "1",
         "--no-progress", "--db", "w.db", "--json", "-"],
        tmp_path,
    )  # fmt: skip
    ok(result)
    row = json.loads(result.stdout)
    run = row.get("run", row)
    assert run["status"] == "ok" and run["precision"] == "fp32", run  # the declared default
    assert run["device"] in ("cpu", "cuda") and run["energy_total_j"] > 0, run


@pytest.mark.extra("train", "codecarbon")
def test_sweep_plans_a_preset_and_writes_nothing(tmp_path: Path) -> None:
    result = wattlab(["sweep", "quickstart", "--dry-run", "--db", "w.db", "--json", "-"], tmp_path)
    ok(result)
    plan = json.loads(result.stdout)
    assert plan["sweep"] == "quickstart" and plan["runs"], plan
    assert all(r["action"] == "run" for r in plan["runs"]), plan
    assert not (tmp_path / "w.db").exists()


def test_a_preset_asking_for_codecarbon_without_it_names_the_extra(tmp_path: Path) -> None:
    result = wattlab(
        ["sweep", "quickstart", "--dry-run", "--db", "w.db"], tmp_path, hide=("codecarbon",)
    )
    names_the_extra(one_sentence_exit_2(result, "CodeCarbon was asked for"), "codecarbon")


COMMAND_SPEC = """\
name: smoke
command: [{python}, -c, "import os, time; time.sleep(0.05 * int(os.environ['SMOKE_N']))"]
label: probe
env: {{SMOKE_N: "{{n}}"}}
grid: {{n: [1, 2]}}
"""


def test_a_command_sweep_plans_with_its_documented_defaults(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(COMMAND_SPEC.format(python=json.dumps(sys.executable)))
    result = wattlab(["sweep", "spec.yaml", "--dry-run", "--db", "w.db", "--json", "-"], tmp_path)
    ok(result)
    plan = json.loads(result.stdout)
    # the defaults docs/commands.md states for a command sweep
    assert plan["warmup_runs"] == 1 and plan["cooldown_s"] == 10.0, plan
    assert len(plan["runs"]) == 2 * 3 and not (tmp_path / "w.db").exists(), plan


@pytest.fixture(scope="module")
def small_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database of four real runs of a command sweep (no extra needed)."""
    folder = tmp_path_factory.mktemp("smoke-db")
    spec = COMMAND_SPEC.format(python=json.dumps(sys.executable))
    spec += "repetitions: 2\nwarmup_runs: 0\ncooldown_s: 0\n"
    (folder / "spec.yaml").write_text(spec)
    ok(wattlab(["sweep", "spec.yaml", "--db", "w.db"], folder))
    return folder / "w.db"


@pytest.mark.slow  # a sweep
def test_report_on_a_small_database_writes_its_files(small_db: Path, tmp_path: Path) -> None:
    result = wattlab(["report", "--db", str(small_db), "--out", "rep"], tmp_path)
    ok(result)
    for name in ("report.md", "report.html", "summary.json", "energy_vs_time.png"):
        assert (tmp_path / "rep" / name).stat().st_size > 0, name
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert "probe n=1" in json.dumps(summary) and "probe n=2" in json.dumps(summary)


@pytest.mark.slow  # a sweep
def test_export_writes_every_table(small_db: Path, tmp_path: Path) -> None:
    result = wattlab(["export", "--db", str(small_db), "--out", "tables"], tmp_path)
    ok(result)
    runs = (tmp_path / "tables" / "runs.csv").read_text().splitlines()
    assert len(runs) == 1 + 4, runs
    for table in ("windows", "trace", "sweeps"):
        assert (tmp_path / "tables" / f"{table}.csv").stat().st_size > 0, table


@pytest.mark.slow  # a sweep
def test_advise_on_a_cpu_run_says_why_not(small_db: Path, tmp_path: Path) -> None:
    result = wattlab(["advise", "--db", str(small_db), "--run", "1"], tmp_path)
    one_sentence_exit_2(result, "ran on the CPU")


def test_report_and_export_on_a_missing_database_are_one_sentence(tmp_path: Path) -> None:
    report = ["report", "--db", "nothing.db", "--out", "rep"]
    one_sentence_exit_2(wattlab(report, tmp_path), "nothing.db")
    export = ["export", "--db", "nothing.db", "--out", "tables"]
    one_sentence_exit_2(wattlab(export, tmp_path), "nothing.db")
    assert not (tmp_path / "nothing.db").exists()


@pytest.mark.parametrize("command", ["estimate", "advise"])
def test_estimate_and_advise_without_torch_name_the_train_extra(
    command: str, tmp_path: Path
) -> None:
    # a model whose cost the shipped reference data does not hold (resnet18's it does: without
    # torch, estimate takes it from there; tests/estimate/test_estimate_without_torch.py)
    result = wattlab(
        [command, "--model", "my_net", "--epochs", "2", "--gpu-name", "H200"],
        tmp_path,
        hide=TRAIN,
    )
    line = one_sentence_exit_2(result, "counting the cost of model 'my_net' needs")
    names_the_extra(line, "train")
    assert "resnet18" in line  # the models it does hold, to pick instead


@pytest.mark.slow  # a first estimate fits PRE
@pytest.mark.extra("train")
def test_estimate_predicts_at_the_declared_defaults(tmp_path: Path) -> None:
    result = wattlab(
        ["estimate", "--model", "resnet18", "--epochs", "2", "--gpu-name", "H200", "--json", "-"],
        tmp_path,
        timeout_s=900,
    )
    ok(result)
    methods = json.loads(result.stdout)["methods"]
    # the FLOPs method's note spells out the training it counted: the declared defaults
    # (--batch-size 256, --train-size 50000, --precision fp32) reached the command
    samples = 2 * (50000 // 256) * 256
    assert f"3 x forward x {samples} samples" in methods["flops"]["notes"], methods["flops"]
    assert "fp32" in methods["flops"]["notes"] and methods["pre"]["energy_j"] > 0, methods
    assert "fitting PRE on" in result.stderr, said(result)  # the first fit says it is fitting


@pytest.mark.slow  # leave-one-out over the packaged profiles, ~6 s on 2 cores
def test_estimate_power_limits_scores_the_packaged_profiles(tmp_path: Path) -> None:
    from wattlab.estimate.zeus_profiles import profiles_dir

    result = wattlab(["estimate", "power-limits", "--profiles", str(profiles_dir())], tmp_path)
    ok(result)
    assert "A40+resnet18+gpu0" in result.stdout and "V100+resnet50+gpu0" in result.stdout


def test_power_restore_with_nothing_left_behind(tmp_path: Path) -> None:
    result = wattlab(["power", "restore"], tmp_path)
    ok(result)
    assert "nothing to restore" in result.stdout + result.stderr, said(result)


def test_an_import_of_an_extra_nobody_checked_is_one_sentence(tmp_path: Path) -> None:
    """The command line's last net: any command that meets a missing extra's package says which
    extra and how to install it (here `wattlab devices`, made to import mlflow)."""
    script = textwrap.dedent(
        """
        import sys
        sys.modules["mlflow"] = None
        sys.argv[:] = ["wattlab", "devices"]
        def devices():
            import mlflow  # noqa: F401  (an import no check foresaw)
        import wattlab.cli.app as app
        for info in app.app.registered_commands:
            if info.name == "devices":
                info.callback = devices
        app.main()
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    names_the_extra(one_sentence_exit_2(result, "wattlab devices needs the 'mlflow'"), "mlflow")
