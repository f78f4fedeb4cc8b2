"""Third fault campaign (issue 33), listeners: a multi-process run on one machine (torchrun and
gloo) listens on the loopback only, never on every interface (``*:PORT`` / ``[::]:PORT``),
where any host of the network could reach its rendezvous store; a multi-node run binds where
the user says."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WATTLAB = [sys.executable, "-m", "wattlab.cli"]
RUN = ["run", "--device", "cpu", "--nproc", "2", "--model", "mobilenet_v3_small", "--stem",
       "imagenet", "--train-samples", "512", "--test-samples", "64", "--batch-size", "16",
       "--epochs", "2", "--warmup-steps", "0", "--no-progress", "--db", "t.db"]  # fmt: skip


def _listening(pid: int, seen: dict[tuple[int, str, int], str]) -> None:
    """Add every listening TCP socket of ``pid``'s tree to ``seen``."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        try:
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    name = " ".join(proc.cmdline()[1:4])
                    seen[(proc.pid, conn.laddr.ip, conn.laddr.port)] = name
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue


def _loopback(ip: str) -> bool:
    return ipaddress.ip_address(ip.split("%")[0]).is_loopback


@pytest.mark.slow  # torchrun and gloo: two training processes
def test_a_one_machine_multi_process_run_listens_on_the_loopback_only(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WATTLAB_CACHE_DIR": "off"}
    for name in ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    run = subprocess.Popen([*WATTLAB, *RUN], cwd=tmp_path, env=env, text=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    seen: dict[tuple[int, str, int], str] = {}
    deadline = time.time() + 600
    try:
        while run.poll() is None and time.time() < deadline:
            _listening(run.pid, seen)
            time.sleep(0.1)
    finally:
        if run.poll() is None:
            run.kill()
        _, err = run.communicate(timeout=120)
    assert run.returncode == 0, err[-3000:]
    assert seen, "no listener was seen: the probe did not work"
    wide = {key: name for key, name in seen.items() if not _loopback(key[1])}
    assert wide == {}, f"listening beyond the loopback: {wide}"


@pytest.mark.extra("train")  # wattlab.train.distributed imports torch
def test_a_one_node_launch_binds_the_loopback() -> None:
    from wattlab.train.distributed import loopback_env, torchrun_command

    command = torchrun_command("m", ["--x"], nproc_per_node=2)
    assert "--standalone" not in command
    assert "wattlab.train.local_rendezvous" in command
    env = loopback_env({})
    assert env["MASTER_ADDR"] == "127.0.0.1"
    assert env["GLOO_SOCKET_IFNAME"] == env["TP_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"]
    assert loopback_env({"GLOO_SOCKET_IFNAME": "eth7"})["GLOO_SOCKET_IFNAME"] == "eth7"


@pytest.mark.extra("train")  # wattlab.train.distributed imports torch
def test_the_local_rendezvous_store_listens_where_it_is_told() -> None:
    import psutil

    from wattlab.train.local_rendezvous import serve_store

    store, port = serve_store("127.0.0.1", 0)
    try:
        mine = [c.laddr for c in psutil.Process().net_connections(kind="inet")
                if c.status == psutil.CONN_LISTEN and c.laddr.port == port]  # fmt: skip
        assert [a.ip for a in mine] == ["127.0.0.1"]
    finally:
        del store


@pytest.mark.extra("train")  # wattlab.train.distributed imports torch
def test_a_multi_node_launch_binds_where_the_user_says() -> None:
    from wattlab.train.distributed import torchrun_command

    node0 = torchrun_command("m", [], 2, nnodes=2, node_rank=0, rdzv_endpoint="10.1.2.3:29500")
    assert "wattlab.train.local_rendezvous" in node0 and "--bind=10.1.2.3:29500" in node0
    node1 = torchrun_command("m", [], 2, nnodes=2, node_rank=1, rdzv_endpoint="10.1.2.3:29500")
    assert "torch.distributed.run" in node1 and "--rdzv-endpoint=10.1.2.3:29500" in node1
