"""What marks a window's edges: a UTC time stamp, and the wait for queued accelerator work."""

from __future__ import annotations

import sys
from datetime import datetime, timezone


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def cuda_sync_if_in_use() -> None:
    """Wait for this process's queued CUDA work, if torch is loaded and has used CUDA.

    Looks torch up in ``sys.modules`` so that the monitor never imports torch itself.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_available() and cuda.is_initialized():
        cuda.synchronize()
