"""The elements every operator of a forward pass writes: PRE's measure of a model's activation
traffic (issue 47).

A ``TorchDispatchMode`` sees each ATen operator a forward pass runs, below the modules. Each
operator that is not a view (``is_view``: a reshape, a transpose, a slice: no kernel, no bytes)
and not an allocation (``empty*``: no writes) counts the elements of the tensors it returns. So
the work inside a module that has children (the query/key/value projection and the attention
of ``nn.MultiheadAttention``) counts, and a module that does nothing (``nn.Dropout(p=0)``,
``nn.Identity``: it returns its input) counts nothing. The outputs of leaf modules, the old
measure, got both wrong: a small ViT's no-op dropouts were a third of its "activations" while
the projection and the attention inside its attention modules were not counted at all (its
traffic came out 40 % low), and PRE, held out by model, predicted the ViTs' energy 26-36 % too
low on both GPUs of the reference set.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# allocations: memory reserved, nothing written
_ALLOCATIONS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "detach"})


class OpOutputs(TorchDispatchMode):
    """Counts, while active, the operators run (``ops``) and the elements they return
    (``elements``), views and allocations excluded."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.elements = 0

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        if getattr(func, "is_view", False) or _base_name(func) in _ALLOCATIONS:
            return out
        tensors = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        if tensors:
            self.ops += 1
            self.elements += sum(int(t.numel()) for t in tensors)
        return out


def _base_name(func: Any) -> str:
    """``aten.empty.memory_format`` -> ``empty``."""
    return str(getattr(func, "__name__", "")).split(".")[0]
