"""The `wattlab` command line: the typer app, one registration per command (each command lives
in its group's module, ``wattlab/cli/*_cmd.py``), and ``main``, which turns a WattlabError or a
usage error into one line on stderr and exit code 2 (docs/errors.md has the whole contract).

Options are the ``Annotated`` aliases of ``wattlab.cli.options``, which check numbers and output
paths while the command line is parsed; fixed choices are the enums of ``wattlab.cli.choices``.
"""

from __future__ import annotations

import re
import signal
import sys

import typer

from wattlab.cli import (
    advise_cmd,
    compare_cmd,
    devices_cmd,
    estimate_cmd,
    export_cmd,
    monitor_cmd,
    power_cmd,
    report_cmd,
    run_cmd,
    sweep_cmd,
)
from wattlab.errors import Interrupted, WattlabError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Measure, compare and predict the energy, time and CO2e of deep-learning training.",
)


def _print_version(value: bool) -> None:
    if value:
        from wattlab import __version__

        print(f"wattlab {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        help="Print wattlab's version and exit.",
        callback=_print_version,
        is_eager=True,
    ),
) -> None:
    """Measure, compare and predict the energy, time and CO2e of deep-learning training."""


# --- the commands, in the order `wattlab --help` lists them ------------------------------
app.command("devices")(devices_cmd.devices)
app.command("monitor", context_settings=monitor_cmd.CONTEXT_SETTINGS)(monitor_cmd.monitor)
app.command("run")(run_cmd.run)
app.command("sweep")(sweep_cmd.sweep)
app.command("report")(report_cmd.report)
app.command("compare")(compare_cmd.compare)
app.add_typer(estimate_cmd.estimate_app, name="estimate")
app.add_typer(advise_cmd.advise_app, name="advise")
app.command("export")(export_cmd.export)
app.add_typer(power_cmd.power_app, name="power")


def _click_error_class() -> type[Exception]:
    """click's ClickException (typer may vendor its own click, so find it through typer)."""
    for cls in typer.BadParameter.__mro__:
        if cls.__name__ == "ClickException":
            return cls
    return typer.BadParameter


def _usage_error(error: Exception) -> str:
    """A click usage error (unknown option, value of the wrong type) as one line."""
    message = " ".join(error.format_message().split())  # type: ignore[attr-defined]
    ctx = getattr(error, "ctx", None)
    path = ctx.command_path if ctx is not None else "wattlab"
    return f"{message.rstrip('.')}; see `{path} --help`."


def _command_path(argv: list[str]) -> str:
    """The command being run (``wattlab estimate power-limits``), read from the command line."""
    command: object = typer.main.get_command(app)  # a click Group (typer may vendor click)
    words = ["wattlab"]
    for word in argv:
        commands = getattr(command, "commands", None)
        if not isinstance(commands, dict) or word not in commands:
            break
        words.append(word)
        command = commands[word]
    return " ".join(words)


def _missing_extra(error: BaseException) -> str | None:
    """One sentence for an error that comes from an optional extra not being installed (the
    commands check their extras first; this catches any import they did not foresee)."""
    from wattlab.extras import missing_extra_module, missing_sentence

    module = missing_extra_module(error)
    if module is None:
        return None
    return missing_sentence(_command_path(sys.argv[1:]), module)


# options whose value may be left out, with the value they then take
OPTIONAL_VALUES = {("advise", "--probe"): "auto"}


def optional_values(argv: list[str]) -> list[str]:
    """``argv`` with the default value put after an option that may go without one
    (``wattlab advise --probe`` means ``--probe auto``): when the option is last, or the next
    word is another option."""
    out = list(argv)
    for (command, flag), default in OPTIONAL_VALUES.items():
        if not out or out[0] != command or "--" in out[: out.index(flag) if flag in out else 0]:
            continue
        for i, word in enumerate(out):
            if word == flag and (i + 1 == len(out) or _is_option(out[i + 1])):
                out.insert(i + 1, default)
                break
    return out


def _is_option(word: str) -> bool:
    """Whether ``word`` is an option rather than a value: it starts with '-' and is not a
    number (``--probe -5`` gives -5, refused with the flag's range, not 'No such option')."""
    if not word.startswith("-") or word == "-":
        return False
    try:
        float(word)
    except ValueError:
        return True
    return False


_LONG_WORD = re.compile(r"\S{241,}")
# a quoted value: its opening quote starts a word (after a space, '=' or '(', or the line's
# start), so the text between two quoted words is never taken for one
_LONG_QUOTED = re.compile("(?<![^\\s=(])(?:('[^']{200})[^']{41,}'|(\"[^\"]{200})[^\"]{41,}\")")


def one_line(message: str) -> str:
    """An error message on one line, every value it echoes cut to about 200 characters (a
    quoted value, or any run of 240 characters without a space): a 5 000-character flag value
    is never said whole."""
    text = " ".join(message.split())
    text = _LONG_QUOTED.sub(lambda m: (m.group(1) or m.group(2)) + "..." + m.group(0)[0], text)
    return _LONG_WORD.sub(lambda m: m.group(0)[:200] + "...", text)


def main() -> None:
    """Console entry point: WattlabError or a usage error -> one line on stderr, exit code 2;
    Ctrl-C -> 130, SIGTERM and SIGHUP -> 128 + N, one line each."""
    from wattlab import stop_signals

    stop_signals.install()
    click_error = _click_error_class()
    try:
        code = app(args=optional_values(sys.argv[1:]), standalone_mode=False, prog_name="wattlab")
    except WattlabError as error:
        print(f"wattlab: error: {one_line(str(error))}", file=sys.stderr)
        sys.exit(error.exit_code)
    except click_error as error:  # usage errors: exit 2
        if type(error).__name__ == "NoArgsIsHelpError":  # bare `wattlab`: the help, as is
            print(error.format_message(), file=sys.stderr)  # type: ignore[attr-defined]
            sys.exit(2)
        print(f"wattlab: error: {one_line(_usage_error(error))}", file=sys.stderr)
        sys.exit(getattr(error, "exit_code", 2))
    except typer.Abort:
        stop_signals.exit_stopped(signal.SIGINT)  # the one line, 130
    except Interrupted as stop:
        stop_signals.exit_stopped(stop.signum)  # the one line, 128 + N
    except KeyboardInterrupt:
        stop_signals.exit_stopped(signal.SIGINT)
    except BaseException:
        from wattlab.stop_signals import RECEIVED, exit_stopped

        if RECEIVED:  # a library turned the interrupt into another error: still one line
            exit_stopped(RECEIVED[0])
        said = _missing_extra(sys.exc_info()[1] or BaseException())
        if said is not None:
            print(f"wattlab: error: {said}", file=sys.stderr)
            sys.exit(2)
        raise
    if stop_signals.RECEIVED:  # typer turns a KeyboardInterrupt into a quiet Exit(130)
        stop_signals.exit_stopped(stop_signals.RECEIVED[0])
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
