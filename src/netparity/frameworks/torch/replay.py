"""Replay one submodule of a PyTorch model on given tensors (``TorchAdapter.run_module`` and
``run_module_backward``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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


def _submodule(model: torch.nn.Module, path: str) -> torch.nn.Module:
    try:
        return model.get_submodule(path) if path else model
    except AttributeError as e:
        raise FrameworkError(f"no submodule {path!r} in the model") from e


def _tensors(mod: torch.nn.Module,
             inputs: Sequence[tuple[str, np.ndarray, str]]) -> list[tuple[str, torch.Tensor]]:
    dev = next((p.device for p in mod.parameters()), torch.device("cpu"))
    out = []
    for arg, arr, dtype in inputs:
        want = _TORCH_DTYPES.get(dtype)
        if want is None:
            raise FrameworkError(f"argument {arg}: dtype {dtype} cannot be replayed")
        t = torch.from_numpy(np.array(arr, copy=True))  # trace payloads are read-only maps
        out.append((arg, t.to(device=dev, dtype=want)))
    return out


@contextmanager
def _mode(mod: torch.nn.Module, train: bool) -> Iterator[None]:
    modes = [(m, m.training) for m in mod.modules()]
    mod.train(train)
    try:
        yield
    finally:
        for m, was in modes:
            m.training = was


def run_module(model: torch.nn.Module, path: str,
               inputs: Sequence[tuple[str, np.ndarray, str]],
               train: bool = True) -> list[tuple[str, np.ndarray]]:
    """See :meth:`netparity.frameworks.base.FrameworkAdapter.run_module`."""
    mod = _submodule(model, path)
    args, kwargs = call_arguments(_tensors(mod, inputs))
    with _mode(mod, train), torch.no_grad():
        out: Any = mod(*args, **kwargs)
    flat: list[tuple[str, torch.Tensor]] = []
    _flatten(out, "", flat)
    return [(a, _host(t)) for a, t in flat]


def run_module_backward(model: torch.nn.Module, path: str,
                        inputs: Sequence[tuple[str, np.ndarray, str]],
                        grad_outputs: Sequence[tuple[str, np.ndarray]],
                        train: bool = True) -> list[tuple[str, np.ndarray]]:
    """See :meth:`netparity.frameworks.base.FrameworkAdapter.run_module_backward`."""
    mod = _submodule(model, path)
    tensors = _tensors(mod, inputs)
    for _, t in tensors:
        if t.is_floating_point():
            t.requires_grad_(True)
    args, kwargs = call_arguments(tensors)
    with _mode(mod, train), torch.enable_grad():
        out: Any = mod(*args, **kwargs)
    flat: list[tuple[str, torch.Tensor]] = []
    _flatten(out, "", flat)
    given = dict(grad_outputs)
    outs = [(t, torch.from_numpy(np.array(given[a], copy=True)).to(t.device, t.dtype))
            for a, t in flat if a in given and t.requires_grad]
    wrt = [(a, t) for a, t in tensors if t.requires_grad]
    if not outs or not wrt:
        raise FrameworkError("nothing to differentiate: no output gradient or no float input")
    grads = torch.autograd.grad([o for o, _ in outs], [t for _, t in wrt],
                                [g for _, g in outs], allow_unused=True)
    return [(a, _host(g) if g is not None else np.zeros(tuple(t.shape), np.float32))
            for (a, t), g in zip(wrt, grads)]
