"""The Prometheus endpoint, scraped over HTTP on 127.0.0.1 from a real EnergyMonitor."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from wattlab.errors import ConfigError  # noqa: E402
from wattlab.monitor import EnergyMonitor  # noqa: E402


def scrape(url: str) -> dict[str, list]:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def by_component(samples: list, name: str) -> dict[str, float]:
    return {s.labels["component"]: s.value for s in samples if s.name == name}


def test_scrape_serves_counters_gauges_and_the_open_window():
    with EnergyMonitor(interval_s=0.02, prometheus_port=0) as mon:
        url = mon.exporter.url
        assert url.startswith("http://127.0.0.1:")
        first = scrape(url)
        mon.begin_window("epoch-1")
        time.sleep(0.2)
        second = scrape(url)
        components = {m.info.component: m.info for m in mon.meters}

        energy1 = by_component(first["wattlab_energy_joules"], "wattlab_energy_joules_total")
        energy2 = by_component(second["wattlab_energy_joules"], "wattlab_energy_joules_total")
        assert set(energy2) == set(components)
        assert all(energy2[c] >= energy1[c] for c in energy2)
        assert sum(energy2.values()) > sum(energy1.values())
        for s in second["wattlab_energy_joules"]:
            info = components[s.labels["component"]]
            assert s.labels["provenance"] == info.provenance.value
            assert s.labels["kind"] == info.kind
        power = by_component(second["wattlab_power_watts"], "wattlab_power_watts")
        assert power and all(p >= 0 for p in power.values())

        windows = {s.labels["window"]: s.value for s in second["wattlab_window_in_progress"]}
        assert windows == {"total": 1.0, "epoch-1": 1.0}
        window_j = [
            s for s in second["wattlab_window_energy_joules"] if s.labels["window"] == "epoch-1"
        ]
        assert {s.labels["component"] for s in window_j} == set(components)
        elapsed = {s.labels["window"]: s.value for s in second["wattlab_window_elapsed_seconds"]}
        assert elapsed["epoch-1"] >= 0.2 and elapsed["total"] >= elapsed["epoch-1"]

        m = mon.end_window("epoch-1")
        third = scrape(url)
        assert "epoch-1" not in {s.labels["window"] for s in third["wattlab_window_in_progress"]}
        assert m.total_energy_j > 0
    with pytest.raises(urllib.error.URLError):  # the endpoint stops with the monitor
        urllib.request.urlopen(url, timeout=5)


def test_bad_or_busy_port_is_a_config_error():
    with pytest.raises(ConfigError, match="integer 0-65535"):
        EnergyMonitor(prometheus_port=70000).start()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        mon = EnergyMonitor(prometheus_port=port)
        with pytest.raises(ConfigError, match=f"127.0.0.1:{port}"):
            mon.start()
        assert not mon.started  # nothing left running


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # the measured command runs for 4 s
def test_cli_monitor_serves_while_the_command_runs(tmp_path):
    port = _free_port()
    child = subprocess.Popen(
        [
            sys.executable, "-m", "wattlab.cli", "monitor", "--prometheus-port", str(port),
            "--interval", "0.05", "--", sys.executable, "-c", "import time; time.sleep(4)",
        ],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ},
    )  # fmt: skip
    try:
        line = child.stderr.readline()
        assert f"http://127.0.0.1:{port}/metrics" in line
        deadline = time.monotonic() + 30  # the window opens just after the URL is printed
        windows: set[str] = set()
        while "command" not in windows and time.monotonic() < deadline:
            families = scrape(f"http://127.0.0.1:{port}/metrics")
            windows = {s.labels["window"] for s in families["wattlab_window_in_progress"]}
            time.sleep(0.05)
        assert "command" in windows
        assert families["wattlab_energy_joules"]
    finally:
        out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err


def test_cli_monitor_bad_port(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "wattlab.cli", "monitor", "--prometheus-port", "99999",
         "--", sys.executable, "-c", "pass"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (
        done.returncode == 2
        and "--prometheus-port must be a whole number from 0 to 65535" in done.stderr
    )
    assert "Traceback" not in done.stderr
