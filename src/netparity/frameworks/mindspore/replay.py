"""Replay one Cell of a MindSpore network on given tensors (``MindSporeAdapter.run_module``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mindspore as ms
import numpy as np

from netparity.errors import FrameworkError
from netparity.frameworks.base import call_arguments
from netparity.frameworks.mindspore.capture import _flatten

_MS_DTYPES = {"float64": ms.float64, "float32": ms.float32, "float16": ms.float16,
              "bfloat16": ms.bfloat16, "int64": ms.int64, "int32": ms.int32, "int16": ms.int16,
              "int8": ms.int8, "uint8": ms.uint8, "bool": ms.bool_}


def _host(t: Any) -> np.ndarray:
    if t.dtype in (ms.float16, ms.bfloat16):
        t = t.astype(ms.float32)
    return np.array(t.asnumpy(), copy=True)


def run_module(model: Any, path: str, inputs: Sequence[tuple[str, np.ndarray, str]],
               train: bool = True) -> list[tuple[str, np.ndarray]]:
    """See :meth:`netparity.frameworks.base.FrameworkAdapter.run_module`."""
    cells = dict(model.cells_and_names())
    if path not in cells:
        raise FrameworkError(f"no cell {path!r} in the network")
    cell = cells[path]
    tensors = []
    for arg, arr, dtype in inputs:
        want = _MS_DTYPES.get(dtype)
        if want is None:
            raise FrameworkError(f"argument {arg}: dtype {dtype} cannot be replayed")
        tensors.append((arg, ms.Tensor(np.array(arr, copy=True)).astype(want)))
    args, kwargs = call_arguments(tensors)
    modes = [(c, bool(c.training)) for _, c in cell.cells_and_names()]
    cell.set_train(train)
    try:
        out = cell(*args, **kwargs)
    finally:
        for c, was in modes:
            c.training = was
    return [(a, _host(t)) for a, t in _flatten(out, "", lambda x: isinstance(x, ms.Tensor))]
