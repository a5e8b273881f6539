"""Replay one submodule of a PyTorch model on given tensors (``TorchAdapter.run_module``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from netparity.errors import FrameworkError
from netparity.frameworks.base import call_arguments
from netparity.frameworks.torch._common import _flatten

_TORCH_DTYPES = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
                 "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32,
                 "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
                 "bool": torch.bool}


def _host(t: torch.Tensor) -> np.ndarray:
    x = t.detach().cpu()
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    return np.array(x.numpy(), copy=True)


def run_module(model: torch.nn.Module, path: str,
               inputs: Sequence[tuple[str, np.ndarray, str]],
               train: bool = True) -> list[tuple[str, np.ndarray]]:
    """See :meth:`netparity.frameworks.base.FrameworkAdapter.run_module`."""
    try:
        mod = model.get_submodule(path) if path else model
    except AttributeError as e:
        raise FrameworkError(f"no submodule {path!r} in the model") from e
    dev = next((p.device for p in mod.parameters()), torch.device("cpu"))
    tensors = []
    for arg, arr, dtype in inputs:
        t = torch.from_numpy(np.array(arr, copy=True))  # trace payloads are read-only maps
        want = _TORCH_DTYPES.get(dtype)
        if want is None:
            raise FrameworkError(f"argument {arg}: dtype {dtype} cannot be replayed")
        tensors.append((arg, t.to(device=dev, dtype=want)))
    args, kwargs = call_arguments(tensors)
    modes = [(m, m.training) for m in mod.modules()]
    mod.train(train)
    try:
        with torch.no_grad():
            out: Any = mod(*args, **kwargs)
    finally:
        for m, was in modes:
            m.training = was
    flat: list[tuple[str, torch.Tensor]] = []
    _flatten(out, "", flat)
    return [(a, _host(t)) for a, t in flat]
