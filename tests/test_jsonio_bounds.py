"""The one JSON cleaner, the one atomic writer, the output checks, and the bounds table."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pandas as pd
import pytest

from wattlab.bounds import BOUNDS, check_number
from wattlab.errors import ConfigError, DataError, echo
from wattlab.jsonio import (
    check_output_dir,
    check_writable,
    dump_json,
    jsonable,
    output_folder,
    write_atomic,
    write_text_atomic,
)


def test_jsonable_cleans_numpy_pandas_and_non_finite_numbers():
    data = {
        1: np.float32(1.5),
        "nan": float("nan"),
        "inf": np.float64("inf"),
        "ints": np.arange(3),
        "bool": np.bool_(True),
        "na": pd.NA,
        "nat": pd.NaT,
        "path": Path("a/b"),
        "nested": [(np.int64(2), None)],
    }
    out = jsonable(data)
    assert out == {
        "1": 1.5,
        "nan": None,
        "inf": None,
        "ints": [0, 1, 2],
        "bool": True,
        "na": None,
        "nat": None,
        "path": "a/b",
        "nested": [[2, None]],
    }
    json.dumps(out, allow_nan=False)  # strict JSON


def test_dump_json_writes_strict_json(tmp_path):
    dump_json({"x": float("nan"), "y": np.int32(4)}, tmp_path / "o.json")
    assert json.loads((tmp_path / "o.json").read_text()) == {"x": None, "y": 4}


def test_write_atomic_removes_its_temporary_file_on_failure(tmp_path):
    target = tmp_path / "t.csv"
    target.write_text("old\n")

    def broken(handle: BinaryIO) -> None:
        handle.write(b"half")
        raise OSError("disk full")

    # an OSError while writing (a full disk) is one sentence, and the old file stays whole
    with pytest.raises(DataError, match="cannot write .*disk full; nothing of it was written"):
        write_atomic(target, broken)
    assert target.read_text() == "old\n" and list(tmp_path.iterdir()) == [target]


def test_a_replaced_file_gets_normal_permissions(tmp_path):
    """0666 masked by the umask, as for a new file: not the mode of what it replaced."""
    import os

    target = tmp_path / "keep.txt"
    target.write_text("old")
    target.chmod(0o640)
    old_umask = os.umask(0o022)
    try:
        write_text_atomic(target, "new")
    finally:
        os.umask(old_umask)
    assert target.read_text() == "new" and target.stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: str(d), "it is a folder"),
        (lambda d: str(d / "no" / "x.json"), "does not exist"),
        (lambda d: "/proc/wattlab-x.json", "cannot write"),
        (lambda d: str(d / "f.txt" / "x.json"), "is not a folder"),
    ],
)
def test_check_writable_refuses_before_work_and_leaves_nothing(tmp_path, make, message):
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(ConfigError, match=message):
        check_writable(make(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]


def test_check_writable_passes_and_leaves_no_probe(tmp_path):
    check_writable(tmp_path / "new.json")
    check_writable("-")
    check_writable(None)
    assert list(tmp_path.iterdir()) == []


def test_check_output_dir_creates_nothing(tmp_path):
    check_output_dir(tmp_path / "a" / "b")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="existing file"):
        check_output_dir(tmp_path / "file")
    with pytest.raises(ConfigError, match="not a folder"):
        check_output_dir(tmp_path / "file" / "sub")


def test_output_folder_is_removed_when_the_work_fails(tmp_path):
    with pytest.raises(RuntimeError), output_folder(tmp_path / "a" / "b") as out:
        (out / "half.md").write_text("x")
        raise RuntimeError("no runs")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "kept").mkdir()
    with pytest.raises(RuntimeError), output_folder(tmp_path / "kept"):
        raise RuntimeError("no runs")
    assert (tmp_path / "kept").is_dir()  # it was there before: not ours to remove


@pytest.mark.parametrize("field", sorted(BOUNDS))
def test_every_bound_refuses_non_finite_and_out_of_range_values(field):
    bound = BOUNDS[field]
    for bad in (math.nan, math.inf, -math.inf, bound.high * 2 + 1, bound.low - 1):
        with pytest.raises(ConfigError, match="--x must be .*got"):
            check_number(field, bad, "--x")
    check_number(field, type(bound.low)(bound.high) if bound.integer else bound.high, "--x")
    if not bound.low_open:
        check_number(field, int(bound.low) if bound.integer else float(bound.low), "--x")
    else:
        with pytest.raises(ConfigError):
            check_number(field, bound.low, "--x")
    if bound.integer:
        with pytest.raises(ConfigError, match="whole number"):
            check_number(field, bound.low + 0.5, "--x")


def test_echo_is_short_even_for_huge_values():
    value: list = ["lol"] * 10
    for _ in range(9):
        value = [value] * 10  # a billion strings, shared
    assert len(echo(value)) <= 210
    assert len(echo("y" * 10**6)) <= 210
    assert echo(1.5) == "1.5"


def test_no_probe_file_survives_in_a_writable_folder(tmp_path):
    os.chmod(tmp_path, 0o755)
    check_writable(tmp_path / "x.json")
    assert not any(p.name.startswith(".wattlab-probe") for p in tmp_path.iterdir())
