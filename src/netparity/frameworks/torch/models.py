"""PyTorch model helpers behind the adapter: parameter counts, loading weights, optimizer
settings, tensors from NumPy.

Example:
    >>> import torch
    >>> param_counts(torch.nn.BatchNorm1d(3)).buffers  # running mean and variance
    6
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from netparity.dtypes import decode
from netparity.errors import MappingError
from netparity.frameworks.base import ParamCounts


def param_counts(model: torch.nn.Module) -> ParamCounts:
    """Counts as PyTorch reports them; ``num_batches_tracked`` is not a weight (not counted)."""
    ps = list(model.parameters())
    bufs = [b for n, b in model.named_buffers() if not n.endswith("num_batches_tracked")]
    return ParamCounts(
        total=sum(p.numel() for p in ps),
        trainable=sum(p.numel() for p in ps if p.requires_grad),
        tensors=len(ps),
        trainable_tensors=sum(1 for p in ps if p.requires_grad),
        buffers=sum(b.numel() for b in bufs),
    )


def set_weights(model: torch.nn.Module, arrays: Mapping[str, np.ndarray],
                dtypes: Mapping[str, str]) -> list[str]:
    """Copy ``arrays`` into the parameters/buffers of the same names, cast to their dtypes."""
    done: list[str] = []
    state = model.state_dict(keep_vars=True)
    with torch.no_grad():
        for name, arr in arrays.items():
            if name not in state:
                raise MappingError(f"{name}: no such parameter or buffer in the model")
            t = state[name]
            a = decode(np.asarray(arr), dtypes.get(name, "")) if name in dtypes else arr
            if tuple(t.shape) != tuple(np.shape(a)):
                raise MappingError(
                    f"{name}: shape {tuple(np.shape(a))} does not fit {tuple(t.shape)}")
            t.copy_(torch.as_tensor(np.array(a, order="C")).to(t.dtype))  # keeps 0-d shapes
            done.append(name)
    return done


def optimizer_settings(optimizer: Any, model: torch.nn.Module) -> dict[str, dict[str, Any]]:
    """``{name: {"weight_decay", "momentum", "lr"}}`` from the optimizer's param groups."""
    out: dict[str, dict[str, Any]] = {}
    names = {id(p): n for n, p in model.named_parameters()}
    for g in getattr(optimizer, "param_groups", []):
        for p in g["params"]:
            if id(p) in names:
                out[names[id(p)]] = {
                    "weight_decay": float(g.get("weight_decay", 0.0) or 0.0),
                    "momentum": float(g.get("momentum", 0.0) or 0.0),
                    "lr": float(g["lr"]) if isinstance(g.get("lr"), (int, float)) else None,
                }
    return out


#: float32 ways PyTorch itself computes the same network with other reduction orders and
#: kernels, switchable in one process: the float64 golden floor's extra samples of what a
#: faithful float32 implementation misses the float64 answer by (:mod:`netparity.analyzers.golden`).
#: (The thread count is not one: ResNet-18's gradients were bit-identical at 1 and 2 threads.)
REDUCTION_VARIANTS = ("native-conv", "channels-last")


def reduction_variant(model: torch.nn.Module, name: str) -> Any:
    """A context in which ``model`` computes float32 by the variant ``name`` of
    :data:`REDUCTION_VARIANTS`: ``native-conv``, oneDNN (mkldnn) off, so convolutions run
    PyTorch's own kernels (their own summation order); ``channels-last``, the model's 4-d
    parameters stored channels-last (the layout inductor's layout optimisation picks), which
    the convolutions and BatchNorms then follow with their channels-last kernels."""
    if name == "native-conv":
        return torch.backends.mkldnn.flags(enabled=False)
    if name == "channels-last":
        with torch.no_grad():  # in place: the optimizer keeps the same parameters
            for t in [*model.parameters(), *model.buffers()]:
                if t.dim() == 4:
                    t.data = t.data.contiguous(memory_format=torch.channels_last)
        from contextlib import nullcontext

        return nullcontext()
    raise ValueError(f"no reduction variant {name!r} (known: {', '.join(REDUCTION_VARIANTS)})")
