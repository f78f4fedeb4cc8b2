"""Multi-node runs: component names carry the host, each host's CPU/DRAM is metered once, the
combined row holds every host's components once each. Two torchrun agents on localhost pose as
two nodes (gloo, --nnodes 2 --node-rank 0/1, WATTLAB_HOSTNAME=node-a / node-b)."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time

import pytest

from wattlab.experiment.hosts import (
    host_name,
    qualified,
    qualify_measurement,
    spans_several_nodes,
)
from wattlab.meters.base import Provenance
from wattlab.monitor import Measurement, combine_measurements


def _measurement(energy: dict[str, float]) -> Measurement:
    return Measurement(
        name="budget",
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=2.0,
        energy_j=dict(energy),
        provenance={c: Provenance.MEASURED for c in energy},
        uncertainty_j={c: 1.0 for c in energy},
        in_total={c: True for c in energy},
        samples=[(0.5, c, 10.0) for c in energy],
    )


def test_two_hosts_combine_with_every_component_once():
    host_a = {"gpu:0": 100.0, "cpu:package-0": 30.0, "dram:package-0": 5.0}
    host_b = {"gpu:0": 120.0, "cpu:package-0": 40.0, "dram:package-0": 6.0}
    # unqualified, the two hosts' gpu:0 collide (and would be a silent double count)
    with pytest.raises(ValueError, match="two processes"):
        combine_measurements([_measurement(host_a), _measurement(host_b)])
    a = qualify_measurement(_measurement(host_a), "node-a")
    b = qualify_measurement(_measurement(host_b), "node-b")
    both = combine_measurements([a, b])
    assert sorted(both.energy_j) == sorted(f"{h}/{c}" for h in ("node-a", "node-b") for c in host_a)
    assert both.gpu_energy_j == 220.0 and both.cpu_energy_j == 70.0 and both.dram_energy_j == 11.0
    assert both.total_energy_j == 301.0
    assert {c for _, c, _ in both.samples} == set(both.energy_j)
    assert qualified("node-a", "node-b/gpu:0") == "node-b/gpu:0"  # never twice


def test_host_name_and_node_count_come_from_the_environment():
    assert host_name({"WATTLAB_HOSTNAME": "node-a"}) == "node-a"
    assert host_name({}) == socket.gethostname().split(".", 1)[0]
    assert spans_several_nodes({"GROUP_WORLD_SIZE": "2", "WORLD_SIZE": "2"})
    assert spans_several_nodes({"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"})
    assert not spans_several_nodes({"GROUP_WORLD_SIZE": "1", "WORLD_SIZE": "2"})
    assert not spans_several_nodes({})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_torchrun_agents_posing_as_two_nodes(tmp_path):
    endpoint = f"127.0.0.1:{_free_port()}"
    common = [
        sys.executable, "-m", "wattlab.cli", "run", "--device", "cpu",
        "--model", "mobilenet_v3_small", "--stem", "imagenet", "--train-samples", "128",
        "--test-samples", "64", "--epochs", "1", "--batch-size", "64", "--warmup-steps", "1",
        "--nnodes", "2", "--rdzv-endpoint", endpoint,
    ]  # fmt: skip
    agents, logs = [], []
    # node 1 starts first: node ranks must follow --node-rank, not the order of arrival
    for rank, host in reversed(list(enumerate(("node-a", "node-b")))):
        env = {**os.environ, "WATTLAB_HOSTNAME": host, "OMP_NUM_THREADS": "1"}
        env["PYTHONFAULTHANDLER"] = "1"  # a crashing rank says where
        argv = [*common, "--node-rank", str(rank), "--db", str(tmp_path / f"{host}.db")]
        log = tmp_path / f"{host}.log"
        logs.append(log)
        with log.open("wb") as out:
            agents.append(subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT))
    try:
        deadline = time.monotonic() + 600
        while any(a.poll() is None for a in agents) and time.monotonic() < deadline:
            if any(a.poll() not in (None, 0) for a in agents):
                for a in agents:  # one node failed: the other would wait for it in vain
                    if a.poll() is None:
                        a.terminate()
                        a.wait(timeout=60)
            time.sleep(0.2)
    finally:
        for a in agents:
            if a.poll() is None:
                a.kill()
                a.wait()
    for agent, log in zip(agents, logs, strict=True):
        assert agent.returncode == 0, log.read_text(errors="replace")[-3000:]

    assert not (tmp_path / "node-b.db").exists()  # only global rank 0 stores the run
    con = sqlite3.connect(tmp_path / "node-a.db")
    row = con.execute(
        "SELECT id, status, hostname, world_size, components_json, energy_total_j, "
        "energy_cpu_j, energy_dram_j FROM runs"
    ).fetchall()
    assert len(row) == 1
    run_id, status, hostname, world, components_json, total_j, cpu_j, dram_j = row[0]
    assert status == "ok" and hostname == "node-a,node-b" and world == 2
    components = json.loads(components_json)
    hosts = {c.split("/", 1)[0] for c in components}
    assert hosts == {"node-a", "node-b"}, components
    kinds = {
        h: sorted(c.split("/", 1)[1] for c in components if c.startswith(h + "/")) for h in hosts
    }
    assert kinds["node-a"] == kinds["node-b"] and kinds["node-a"]  # each host's meters, once each
    cpu_parts = [v["energy_j"] for c, v in components.items() if "/cpu:" in c]
    assert len(cpu_parts) == 2 and cpu_j == pytest.approx(sum(cpu_parts))  # one CPU per host
    in_total = [v["energy_j"] for v in components.values() if v.get("in_total", True)]
    assert total_j == pytest.approx(sum(in_total))
    trace_components = {c for (c,) in con.execute("SELECT DISTINCT component FROM trace")}
    con.close()
    assert trace_components and all(c.split("/", 1)[0] in hosts for c in trace_components)
