"""MindSpore model helpers behind the adapter: parameter counts, loading weights, optimizer
settings.

MindSpore keeps BatchNorm running statistics as parameters with ``requires_grad=False``;
they are reported as buffers so that counts compare with PyTorch's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mindspore as ms
import numpy as np

from netparity.dtypes import decode
from netparity.errors import MappingError
from netparity.frameworks.base import ParamCounts


def param_counts(model: Any) -> ParamCounts:
    """Counts of trainable parameters; frozen ones (BN statistics) count as buffers."""
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
                dtypes: Mapping[str, str]) -> list[str]:
    """Copy ``arrays`` into the parameters of the same names, cast to their dtypes."""
    done: list[str] = []
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
        # parameter then silently stops training (ported from branch h-me, 0c7a3f2).
        ms.ops.assign(p, ms.Tensor(np.array(a, order="C")).astype(p.dtype))
        done.append(name)
    return done


def _number(v: Any) -> float:
    """A Python number or a MindSpore scalar tensor/parameter as a float."""
    return float(v) if isinstance(v, (int, float)) else float(np.asarray(v.asnumpy()))


def optimizer_settings(optimizer: Any, model: Any) -> dict[str, dict[str, Any]]:
    """From the optimizer's groups and decay flags, with the loss scale taken out of the weight
    decay (MindSpore stores ``weight_decay * loss_scale`` because it decays the still-scaled
    gradients). ``lr`` is ``None`` (schedules are compared from the specs)."""
    out: dict[str, dict[str, Any]] = {}
    try:
        params = list(optimizer._parameters)
        scale = float(getattr(optimizer, "loss_scale", 1.0) or 1.0)
        flags = list(getattr(optimizer, "decay_flags", [True] * len(params)))
        if getattr(optimizer, "is_group", False):
            wds = [_number(w) for w in optimizer.group_weight_decay]
        else:
            wds = [_number(optimizer.weight_decay)] * len(params)
        mom = getattr(optimizer, "momentum", None)
        momentum = (float(np.asarray(mom.asnumpy())) if mom is not None and hasattr(mom, "asnumpy")
                    else float(mom or 0))
    except Exception:  # a custom optimizer without the standard attributes
        return out
    for p, f, wd in zip(params, flags, wds):
        out[p.name] = {"weight_decay": (wd / scale) if f else 0.0, "momentum": momentum,
                       "lr": None}
    return out
