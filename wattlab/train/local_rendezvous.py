"""torchrun with its rendezvous store listening on one address, not on every interface.

``python -m wattlab.train.local_rendezvous --bind=HOST:PORT --nnodes=N -- TORCHRUN_ARGS...``

torch's TCPStore (the store torchrun's agent serves to every worker: the rendezvous, and the
workers' ``MASTER_ADDR:MASTER_PORT``) listens on every interface (``[::]:PORT``) whatever host
it is given, so a one-machine run could be reached from the network. This launcher binds a
listening socket to HOST:PORT itself (PORT 0: a free one), starts the store's server on it
(``master_listen_fd``, ``multi_tenant``), then runs torchrun in this same process with a static
rendezvous at that address: torchrun's own store, created with ``multi_tenant=True`` on the
same port, is that server, so nothing listens anywhere else.

HOST is ``127.0.0.1`` for a one-machine run. For node 0 of a multi-node run it is the host the
user gave in ``--rdzv-endpoint``: an IP address is bound as given; a name is bound at the
address of this machine it resolves to (not a loopback one, which other nodes cannot reach);
when it names no address of this machine, the store listens on every interface, as torchrun
does, and one line says so.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from typing import Any

_SERVED: list[tuple[Any, socket.socket]] = []  # kept for the life of the process


def serve_store(host: str, port: int) -> tuple[Any, int]:
    """A TCPStore server listening on ``host:port`` only (port 0: a free one); the store and
    the port. Kept alive for the life of the process."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(1024)
    port = int(listener.getsockname()[1])
    store = TCPStore(
        host,
        port,
        None,
        True,
        timedelta(seconds=900),
        wait_for_workers=False,
        multi_tenant=True,
        master_listen_fd=listener.fileno(),
    )
    _SERVED.append((store, listener))
    return store, port


def _local_addresses() -> set[str]:
    try:
        import psutil

        return {
            a.address.split("%")[0]
            for addrs in psutil.net_if_addrs().values()
            for a in addrs
            if a.family in (socket.AF_INET, socket.AF_INET6)
        }
    except Exception:  # no psutil or no interfaces: cannot tell
        return set()


def bind_address(host: str, nnodes: int) -> str | None:
    """Where the store listens for ``--rdzv-endpoint`` host ``host``: the address itself, or
    the address of this machine a name resolves to; None: every interface (a name that is
    not this machine's, or that resolves only to a loopback address while other nodes must
    reach it)."""
    local = _local_addresses()
    try:
        ipaddress.ip_address(host)
        return host if not local or host in local else None  # another machine's: every one
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return None
    for info in infos:
        address = str(info[4][0]).split("%")[0]
        loopback = ipaddress.ip_address(address).is_loopback
        if address in local and not (loopback and nnodes > 1):
            return address
    return None


def main(argv: list[str]) -> None:
    if len(argv) < 3 or not argv[0].startswith("--bind=") or not argv[1].startswith("--nnodes="):
        print("usage: local_rendezvous --bind=HOST:PORT --nnodes=N -- TORCHRUN_ARGS...",
              file=sys.stderr)  # fmt: skip
        raise SystemExit(2)
    from wattlab.launch_args import parse_endpoint

    bind = argv[0].removeprefix("--bind=")
    if bind.endswith(":0"):  # a free port, chosen when bound
        host, port = parse_endpoint("--rdzv-endpoint", bind[:-2] + ":1")[0], 0
    else:
        host, port = parse_endpoint("--rdzv-endpoint", bind)
    nnodes = int(argv[1].removeprefix("--nnodes="))
    rest = argv[3:] if argv[2] == "--" else argv[2:]
    address = bind_address(host, nnodes)
    if address is None:
        print(
            f"wattlab: the rendezvous host {host} is not an address of this machine that other "
            "nodes can reach, so its store listens on every interface (give this node's IP "
            "address in --rdzv-endpoint to bind that one).",
            file=sys.stderr,
            flush=True,
        )
    else:
        _, port = serve_store(address, port)
    endpoint = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    from torch.distributed.run import main as torchrun

    torchrun([f"--rdzv-endpoint={endpoint}", *rest])


if __name__ == "__main__":
    main(sys.argv[1:])
