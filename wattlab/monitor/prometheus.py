"""A Prometheus scrape endpoint over a running EnergyMonitor (`wattlab[prometheus]`).

    with EnergyMonitor(prometheus_port=9464) as mon:   # http://127.0.0.1:9464/metrics
        train()

or ``wattlab monitor --prometheus-port 9464 -- python train.py``. Each scrape reads the meters
at that moment (no extra sampling thread) and serves:

- ``wattlab_energy_joules_total{component,kind,provenance,in_total}``: cumulative energy since
  the monitor started, per component (a counter);
- ``wattlab_power_watts{component,kind,provenance}``: the latest power reading (a gauge);
- ``wattlab_window_in_progress{window}`` = 1, ``wattlab_window_elapsed_seconds{window}`` and
  ``wattlab_window_energy_joules{window,component,provenance}`` for every open window.

It binds to 127.0.0.1 unless given another address, and it stops with the monitor. The monitor
itself serves it, so it lives in the monitor package and imports nothing above it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from wattlab.errors import ConfigError
from wattlab.extras import require

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer


def _check_port(port: object) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"the Prometheus port must be an integer 0-65535, got {port!r}.")
    return port


class MonitorCollector:
    """A prometheus-client collector that reads an EnergyMonitor's meters at scrape time."""

    def __init__(self, monitor: Any) -> None:
        self.monitor = monitor
        self._base_j: dict[str, float] = {}
        for meter in monitor.meters:  # the counters start at 0 when the endpoint opens
            try:
                self._base_j[meter.info.component] = float(meter.energy_j())
            except Exception:
                self._base_j[meter.info.component] = 0.0

    def describe(self) -> list[Any]:
        return []  # collected on demand; do not read meters at registration

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        energy = CounterMetricFamily(
            "wattlab_energy_joules",
            "Energy since the monitor started, per component (J), labelled with provenance.",
            labels=["component", "kind", "provenance", "in_total"],
        )
        power = GaugeMetricFamily(
            "wattlab_power_watts",
            "Latest power reading per component (W), labelled with provenance.",
            labels=["component", "kind", "provenance"],
        )
        current_j: dict[str, float] = {}
        provenance: dict[str, str] = {}
        for meter in list(self.monitor.meters):
            info = meter.info
            comp = info.component
            prov = info.provenance.value
            provenance[comp] = prov
            try:
                current_j[comp] = float(meter.energy_j())
            except Exception:  # a failed read leaves the series out of this scrape
                continue
            in_total = "true" if info.details.get("in_total", True) else "false"
            energy.add_metric(
                [comp, info.kind, prov, in_total],
                max(current_j[comp] - self._base_j.get(comp, 0.0), 0.0),
            )
            try:
                watts = meter.power_w()
            except Exception:
                watts = None
            if watts is not None:
                power.add_metric([comp, info.kind, prov], float(watts))
        yield energy
        yield power

        in_progress = GaugeMetricFamily(
            "wattlab_window_in_progress", "1 for each open measurement window.", labels=["window"]
        )
        elapsed = GaugeMetricFamily(
            "wattlab_window_elapsed_seconds",
            "Seconds since the open window began.",
            labels=["window"],
        )
        window_energy = GaugeMetricFamily(
            "wattlab_window_energy_joules",
            "Energy of the open window so far, per component (J), labelled with provenance.",
            labels=["window", "component", "provenance"],
        )
        for name, (elapsed_s, start_j) in sorted(self.monitor.open_windows().items()):
            shown = "total" if name == "__total__" else name
            in_progress.add_metric([shown], 1.0)
            elapsed.add_metric([shown], elapsed_s)
            for comp, energy_j in current_j.items():
                if comp in start_j:
                    window_energy.add_metric(
                        [shown, comp, provenance[comp]], max(energy_j - start_j[comp], 0.0)
                    )
        yield in_progress
        yield elapsed
        yield window_energy


class PrometheusExporter:
    """Serve ``/metrics`` for ``monitor`` on ``addr:port`` (port 0 = any free port) until
    ``close()``. Uses its own registry, so several exporters never clash."""

    def __init__(self, monitor: Any, port: int, addr: str = "127.0.0.1") -> None:
        port = _check_port(port)
        require("prometheus_client", "prometheus", "the Prometheus exporter")
        from prometheus_client import CollectorRegistry, start_http_server

        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(MonitorCollector(monitor))
        try:
            server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        except OSError as error:
            raise ConfigError(
                f"cannot serve Prometheus metrics on {addr}:{port} ({error.strerror or error}); "
                "choose a free port."
            ) from None
        self.addr = addr
        self._server: WSGIServer | None = server
        self.port = int(server.server_port)

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and free the port. Idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
            self._thread.join(timeout=5)
