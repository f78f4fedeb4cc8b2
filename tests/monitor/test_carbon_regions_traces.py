"""Carbon intensity where the user is: the shipped per-country table and time-stamped traces."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from wattlab.errors import ConfigError, DataError
from wattlab.meters.base import Provenance
from wattlab.monitor import Measurement
from wattlab.monitor.carbon import (
    CarbonSettings,
    IntensityTrace,
    effective_intensity,
    load_intensity_trace,
    region_table,
    settings_from_flags,
    window_co2e,
)

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)


def write_trace(path, rows, header="timestamp,intensity_kg_per_kwh"):
    path.write_text(header + "\n" + "\n".join(f"{t},{v}" for t, v in rows) + "\n")
    return path


def test_region_table_is_complete_and_sane():
    table = region_table()
    assert len(table) >= 200
    assert all(len(code) == 3 and code.isupper() for code in table)
    assert all(0 <= e.intensity_kg_per_kwh < 1.5 for e in table.values())
    assert table["FRA"].intensity_kg_per_kwh == pytest.approx(0.056039)
    assert table["FRA"].country == "France"


def test_region_sets_intensity_band_and_names_its_source():
    s = settings_from_flags(region="fra")
    assert s.intensity_kg_per_kwh == pytest.approx(0.056039)
    assert s.intensity_low_kg_per_kwh == pytest.approx(0.056039 * 0.5)
    assert s.intensity_high_kg_per_kwh == pytest.approx(0.056039 * 1.5)
    assert "region FRA (France, 2023" in s.describe() and "CodeCarbon" in s.describe()
    explicit = settings_from_flags(region="USA", intensity_range="0.2:0.5")
    assert (explicit.intensity_low_kg_per_kwh, explicit.intensity_high_kg_per_kwh) == (0.2, 0.5)
    assert settings_from_flags().source.startswith("default")
    assert settings_from_flags(0.4).source == "--carbon-intensity"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"region": "XYZ"}, "'XYZ' is not in the shipped table"),
        ({"region": "FR"}, "three-letter code"),
        ({"region": "FRA", "intensity_kg_per_kwh": 0.3}, "give only one of"),
        ({"region": "FRA", "intensity_range": "0.2:0.3"}, "outside --intensity-range"),
    ],
)
def test_region_bad_input(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        settings_from_flags(**kwargs)


def test_trace_loads_in_kg_or_g(tmp_path):
    kg = load_intensity_trace(
        write_trace(tmp_path / "kg.csv", [("2026-12-02T12:00:00Z", 0.1), ("2026-12-02T13:00", 0.3)])
    )
    g = load_intensity_trace(
        write_trace(
            tmp_path / "g.csv",
            [("2026-12-02T12:00:00+00:00", 100), ("2026-12-02T14:00:00+01:00", 300)],
            header="timestamp,intensity_g_per_kwh",
        )
    )
    for trace in (kg, g):  # a time without a zone is UTC; +01:00 is converted
        assert trace.times_s == (T0.timestamp(), T0.timestamp() + 3600)
        assert trace.values_kg_per_kwh == pytest.approx((0.1, 0.3))
        assert trace.step_s == 3600
        assert trace.end_s == T0.timestamp() + 7200


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("time,value\n2026-12-02T12:00:00Z,0.1\n", "needs the columns timestamp"),
        ("timestamp,intensity_kg_per_kwh\nnoon,0.1\n", "line 2: timestamp 'noon'"),
        ("timestamp,intensity_kg_per_kwh\n2026-12-02T12:00:00Z,-1\n", "must be a number >= 0"),
        (
            "timestamp,intensity_kg_per_kwh\n2026-12-02T13:00Z,0.1\n2026-12-02T12:00Z,0.1\n",
            "timestamps must increase",
        ),
        ("timestamp,intensity_kg_per_kwh\n", "has no rows"),
    ],
)
def test_bad_traces_are_one_sentence(tmp_path, text, message):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(DataError, match=message):
        load_intensity_trace(path)


def test_missing_trace_file(tmp_path):
    with pytest.raises(DataError, match="cannot read the intensity trace"):
        settings_from_flags(intensity_trace=tmp_path / "nope.csv")


def trace_02_04() -> IntensityTrace:
    """0.2 kg/kWh from 12:00, 0.4 from 13:00 (until 14:00)."""
    t = T0.timestamp()
    return IntensityTrace((t, t + 3600), (0.2, 0.4), "intensity trace test.csv", 3600.0)


def test_effective_intensity_weights_by_energy():
    trace = trace_02_04()
    start = T0.timestamp() + 1800  # 12:30 to 13:30
    flat = [(start + i * 60.0, 100.0) for i in range(61)]
    assert effective_intensity(trace, start, 3600, flat) == pytest.approx(0.3)
    # three times the power after 13:00: (1 x 0.2 + 3 x 0.4) / 4
    steps = [(t, 100.0 if t < T0.timestamp() + 3600 else 300.0) for t, _ in flat]
    assert effective_intensity(trace, start, 3600, steps) == pytest.approx(0.35, abs=0.005)
    # no power samples: the time-weighted mean
    assert effective_intensity(trace, start, 3600, []) == pytest.approx(0.3)


def test_a_window_outside_the_trace_is_refused():
    trace = trace_02_04()
    with pytest.raises(DataError, match="covers 2026-12-02T12:00:00"):
        effective_intensity(trace, T0.timestamp() + 7000, 600, [])


def measurement(carbon: CarbonSettings, energy_j: float = 3.6e6) -> Measurement:
    start = T0 + timedelta(minutes=30)
    # monitor-relative sample times: the window starts 5 s after the monitor did
    samples = [(5.0 + i * 60.0, "gpu:0", 100.0 if i < 30 else 300.0) for i in range(61)]
    return Measurement(
        name="budget",
        started_at=start.isoformat(),
        duration_s=3600.0,
        energy_j={"gpu:0": energy_j},
        provenance={"gpu:0": Provenance.MEASURED},
        uncertainty_j={"gpu:0": 0.0},
        in_total={"gpu:0": True},
        samples=samples,
        carbon=carbon,
        start_offset_s=5.0,
    )


def test_window_co2e_uses_the_measured_energy_and_the_traced_intensity(tmp_path):
    rows = [("2026-12-02T12:00:00Z", 0.2), ("2026-12-02T13:00:00Z", 0.4)]
    settings = settings_from_flags(intensity_trace=write_trace(tmp_path / "t.csv", rows), pue=1.1)
    c = window_co2e(measurement(settings))
    assert c.settings.intensity_kg_per_kwh == pytest.approx(0.35, abs=0.005)
    assert c.value_kg == pytest.approx(1.0 * 1.1 * c.settings.intensity_kg_per_kwh)
    assert c.low_kg == pytest.approx(0.5 * c.value_kg) and c.high_kg == pytest.approx(
        1.5 * c.value_kg
    )
    assert "intensity trace t.csv, energy-weighted" in c.to_dict()["intensity_source"]
    # the Measurement's own co2e goes the same way
    assert measurement(settings).co2e.value_kg == pytest.approx(c.value_kg)


def test_settings_with_a_trace_survive_json(tmp_path):
    rows = [("2026-12-02T12:00:00Z", 0.2), ("2026-12-02T13:00:00Z", 0.4)]
    settings = settings_from_flags(intensity_trace=write_trace(tmp_path / "t.csv", rows))
    again = CarbonSettings(**json.loads(json.dumps(settings.to_dict())))
    assert again == settings and isinstance(again.trace, IntensityTrace)


def test_trace_refuses_a_range_or_a_second_intensity(tmp_path):
    path = write_trace(tmp_path / "t.csv", [("2026-12-02T12:00:00Z", 0.2)])
    with pytest.raises(ConfigError, match="cannot be combined with --intensity-trace"):
        settings_from_flags(intensity_trace=path, intensity_range="0.1:0.3")
    with pytest.raises(ConfigError, match="give only one of --region / --intensity-trace"):
        settings_from_flags(region="FRA", intensity_trace=path)


def test_cli_monitor_with_a_trace_and_a_region(tmp_path):
    now = datetime.now(timezone.utc)
    rows = [
        ((now - timedelta(hours=1)).isoformat(), 0.25),
        ((now + timedelta(hours=1)).isoformat(), 0.25),
    ]
    trace = write_trace(tmp_path / "grid.csv", rows)
    command = ["--", sys.executable, "-c", "import time; time.sleep(0.3)"]
    done = subprocess.run(
        [sys.executable, "-m", "wattlab.cli", "monitor", "--intensity-trace", str(trace),
         "--json", "out.json", *command],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    co2e = json.loads((tmp_path / "out.json").read_text())["co2e_kg"]
    assert co2e["intensity_kg_per_kwh"] == pytest.approx(0.25)
    assert "intensity trace grid.csv" in co2e["intensity_source"]
    bad = subprocess.run(
        [sys.executable, "-m", "wattlab.cli", "monitor", "--region", "ATLANTIS", *command],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "'ATLANTIS' is not in the shipped table" in bad.stderr
