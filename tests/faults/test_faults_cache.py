"""Third fault campaign (issue 33), the cache folder: ``$WATTLAB_CACHE_DIR`` may be a folder
other users can write (a lab's shared cache), so nothing in it is trusted that is not the
user's own, nothing is written through a link planted there, the fitted-PRE cache deletes only
its own files, and a damaged cache file is a miss (refitted, said in one line, replaced),
never a traceback, a hang or a crash.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import threading
from pathlib import Path

import pytest

from tests.estimate.test_estimate_pre import config, fake_models, synthetic_runs  # noqa: F401

OPTIONS = {"search_iter": 1, "families": ("physics",)}
OTHER_UID = 65534  # nobody


def _runs():
    return synthetic_runs(models=("r18", "r50", "vgg"), batches=(256, 512), reps=1)


def _fit(folder: Path, data: bytes = b"data"):
    from wattlab.estimate import pre_cache

    calls: list[int] = []

    def load():
        calls.append(1)
        return _runs()

    model, how = pre_cache.fit_cached(data, load, directory=folder, **OPTIONS)
    return model, how, calls


def _entry(folder: Path, data: bytes = b"data") -> Path:
    from wattlab.estimate import pre_cache

    return folder / f"pre-{pre_cache.fit_key(data, OPTIONS)}.json"


def _one_note(err: str, name: str) -> str:
    """The one line about the cache file (a refit then says it is fitting, on a line of its
    own: issue 31's line for a silent wait)."""
    lines = [
        line
        for line in err.splitlines()
        if line.strip() and not line.startswith("wattlab: fitting PRE on")
    ]
    assert len(lines) == 1, err
    assert lines[0].startswith("wattlab: ") and name in lines[0], err
    return lines[0]


# -- the fitted-PRE cache: pruning ----------------------------------------------------------------


def test_pruning_removes_only_the_caches_own_files(fake_models, tmp_path: Path) -> None:  # noqa: F811
    from wattlab.estimate import pre_cache

    cache = tmp_path / "cache"
    model, how, _ = _fit(cache)
    assert how == "fitted and cached"
    mine = {}
    for i in range(10):  # the user's files: some look like the cache's names
        mine[f"pre-{i:040x}.json"] = json.dumps({"key": "mine", "notes": i})
        mine[f"pre-notes-{i}.json"] = "my notes\n"
    for name, text in mine.items():
        (cache / name).write_text(text)
        os.utime(cache / name, (1, 1))  # older than every fit: pruned first if taken for one
    for i in range(pre_cache.KEEP_FILES + 4):
        assert pre_cache.save(model, f"{i + 1:040x}"[:40].replace("0", "a"), cache) is not None
    for name, text in mine.items():
        assert (cache / name).read_text() == text, f"{name} was not the cache's to delete"
    fits = [p for p in cache.glob("pre-*.json") if p.name not in mine]
    assert len(fits) == pre_cache.KEEP_FILES  # its own old fits were pruned


# -- the fitted-PRE cache: a damaged file is a miss ----------------------------------------


def _damage(kind: str, path: Path, good: str) -> None:
    path.unlink()
    if kind == "nested":
        prefix = good[: good.index('"model"')]
        path.write_text(prefix + '"model": ' + "[" * 200_000 + "]" * 200_000 + "}")
    elif kind == "huge-integer":
        path.write_text(re.sub(r'"seed": \d+', '"seed": 1' + "0" * 400, good))
    elif kind == "infinite-number":
        path.write_text(re.sub(r'"seed": \d+', '"seed": 1e999', good))
    elif kind == "nan-coefficients":
        doc = json.loads(good)
        doc["model"]["physics_time"]["log"] = [float("nan")] * len(
            doc["model"]["physics_time"]["log"]
        )
        doc["model"]["chain"]["medians"] = {
            k: float("inf") for k in doc["model"]["chain"]["medians"]
        }
        path.write_text(json.dumps(doc))
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "link-to-dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "huge-file":
        with path.open("wb") as handle:
            handle.write(good[:60].encode())
            handle.truncate(8 << 30)  # 8 GiB, sparse
    else:
        raise AssertionError(kind)


DAMAGE = ["nested", "huge-integer", "infinite-number", "nan-coefficients", "fifo",
          "link-to-dev-zero", "huge-file"]  # fmt: skip


@pytest.mark.parametrize("kind", DAMAGE)
def test_a_damaged_fit_is_refitted_said_in_one_line_and_replaced(
    kind: str,
    fake_models,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cache = tmp_path / "cache"
    first, how, _ = _fit(cache)
    assert how == "fitted and cached"
    path = _entry(cache)
    _damage(kind, path, path.read_text())
    capsys.readouterr()
    result: list = []
    worker = threading.Thread(target=lambda: result.append(_fit(cache)), daemon=True)
    worker.start()
    worker.join(60)
    if worker.is_alive():
        if kind == "fifo":  # let the blocked reader go
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        pytest.fail(f"a {kind} cache file hangs the fit")
    model, how, calls = result[0]
    assert how == "fitted and cached" and calls == [1] and model is not None
    _one_note(capsys.readouterr().err, path.name)
    assert stat.S_ISREG(os.lstat(path).st_mode)  # replaced by a good fit
    again = _fit(cache)
    assert again[1] == "cached" and not again[2]
    values = config("r34")
    assert again[0].predict_config(**values).energy_j == pytest.approx(
        first.predict_config(**values).energy_j, rel=1e-9
    )


# -- a shared cache folder ------------------------------------------------------------------------


def _untrusted(kind: str, path: Path) -> None:
    if kind == "writable-by-others":
        path.chmod(0o666)
    elif kind == "writable-by-group":
        path.chmod(0o664)
    elif kind == "another-owner":
        if os.geteuid() != 0:
            pytest.skip("giving a file to another user needs root")
        os.chown(path, OTHER_UID, OTHER_UID)
        path.chmod(0o644)
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["writable-by-others", "writable-by-group", "another-owner"])
def test_a_planted_fit_is_not_used(
    kind: str,
    fake_models,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Another user's fit, its time coefficients x100, changes no estimate."""
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o1777)  # a shared folder, as /tmp
    honest, how, _ = _fit(cache)
    path = _entry(cache)
    doc = json.loads(path.read_text())
    x100 = math.log(100)  # the roofline's coefficients are kept as logs: every one x100
    physics = doc["model"]["physics_time"]
    physics["log"] = [v + x100 for v in physics["log"]]
    chain = doc["model"]["chain"]
    if chain["time"]["kind"] == "roofline":
        chain["time"]["log"] = [v + x100 for v in chain["time"]["log"]]
    path.write_text(json.dumps(doc))
    _untrusted(kind, path)
    capsys.readouterr()
    model, how, calls = _fit(cache)
    assert calls == [1], "the planted fit was used"
    note = _one_note(capsys.readouterr().err, path.name)
    assert "another user" in note or "can write" in note, note
    values = config("r34")
    assert model.predict_config(**values).duration_s == pytest.approx(
        honest.predict_config(**values).duration_s, rel=1e-9
    )


def test_a_cache_folder_that_is_a_link_is_not_used(
    fake_models,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    real = tmp_path / "elsewhere"
    real.mkdir()
    (tmp_path / "cache").symlink_to(real)
    _, how, calls = _fit(tmp_path / "cache")
    assert calls == [1] and how == "fitted (not cached)"
    assert list(real.iterdir()) == []
    _one_note(capsys.readouterr().err, "cache")


def test_the_caches_files_are_writable_by_nobody_else(
    fake_models,  # noqa: F811
    tmp_path: Path,
) -> None:
    old = os.umask(0o002)  # a group-writable umask must not make a group-writable cache
    try:
        _, how, _ = _fit(tmp_path / "cache")
    finally:
        os.umask(old)
    assert how == "fitted and cached"
    assert stat.S_IMODE(_entry(tmp_path / "cache").stat().st_mode) & 0o022 == 0
    assert _fit(tmp_path / "cache")[1] == "cached"


# -- the synthetic data cache ------------------------------------------------------------

SEED = 77  # not the default seed: these tests never meet a real cache entry


@pytest.fixture
def small_split():
    """A small split of seed SEED in the memory cache, as if just generated."""
    import torch

    from wattlab.train import data

    data.clear_memory_cache()
    x = torch.full((data._CHUNK, 3, 32, 32), 7, dtype=torch.uint8)
    y = torch.zeros(data._CHUNK, dtype=torch.long)
    for split in ("train", "test"):
        data._memory_cache[(data.DEFAULT_SYNTHETIC_TASK, SEED, split)] = (x, y)
    yield x
    data.clear_memory_cache()


@pytest.mark.extra("train")  # small_split is a torch tensor
def test_the_data_cache_never_writes_through_a_planted_link(small_split, tmp_path: Path) -> None:
    from wattlab.train import data

    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o1777)
    victim = tmp_path / "victim.txt"
    victim.write_text("the victim's file\n")
    for split in ("train", "test"):
        path = data._disk_cache_path(cache, SEED, split, data.DEFAULT_SYNTHETIC_TASK)
        for pid in range(max(2, os.getpid() - 50), os.getpid() + 50):  # every name it may pick
            (cache / f"{path.name}.{pid}.tmp").symlink_to(victim)
    data._save_disk_cache(cache, SEED, data.DEFAULT_SYNTHETIC_TASK)
    assert victim.read_text() == "the victim's file\n"
    for split in ("train", "test"):
        path = data._disk_cache_path(cache, SEED, split, data.DEFAULT_SYNTHETIC_TASK)
        assert stat.S_ISREG(os.lstat(path).st_mode), f"{split}: no cache file written"
        assert stat.S_IMODE(os.lstat(path).st_mode) & 0o022 == 0
    leftovers = [p.name for p in cache.iterdir() if not p.is_symlink() and p.suffix == ".tmp"]
    assert leftovers == []


@pytest.mark.extra("train")  # small_split is a torch tensor
@pytest.mark.parametrize(
    "kind", ["trusted", "writable-by-others", "writable-by-group", "another-owner", "fifo"]
)
def test_the_data_cache_reads_only_the_users_own_files(
    kind: str, small_split, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    from wattlab.train import data

    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o1777)
    path = data._disk_cache_path(cache, SEED, "train", data.DEFAULT_SYNTHETIC_TASK)
    poisoned = torch.full_like(small_split, 200)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        torch.save({"x": poisoned, "y": torch.ones(len(poisoned), dtype=torch.long)}, path)
        path.chmod(0o644)
        if kind != "trusted":
            _untrusted(kind, path)
    data.clear_memory_cache()
    capsys.readouterr()
    done = threading.Thread(
        target=data._load_disk_cache,
        args=(cache, SEED, data.DEFAULT_SYNTHETIC_TASK),
        daemon=True,
    )
    done.start()
    done.join(30)
    if done.is_alive():
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("a FIFO in the cache hangs the data load")
    key = (data.DEFAULT_SYNTHETIC_TASK, SEED, "train")
    err = capsys.readouterr().err
    if kind == "trusted":
        assert int(data._memory_cache[key][0][0, 0, 0, 0]) == 200  # the positive control
        assert err == ""
    else:
        assert key not in data._memory_cache, "a file others could have planted was read"
        _one_note(err, path.name)
