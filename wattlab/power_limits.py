"""GPU power-limit sessions: check, apply, always restore, and a crash journal.

This is the only module that changes a GPU setting. It talks to NVML only through the adapter in
``wattlab.meters.nvml`` (``GpuDevice``: uuid, name, limits, set limit, all in W). A session::

    with PowerLimitSession(pynvml, [0, 1], limit_w=400) as session:
        train()            # GPUs 0 and 1 run at 400 W; session.changes says what was changed

1. refuses a limit outside nvmlDeviceGetPowerManagementLimitConstraints, and a process that is
   not root, before changing anything (PowerLimitError, one sentence);
2. writes a journal (JSON; temp file + fsync + os.replace) with every GPU's UUID and original
   limit BEFORE it changes any limit;
3. sets the limits, and on exit ALWAYS puts the originals back: after success, an exception,
   KeyboardInterrupt, or SIGTERM (a handler raises ``TerminatedBySignal`` during the session so
   that finally-blocks run; the previous handler comes back afterwards); then deletes the journal.

After SIGKILL or a power loss the journal remains: ``restore_from_journal`` (``wattlab power
restore``) puts the original limits back by UUID; a new session does so by itself when it finds
a journal whose process is gone. Nothing is ever set unless a limit was requested. Everything
public here is in W; the journal keeps whole milliwatts (``*_limit_mw``), NVML's resolution, so
that a restore puts back exactly what was there.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from wattlab.errors import PowerLimitError, echo
from wattlab.meters.nvml import (
    GpuDevice,
    GpuHandle,
    NvmlError,
    devices_by_uuid,
    open_session,
    visible_gpus,
)
from wattlab.processes import TERMINATE_SIGNALS, process_started_unix, same_process_alive

STATE_DIR_ENV = "WATTLAB_STATE_DIR"
JOURNAL_NAME = "power-journal.json"
JOURNAL_VERSION = 1
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


class TerminatedBySignal(SystemExit):
    """Raised by the session's SIGTERM handler so that with/finally blocks run. Exit code
    128 + signal number (143 for SIGTERM), like a shell reports a signal death."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


def _state_dir(env: Mapping[str, str]) -> Path:
    state_dir = env.get(STATE_DIR_ENV)
    if state_dir:
        return Path(state_dir)
    return Path.home() / ".local" / "state" / "wattlab"


def journal_name(host: str | None = None) -> str:
    """``power-journal-HOST.json``: one journal per host, so that hosts sharing a state folder
    (a home directory on NFS) never take each other's journal for their own."""
    host = socket.gethostname() if host is None else host
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", host).strip(".") or "unknown-host"
    return f"power-journal-{safe}.json"


def default_journal_path(env: Mapping[str, str] | None = None, host: str | None = None) -> Path:
    """This host's journal: $WATTLAB_STATE_DIR/power-journal-HOST.json, else
    ~/.local/state/wattlab/power-journal-HOST.json."""
    env = os.environ if env is None else env
    return _state_dir(env) / journal_name(host)


def legacy_journal_path(env: Mapping[str, str] | None = None) -> Path:
    """Where wattlab before 0.x kept the journal of every host (``power-journal.json``); still
    read, and restored when this host wrote it."""
    env = os.environ if env is None else env
    return _state_dir(env) / JOURNAL_NAME


def journals_here(env: Mapping[str, str] | None = None) -> list[Path]:
    """The journals this host may restore: its own, and a legacy shared one that it wrote (or
    that names no host). A legacy journal of another host is left to that host."""
    paths = [default_journal_path(env)]
    legacy = legacy_journal_path(env)
    if legacy.exists():
        try:
            host = json.loads(legacy.read_text()).get("hostname")
        except (OSError, ValueError, AttributeError):
            host = None  # unreadable: restore_from_journal names it in one sentence
        if not host or host == socket.gethostname():
            paths.append(legacy)
    return [p for p in paths if p.exists()]


FORBID_ENV = "WATTLAB_FORBID_POWER_LIMITS"


def power_limits_forbidden(env: Mapping[str, str] | None = None) -> bool:
    """True when the machine's owner forbids changing GPU power limits (a shared GPU)."""
    env = os.environ if env is None else env
    return env.get(FORBID_ENV, "").strip().lower() not in ("", "0", "false", "no")


@dataclass(frozen=True)
class LimitChange:
    """One GPU's limit change in a session. Units: W."""

    job_index: int
    physical_index: int
    uuid: str
    name: str
    original_limit_w: float
    limit_w: float


def _boot_id() -> str | None:
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return None


def _write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Write JSON so that a crash leaves either the old file or the new one, never half."""
    from wattlab.jsonio import write_text_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(data, indent=2))  # O_EXCL|O_NOFOLLOW temp, then rename
    try:
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _read_journal(path: Path) -> dict[str, Any]:
    """The journal, checked entry by entry: a dict with a ``gpus`` list of dicts, each with a
    text ``uuid`` and a whole positive ``original_limit_mw``; ``pid`` a whole number and
    ``hostname`` text when present. Anything else is one sentence, never a TypeError."""
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or not isinstance(data.get("gpus"), list):
            raise ValueError("no 'gpus' list")
    except (OSError, ValueError) as exc:
        raise PowerLimitError(
            f"the power-limit journal {path} cannot be read ({exc}); check the GPUs' limits "
            "with nvidia-smi -q -d POWER, then delete the file."
        ) from None
    problem = _journal_problem(data)
    if problem:
        raise PowerLimitError(
            f"the power-limit journal {path} is malformed ({problem}); nothing was restored: "
            "check the GPUs' limits with nvidia-smi -q -d POWER, then delete the file."
        )
    return data


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _journal_problem(data: Mapping[str, Any]) -> str:
    """What is wrong with a journal's fields, or '' when every entry is usable."""
    pid = data.get("pid")
    if pid is not None and not _whole(pid):
        return f"pid {echo(pid)} is not a whole number"
    for key in ("hostname", "boot_id"):
        if data.get(key) is not None and not isinstance(data.get(key), str):
            return f"{key} {echo(data.get(key))} is not text"
    for i, entry in enumerate(data["gpus"]):
        if not isinstance(entry, dict):
            return f"entry {i} is {echo(entry)}, not an object"
        if not isinstance(entry.get("uuid"), str) or not entry.get("uuid"):
            return f"entry {i} has uuid {echo(entry.get('uuid'))}, not a GPU UUID"
        limit = entry.get("original_limit_mw")
        if not _whole(limit) or not 0 < limit <= 10**8:  # type: ignore[operator]
            return f"entry {i} has original_limit_mw {echo(limit)}, not a whole number of mW"
        if entry.get("name") is not None and not isinstance(entry.get("name"), str):
            return f"entry {i} has name {echo(entry.get('name'))}, not text"
    return ""


def _check_host(data: Mapping[str, Any], path: Path) -> None:
    """A journal written on another host is that host's record: kept, named, never applied
    (nor deleted) here."""
    host = data.get("hostname")
    here = socket.gethostname()
    if host and host != here:
        raise PowerLimitError(
            f"the power-limit journal {path} was written on host {host!r}, not on this host "
            f"({here!r}); it is kept untouched: run `wattlab power restore` on {host}."
        )


def _keep_unapplied(path: Path, data: Mapping[str, Any], unapplied: list[Any]) -> None:
    """Delete the journal when every entry was applied; otherwise rewrite it with only the
    entries that were not (the others are done)."""
    if not unapplied:
        path.unlink(missing_ok=True)
        return
    if len(unapplied) != len(data["gpus"]):
        _write_json_atomic(path, {**data, "gpus": unapplied})


def _owner_alive(data: Mapping[str, Any]) -> bool:
    """Whether the process that wrote a journal may still be running: its pid is alive and,
    when the journal recorded the owner's start time, held by a process that started then (a
    reused pid counts as gone)."""
    boot, now_boot = data.get("boot_id"), _boot_id()
    if boot and now_boot and boot != now_boot:
        return False  # written before a reboot
    pid = data.get("pid")
    started = data.get("pid_started_unix")
    started = float(started) if isinstance(started, (int, float)) else None
    return isinstance(pid, int) and pid > 0 and same_process_alive(pid, started)


def _program_of(pid: int) -> str | None:
    """The name of the program pid ``pid`` now runs, when it can be read."""
    try:
        import psutil

        return str(psutil.Process(pid).name())
    except Exception:
        return None


def _mw(limit_w: float) -> int:
    """Whole milliwatts, the resolution NVML sets limits in (and the journal keeps)."""
    return round(limit_w * 1000)


def restore_from_journal(
    pynvml: Any = None, journal_path: str | os.PathLike[str] | None = None, *, force: bool = False
) -> list[dict[str, object]]:
    """Put back the original power limits recorded in a journal (after SIGKILL or power loss),
    matched by GPU UUID, then delete the journal. A missing journal means nothing to do: [].

    Returns one dict per journal entry: uuid, name, limit_w (restored), previous_limit_w,
    status ("restored", "unchanged" or "gpu not found"). Refuses (PowerLimitError) while the
    process that wrote the journal still runs, unless ``force``.
    """
    path = Path(journal_path) if journal_path is not None else default_journal_path()
    if not path.exists():
        return []
    data = _read_journal(path)
    _check_host(data, path)
    pid = data.get("pid")
    if not force and pid != os.getpid() and _owner_alive(data):
        assert isinstance(pid, int)
        program = _program_of(pid)
        now = f" (now {program!r})" if program else ""
        raise PowerLimitError(
            f"the power-limit journal {path} belongs to process {pid}{now}, which is still "
            "running; stop it (its session restores the limits on exit), or, if that pid now "
            "names another program, run `wattlab power restore --force`."
        )
    results: list[dict[str, object]] = []
    try:
        nvml = open_session(pynvml)
    except Exception as exc:  # no driver here: ImportError, NVMLError_LibraryNotFound, ...
        raise PowerLimitError(
            f"the power-limit journal {path} cannot be applied here, because NVML is not "
            f"available ({type(exc).__name__}); run `wattlab power restore` on the machine whose "
            "GPUs it lists."
        ) from None
    unapplied: list[Any] = []  # entries not put back: kept in the journal
    with nvml as session:
        devices = devices_by_uuid(session)
        for index, entry in enumerate(data["gpus"]):
            uuid = str(entry["uuid"])
            original_mw = int(entry["original_limit_mw"])
            row: dict[str, object] = {
                "uuid": uuid,
                "name": entry.get("name", ""),
                "limit_w": original_mw / 1000.0,
                "previous_limit_w": None,
            }
            device = devices.get(uuid)
            if device is None:
                row["status"] = "gpu not found"
                results.append(row)
                unapplied.append(entry)
                continue
            current_w = device.power_limit_w()
            row["previous_limit_w"] = current_w
            if _mw(current_w) == original_mw:
                row["status"] = "unchanged"
            else:
                try:
                    device.set_power_limit_w(original_mw / 1000.0)
                except NvmlError as exc:
                    # keep this entry and every one not tried yet; drop those put back
                    _keep_unapplied(path, data, [*unapplied, *data["gpus"][index:]])
                    if exc.no_permission:
                        raise PowerLimitError(
                            f"restoring the power limit of {uuid} to {original_mw / 1000:g} W "
                            "needs root; run `sudo wattlab power restore`."
                        ) from exc
                    raise PowerLimitError(
                        f"NVML failed to restore the power limit of {uuid} to "
                        f"{original_mw / 1000:g} W ({exc}); the journal {path} is kept."
                    ) from exc
                row["status"] = "restored"
            results.append(row)
    _keep_unapplied(path, data, unapplied)
    return results


class PowerLimitSession:
    """Apply a GPU power limit for the duration of a ``with`` block; always restore it.

    ``gpus``: job indices (CUDA_VISIBLE_DEVICES numbering), ``GpuHandle``s, or None for every
    visible GPU. Give ``limit_w`` (W) or ``fraction`` (of each GPU's default limit), or neither
    for a session that changes nothing. ``journal_path`` defaults to ``default_journal_path()``.
    ``geteuid`` is a seam for tests (default os.geteuid where it exists).
    """

    def __init__(
        self,
        pynvml: Any = None,
        gpus: Sequence[int | GpuHandle] | None = None,
        limit_w: float | None = None,
        fraction: float | None = None,
        journal_path: str | os.PathLike[str] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        geteuid: Callable[[], int] | None = None,
    ) -> None:
        if limit_w is not None and fraction is not None:
            raise PowerLimitError(
                f"give a power limit in W ({limit_w}) or a fraction of the default "
                f"({fraction}), not both."
            )
        if limit_w is not None and not limit_w > 0:
            raise PowerLimitError(f"power limit {limit_w} W is not allowed; it must be positive.")
        if fraction is not None and not fraction > 0:
            raise PowerLimitError(
                f"power limit fraction {fraction} is not allowed; it must be above 0 "
                "(1.0 = the default limit)."
            )
        self._pynvml = pynvml
        self._gpus = gpus
        self.limit_w = limit_w
        self.fraction = fraction
        self.journal_path = (
            Path(journal_path) if journal_path is not None else default_journal_path(env)
        )
        self._env = env
        self._geteuid = geteuid if geteuid is not None else getattr(os, "geteuid", None)
        self.changes: list[LimitChange] = []
        self._session: Any = None  # an open NVML session while limits may be changed
        self._devices: dict[str, GpuDevice] = {}
        self._previous_handlers: dict[int, Any] = {}
        self._restoring = False
        self._pending_signal: int | None = None
        self._journal_written = False
        self.sigterm_handled = False

    @property
    def requested(self) -> bool:
        """True when this session changes limits (limit_w or fraction was given)."""
        return self.limit_w is not None or self.fraction is not None

    # -- set-up -----------------------------------------------------------------------------
    def _resolve(self) -> list[GpuHandle]:
        if self._gpus is None:
            return visible_gpus(self._pynvml, self._env)
        visible: list[GpuHandle] | None = None
        resolved = []
        for item in self._gpus:
            if isinstance(item, GpuHandle):
                resolved.append(item)
                continue
            if visible is None:
                visible = visible_gpus(self._pynvml, self._env)
            if not isinstance(item, int) or not 0 <= item < len(visible):
                raise PowerLimitError(
                    f"GPU {item!r} does not exist for this job; it sees {len(visible)} GPU(s), "
                    f"job indices 0-{len(visible) - 1}."
                    if visible
                    else f"GPU {item!r} does not exist for this job; it sees no GPU."
                )
            resolved.append(visible[item])
        return resolved

    def _target_mw(self, gpu: GpuHandle) -> int:
        """The requested limit for this GPU in whole mW, after checking its allowed range."""
        low_mw, high_mw = (_mw(v) for v in gpu.device.power_limit_range_w())
        if self.limit_w is not None:
            target_mw = _mw(self.limit_w)
            what = f"power limit {self.limit_w:g} W"
        else:
            assert self.fraction is not None
            default_mw = _mw(gpu.device.default_power_limit_w())
            target_mw = round(self.fraction * default_mw)
            what = (
                f"power limit fraction {self.fraction:g} of the default {default_mw / 1000:g} W "
                f"(= {target_mw / 1000:g} W)"
            )
        if not low_mw <= target_mw <= high_mw:
            raise PowerLimitError(
                f"{what} for GPU {gpu.job_index} ({gpu.name}) is outside its allowed range "
                f"{low_mw / 1000:g}-{high_mw / 1000:g} W."
            )
        return target_mw

    def _install_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set in the main thread
        for terminate in TERMINATE_SIGNALS:  # SIGTERM, and SIGHUP the same way
            self._previous_handlers[terminate] = signal.signal(terminate, self._on_signal)
        self.sigterm_handled = True

    def _on_signal(self, signum: int, frame: object) -> None:
        if self._restoring:
            self._pending_signal = signum  # finish restoring first
            return
        raise TerminatedBySignal(signum)

    def _uninstall_handlers(self) -> None:
        for signum, handler in self._previous_handlers.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._previous_handlers.clear()

    def __enter__(self) -> PowerLimitSession:
        if not self.requested:
            return self
        if power_limits_forbidden(self._env):
            raise PowerLimitError(
                f"GPU power limits are forbidden on this machine ({FORBID_ENV}=1 is set), so "
                f"{self._describe_request()} cannot be applied; leave the power limit unset."
            )
        self._session = open_session(self._pynvml)
        try:
            gpus = self._resolve()
            targets = []
            for gpu in gpus:
                try:
                    targets.append(self._target_mw(gpu))
                except NvmlError as exc:
                    raise PowerLimitError(
                        f"GPU {gpu.job_index} ({gpu.name}) does not report its power-limit "
                        f"range through NVML ({exc.name}), so no limit can be set."
                    ) from exc
            if self._geteuid is not None and self._geteuid() != 0:
                raise PowerLimitError(
                    f"setting a GPU power limit ({self._describe_request()}) needs root; run "
                    "with sudo, or leave the power limit unset."
                )
            self._handle_existing_journal()  # before reading the originals
            plan = [
                (gpu, target_mw, _mw(gpu.device.power_limit_w()))
                for gpu, target_mw in zip(gpus, targets, strict=True)
            ]
            self._install_handlers()
            journal = {
                "version": JOURNAL_VERSION,
                "pid": os.getpid(),
                "hostname": socket.gethostname(),
                "pid_started_unix": process_started_unix(os.getpid()),
                "boot_id": _boot_id(),
                "created_utc": datetime.now(timezone.utc).isoformat(),
                "gpus": [
                    {
                        "uuid": gpu.uuid,
                        "name": gpu.name,
                        "job_index": gpu.job_index,
                        "physical_index": gpu.physical_index,
                        "original_limit_mw": original_mw,
                        "requested_limit_mw": target_mw,
                    }
                    for gpu, target_mw, original_mw in plan
                ],
            }
            _write_json_atomic(self.journal_path, journal)
            self._journal_written = True
            for gpu, target_mw, original_mw in plan:
                self._devices[gpu.uuid] = gpu.device
                self.changes.append(
                    LimitChange(
                        gpu.job_index,
                        gpu.physical_index,
                        gpu.uuid,
                        gpu.name,
                        original_mw / 1000.0,
                        target_mw / 1000.0,
                    )
                )
                if target_mw == original_mw:
                    continue
                try:
                    gpu.device.set_power_limit_w(target_mw / 1000.0)
                except NvmlError as exc:
                    if exc.no_permission:
                        raise PowerLimitError(
                            f"NVML refused to set the power limit of GPU {gpu.job_index} "
                            f"({gpu.name}) to {target_mw / 1000:g} W (no permission); run as "
                            "root."
                        ) from exc
                    raise PowerLimitError(
                        f"NVML failed to set the power limit of GPU {gpu.job_index} "
                        f"({gpu.name}) to {target_mw / 1000:g} W ({exc})."
                    ) from exc
        except BaseException:
            self._finish(exc_in_flight=True)
            raise
        return self

    def _describe_request(self) -> str:
        if self.limit_w is not None:
            return f"{self.limit_w:g} W"
        return f"{self.fraction:g} of the default"

    def _handle_existing_journal(self) -> None:
        """Restore what a session that did not finish left in this host's journal (and in a
        legacy shared one this host wrote) before reading the originals."""
        paths = [self.journal_path]
        if self.journal_path == default_journal_path(self._env):
            paths += [p for p in journals_here(self._env) if p != self.journal_path]
        for path in paths:
            self._restore_left_behind(path)

    def _restore_left_behind(self, path: Path) -> None:
        if not path.exists():
            return
        data = _read_journal(path)
        _check_host(data, path)
        if _owner_alive(data):
            raise PowerLimitError(
                f"another power-limit session (process {data.get('pid')}) holds the journal "
                f"{path}; wait for it to finish, or set the limits once for all "
                "GPUs from one process."
            )
        restored = restore_from_journal(self._pynvml, path)
        left = [r for r in restored if r.get("status") == "gpu not found"]
        if left:  # the journal still holds them: never overwrite the only record
            raise PowerLimitError(
                f"the power-limit journal {path} holds {len(left)} GPU limit(s) "
                f"that could not be put back ({', '.join(str(r['uuid']) for r in left)} not "
                "found here), so no new limit is set; restore them where those GPUs are, "
                "or delete the file once their limits are checked."
            )
        warnings.warn(
            f"found the power-limit journal {path} of a session that did not "
            f"finish, and restored {len(restored)} GPU limit(s) from it first.",
            stacklevel=4,
        )

    # -- tear-down --------------------------------------------------------------------------
    def _restore(self) -> list[str]:
        """Put every changed GPU back; return the failures (empty when all went back)."""
        assert self._session is not None
        failures = []
        for change in reversed(self.changes):
            device = self._devices[change.uuid]
            original_mw = _mw(change.original_limit_w)
            try:
                if _mw(device.power_limit_w()) != original_mw:
                    device.set_power_limit_w(original_mw / 1000.0)
            except NvmlError as exc:
                failures.append(f"{change.uuid}: {exc}")
        return failures

    def _finish(self, exc_in_flight: bool) -> None:
        """Restore, uninstall the handler, delete the journal (only our own, and only when
        every GPU went back). SIGTERM and SIGINT that arrive meanwhile wait until the end."""
        self._restoring = True
        failures: list[str] = []
        previous_sigint = None
        if threading.current_thread() is threading.main_thread():
            previous_sigint = signal.signal(signal.SIGINT, self._on_signal)
        try:
            if self._session is not None:
                failures = self._restore()
                if self._journal_written and not failures:
                    self.journal_path.unlink(missing_ok=True)
                    self._journal_written = False
        finally:
            self._uninstall_handlers()
            if previous_sigint is not None:
                signal.signal(signal.SIGINT, previous_sigint)
            if self._session is not None:
                self._session.close()
                self._session = None
            self._restoring = False
        if failures:
            message = (
                f"could not restore the original GPU power limits ({'; '.join(failures)}); "
                f"the journal {self.journal_path} is kept, run `sudo wattlab power restore`."
            )
            if exc_in_flight:
                warnings.warn(message, stacklevel=3)
            else:
                raise PowerLimitError(message)
        pending, self._pending_signal = self._pending_signal, None
        if pending is not None and not exc_in_flight:
            if pending == signal.SIGINT:
                raise KeyboardInterrupt
            raise TerminatedBySignal(pending)

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self.requested:
            self._finish(exc_in_flight=exc_type is not None)

    def as_records(self) -> list[dict[str, object]]:
        """The changes as plain dicts (W) for run records."""
        return [asdict(c) for c in self.changes]
