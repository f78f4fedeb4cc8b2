"""Process groups for data-parallel training, and the torchrun command line that starts them.

Launch with torchrun (``torchrun_command``); every process calls ``init_distributed`` once,
which reads torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
Without WORLD_SIZE the process runs alone (rank 0 of 1) and no process group is created.
NCCL carries CUDA tensors, gloo CPU tensors. The NCCL_* variables of the parent environment
(NCCL_NVLS_ENABLE, ...) are inherited untouched.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from typing import TypeVar, cast

import torch
import torch.distributed as tdist

from wattlab.errors import ConfigError
from wattlab.python_argv import module_argv

DEVICE_KINDS = ("cuda", "cpu")


@dataclass(frozen=True)
class DistContext:
    """Where this process stands: its global and node-local rank, the world, its device."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")
    is_main: bool = True  # global rank 0: writes results
    is_local_main: bool = True  # local rank 0: one per node (reads node-wide meters)

    @property
    def distributed(self) -> bool:
        """True when a process group is in use (world_size > 1)."""
        return self.world_size > 1


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"environment variable {name}={raw!r} must be a whole number.") from None


def init_distributed(device_kind: str) -> DistContext:
    """Join the process group torchrun set up (or run alone when WORLD_SIZE is unset).

    ``device_kind`` is ``"cuda"`` (NCCL, one GPU per process: ``cuda:LOCAL_RANK``) or
    ``"cpu"`` (gloo). Calling it again in the same process reuses the existing group.
    """
    if device_kind not in DEVICE_KINDS:
        raise ConfigError(f"unknown device {device_kind!r}; allowed: cuda, cpu.")
    world_size = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", 0)
    if world_size < 1 or not 0 <= rank < world_size or local_rank < 0:
        raise ConfigError(
            f"RANK={rank}, LOCAL_RANK={local_rank}, WORLD_SIZE={world_size} are inconsistent; "
            "launch through torchrun."
        )
    if device_kind == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("device 'cuda' was asked for but no CUDA GPU is visible; use cpu.")
        if local_rank >= torch.cuda.device_count():
            raise ConfigError(
                f"LOCAL_RANK {local_rank} has no GPU: only {torch.cuda.device_count()} visible."
            )
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if world_size > 1 and not tdist.is_initialized():
        backend = "nccl" if device_kind == "cuda" else "gloo"
        tdist.init_process_group(backend=backend, init_method="env://")
    return DistContext(
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        device=device,
        is_main=rank == 0,
        is_local_main=local_rank == 0,
    )


def shutdown_distributed() -> None:
    """Leave the process group, if any (safe to call when none exists).

    Garbage is collected first: a DistributedDataParallel wrapper in a reference cycle would
    otherwise keep the group's backend and its work until the interpreter's teardown, where
    gloo's threads touching Python objects can abort the process."""
    if tdist.is_available() and tdist.is_initialized():
        gc.collect()
        tdist.destroy_process_group()


def barrier(dist: DistContext) -> None:
    """Wait for every rank (no-op alone)."""
    if dist.distributed:
        if dist.device.type == "cuda":
            tdist.barrier(device_ids=[dist.device.index])
        else:
            tdist.barrier()


T = TypeVar("T")


def gather_objects(obj: T, dist: DistContext) -> list[T] | None:
    """Every rank's ``obj`` (picklable), in rank order, on rank 0; ``None`` on other ranks.

    A collective: every rank must call it.
    """
    if not dist.distributed:
        return [obj]
    out: list[T | None] = [None] * dist.world_size
    tdist.all_gather_object(out, obj)
    # all_gather_object filled every slot with a rank's obj
    return cast(list[T], out) if dist.is_main else None


def broadcast_object(obj: T, dist: DistContext, src: int = 0) -> T:
    """Rank ``src``'s ``obj`` on every rank (a collective: every rank must call it)."""
    if not dist.distributed:
        return obj
    box = [obj if dist.rank == src else None]
    tdist.broadcast_object_list(box, src=src)
    return cast(T, box[0])  # rank src's obj, now on every rank


LOOPBACK = "127.0.0.1"
LOCAL_RENDEZVOUS = "wattlab.train.local_rendezvous"


def torchrun_command(
    module: str,
    args: list[str],
    nproc_per_node: int,
    nnodes: int = 1,
    node_rank: int = 0,
    rdzv_endpoint: str | None = None,
) -> list[str]:
    """The argv that runs ``python -m module *args`` in ``nproc_per_node`` processes per node.

    A static rendezvous (so that ``node_rank`` 0 really holds global rank 0, the process that
    stores the run: c10d hands out node ranks in arrival order and would ignore it). One node
    without an endpoint: its store listens on 127.0.0.1 only, on a free port; node 0 of
    several: at the host of ``rdzv_endpoint`` (``host:port``), the same command on every node
    with its own ``node_rank``. Node 0 runs torchrun through ``wattlab.train.local_rendezvous``,
    which binds the store where it is told (torch's own would listen on every interface).
    """
    if nproc_per_node < 1:
        raise ConfigError(f"nproc_per_node must be at least 1, got {nproc_per_node}.")
    if nnodes < 1:
        raise ConfigError(f"nnodes must be at least 1, got {nnodes}.")
    if not 0 <= node_rank < nnodes:
        raise ConfigError(f"node_rank must be in 0..{nnodes - 1}, got {node_rank}.")
    rendezvous = [
        f"--nnodes={nnodes}",
        f"--node-rank={node_rank}",
        "--rdzv-backend=static",
        "--rdzv-id=wattlab",
    ]
    # each worker: python -u -m module, less the current folder (wattlab.python_argv)
    worker = [f"--nproc-per-node={nproc_per_node}", "--no-python",
              *module_argv(module, *args, flags=("-u",))]  # fmt: skip
    if rdzv_endpoint is None:
        if nnodes > 1:
            raise ConfigError(
                f"{nnodes} nodes need a rendezvous endpoint host:port reachable from every node."
            )
        bind = f"--bind={LOOPBACK}:0"
        return [*module_argv(LOCAL_RENDEZVOUS), bind, "--nnodes=1", "--", *rendezvous,
                *worker]  # fmt: skip
    from wattlab.launch_args import parse_endpoint

    host, port = parse_endpoint("--rdzv-endpoint", rdzv_endpoint)
    rdzv_endpoint = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if node_rank == 0:  # serves the store: bound at the endpoint's host
        return [*module_argv(LOCAL_RENDEZVOUS), f"--bind={rdzv_endpoint}",
                f"--nnodes={nnodes}", "--", *rendezvous, *worker]  # fmt: skip
    return [*module_argv("torch.distributed.run"), *rendezvous,
            f"--rdzv-endpoint={rdzv_endpoint}", *worker]  # fmt: skip


def _loopback_interface() -> str:
    """The name of the interface holding 127.0.0.1 (``lo`` on Linux)."""
    try:
        import psutil

        for name, addresses in psutil.net_if_addrs().items():
            if any(a.address == LOOPBACK for a in addresses):
                return str(name)
    except Exception:  # no psutil, no interfaces: the usual name
        pass
    return "lo"


def loopback_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a one-machine multi-process run: the workers' store at 127.0.0.1, and gloo,
    TensorPipe and NCCL's sockets on the loopback interface (where the user has not named
    one), so that nothing listens where the network can reach it."""
    out = dict(env)
    out["MASTER_ADDR"] = LOOPBACK
    interface = _loopback_interface()
    for name in ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        out.setdefault(name, interface)
    return out
