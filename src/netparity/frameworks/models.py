"""Framework-neutral operations on models used by workflows: parameter counts, loading weights,
turning numbers into framework tensors. Dispatch is by the object's type (frameworks are never
imported just to detect one).

Example:
    >>> framework_of(object())
    Traceback (most recent call last):
    ...
    netparity.errors.FrameworkError: not a PyTorch nn.Module or MindSpore nn.Cell: object
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from netparity.dtypes import decode
from netparity.errors import FrameworkError, MappingError


def framework_of(model: Any) -> str:
    """``"torch"`` or ``"mindspore"`` for a model object."""
    if "torch" in sys.modules:
        import torch

        if isinstance(model, torch.nn.Module):
            return "torch"
    if "mindspore" in sys.modules:
        import mindspore as ms

        if isinstance(model, ms.nn.Cell):
            return "mindspore"
    raise FrameworkError(f"not a PyTorch nn.Module or MindSpore nn.Cell: {type(model).__name__}")


@dataclass
class ParamCounts:
    """Parameter counts of a model (elements, not tensors)."""

    total: int
    trainable: int
    tensors: int
    trainable_tensors: int
    buffers: int  # non-trainable state stored with the weights (BN running statistics)


def param_counts(model: Any) -> ParamCounts:
    """Count parameters as frameworks report them; BatchNorm statistics count as buffers.

    PyTorch keeps running statistics as buffers; MindSpore keeps them as parameters with
    ``requires_grad=False``. Both are reported as ``buffers`` so the two sides compare.
    """
    fw = framework_of(model)
    if fw == "torch":
        ps = list(model.parameters())
        bufs = [b for n, b in model.named_buffers() if not n.endswith("num_batches_tracked")]
        return ParamCounts(
            total=sum(p.numel() for p in ps),
            trainable=sum(p.numel() for p in ps if p.requires_grad),
            tensors=len(ps),
            trainable_tensors=sum(1 for p in ps if p.requires_grad),
            buffers=sum(b.numel() for b in bufs),
        )
    ps = list(model.get_parameters())
    tr = [p for p in ps if p.requires_grad]
    frozen = [p for p in ps if not p.requires_grad]
    return ParamCounts(
        total=sum(int(np.prod(p.shape)) for p in tr),
        trainable=sum(int(np.prod(p.shape)) for p in tr),
        tensors=len(tr),
        trainable_tensors=len(tr),
        buffers=sum(int(np.prod(p.shape)) for p in frozen),
    )


def set_weights(model: Any, arrays: Mapping[str, np.ndarray],
                dtypes: Mapping[str, str] | None = None) -> list[str]:
    """Copy ``arrays`` into the model's parameters/buffers of the same names, in place.

    Values are cast to each parameter's own dtype. Returns the names that were set.

    Raises:
        MappingError: a name is not in the model, or a shape does not fit.
    """
    fw = framework_of(model)
    dtypes = dtypes or {}
    done: list[str] = []
    if fw == "torch":
        import torch

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
    import mindspore as ms

    params = dict(model.parameters_and_names())
    for name, arr in arrays.items():
        if name not in params:
            raise MappingError(f"{name}: no such parameter in the network")
        p = params[name]
        a = decode(np.asarray(arr), dtypes.get(name, "")) if name in dtypes else arr
        if tuple(p.shape) != tuple(np.shape(a)):
            raise MappingError(f"{name}: shape {tuple(np.shape(a))} does not fit {tuple(p.shape)}")
        # In place (ops.assign), never set_data: set_data gives the Parameter new storage, and an
        # optimizer or compiled step that already ran keeps updating the old one -- the loaded
        # parameter then silently stops training (measured: update 0 after set_data).
        ms.ops.assign(p, ms.Tensor(np.array(a, order="C")).astype(p.dtype))
        done.append(name)
    return done


def scalar_tensor(value: float, framework: str) -> Any:
    """A float32 scalar tensor of ``framework`` holding ``value`` (to record a loss)."""
    if framework == "torch":
        import torch

        return torch.tensor(float(value), dtype=torch.float32)
    if framework == "mindspore":
        import mindspore as ms

        return ms.Tensor(np.float32(value))
    return np.float32(value)


def as_tensor(arr: np.ndarray, framework: str) -> Any:
    """A framework tensor holding ``arr`` (to record data batches)."""
    a = np.ascontiguousarray(arr)
    if framework == "torch":
        import torch

        return torch.from_numpy(a.copy())
    if framework == "mindspore":
        import mindspore as ms

        return ms.Tensor(a)
    return a


def optimizer_settings(optimizer: Any, model: Any) -> dict[str, dict[str, Any]]:
    """Per-parameter optimizer settings: ``{name: {"weight_decay", "momentum", "lr"}}``.

    PyTorch: from each param group. MindSpore: from the optimizer's groups and decay flags, with
    the loss scale taken out of the weight decay (MindSpore stores ``weight_decay * loss_scale``
    because it decays the still-scaled gradients). ``lr`` is ``None`` for schedules (compare the
    specs' ``lr_schedule`` instead). Unknown layouts give an empty dict.
    """
    out: dict[str, dict[str, Any]] = {}
    if optimizer is None:
        return out
    fw = framework_of(model)
    if fw == "torch":
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
    try:
        params = list(optimizer._parameters)
        scale = float(getattr(optimizer, "loss_scale", 1.0) or 1.0)
        flags = list(getattr(optimizer, "decay_flags", [True] * len(params)))
        if getattr(optimizer, "is_group", False):
            wds = [float(w) if isinstance(w, (int, float)) else float(np.asarray(w.asnumpy()))
                   for w in optimizer.group_weight_decay]
        else:
            w = optimizer.weight_decay
            wd = float(w) if isinstance(w, (int, float)) else float(np.asarray(w.asnumpy()))
            wds = [wd] * len(params)
        mom = getattr(optimizer, "momentum", None)
        momentum = (float(np.asarray(mom.asnumpy())) if mom is not None and hasattr(mom, "asnumpy")
                    else float(mom or 0))
    except Exception:  # a custom optimizer without the standard attributes
        return out
    for p, f, wd in zip(params, flags, wds):
        out[p.name] = {"weight_decay": (wd / scale) if f else 0.0, "momentum": momentum,
                       "lr": None}
    return out
