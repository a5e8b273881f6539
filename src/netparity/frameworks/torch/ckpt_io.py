"""PyTorch checkpoint files (``.pt .pth .bin .tar``): read with ``torch.load(weights_only=True)``
(no arbitrary unpickling), written with ``torch.save`` as a plain state dict.

Arrays cross the boundary in their storage dtypes (:mod:`netparity.dtypes`): bf16 as uint16
bits, float8 as uint8, never rounded.

Example:
    >>> import torch
    >>> arr, dtype = torch_to_numpy(torch.ones(2, dtype=torch.bfloat16))
    >>> dtype, arr.dtype.name, arr.tolist()
    ('bfloat16', 'uint16', [16256, 16256])
"""

from __future__ import annotations

import pickle
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from netparity import inputs
from netparity.dtypes import DTYPES
from netparity.errors import CheckpointError
from netparity.frameworks.base import CheckpointData
from netparity.frameworks.statedict import locate_state


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]


def read(p: Path, *, shapes_only: bool = False) -> CheckpointData:
    """Read a PyTorch checkpoint safely (``weights_only=True``) into storage arrays
    (``shapes_only``: onto the ``meta`` device, as zero-stride stand-ins: no data is read).

    Raises:
        CheckpointError: the file needs arbitrary unpickling, is corrupt or holds no tensors.
    """
    try:
        with warnings.catch_warnings():  # torch warns about pickle protocols; errors say enough
            warnings.simplefilter("ignore")
            # (a file object, not the path: torch.load sends a path named .safetensors to the
            # safetensors reader, whatever the bytes are)
            with inputs.open_binary(p, error=CheckpointError, what="checkpoint") as f:
                obj = torch.load(f, weights_only=True,
                                 map_location="meta" if shapes_only else "cpu")
    except pickle.UnpicklingError as e:
        msg = str(e)
        detail = next((ln.strip() for ln in msg.splitlines()
                       if ln.strip().startswith("Unsupported")), "")
        if "weights only load failed" in msg.lower() or detail:
            raise CheckpointError(
                "refused: loading needs arbitrary unpickling (torch.load weights_only=True "
                f"rejected it{': ' + detail if detail else ''}); only load such a file if you "
                "trust it, then re-save its state_dict"
            ) from None
        raise CheckpointError(f"corrupt PyTorch checkpoint: {_one_line(e)}") from None
    except RuntimeError as e:
        raise CheckpointError(f"corrupt or truncated PyTorch checkpoint: {_one_line(e)}") from None
    return from_object(obj)


def from_object(obj: Any) -> CheckpointData:
    """The tensors of a loaded checkpoint object: a state dict, one nested under a wrapper key
    (:data:`~netparity.frameworks.statedict.WRAPPER_KEYS`), or nested dicts (flattened into
    dotted names)."""
    out = CheckpointData()
    if isinstance(obj, torch.nn.Module):  # cannot happen with weights_only, but be explicit
        obj = obj.state_dict()
    state = locate_state(obj, lambda v: isinstance(v, torch.Tensor), out)
    for name, t in state.items():
        if isinstance(t, torch.Tensor):
            arr, dtype = torch_to_numpy(t)
            out.tensors[str(name)] = arr
            out.dtypes[str(name)] = dtype
    return out


def torch_to_numpy(t: torch.Tensor) -> tuple[np.ndarray, str]:
    """A torch tensor as (numpy storage array, canonical dtype) without changing any bits."""
    from netparity.frameworks.torch.adapter import DTYPE_NAMES

    if t.is_sparse or t.is_quantized:
        raise CheckpointError("sparse and quantized tensors are not supported")
    name = DTYPE_NAMES.get(t.dtype, "")
    if name not in DTYPES:
        raise CheckpointError(f"unsupported PyTorch dtype {t.dtype}")
    if t.is_meta:  # shape only (a shapes_only read, a model built on the meta device)
        from netparity.dtypes import stand_in

        return stand_in(name, tuple(t.shape)), name
    t = t.detach().cpu().contiguous()
    if name == "bfloat16":
        return t.view(torch.int16).numpy().view(np.uint16).copy(), name
    if name.startswith("float8"):
        return t.view(torch.uint8).numpy().copy(), name
    return t.numpy().copy(), name


def numpy_to_torch(arr: np.ndarray, dtype: str) -> torch.Tensor:
    """Inverse of :func:`torch_to_numpy`."""
    a = np.array(arr, copy=True, order="C")
    if dtype == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    if dtype.startswith("float8"):
        return torch.from_numpy(a).view(getattr(torch, dtype))
    return torch.from_numpy(a)


def write(p: Path, items: list[tuple[str, str, np.ndarray]]) -> None:
    """``torch.save`` a state dict of ``(name, canonical dtype, storage array)`` items."""
    torch.save(OrderedDict((k, numpy_to_torch(v, d)) for k, d, v in items), p)
