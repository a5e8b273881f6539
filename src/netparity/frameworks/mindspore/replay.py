"""Replay one Cell of a MindSpore network on given tensors (``MindSporeAdapter.run_module``
and ``run_module_backward``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import mindspore as ms
import numpy as np

from netparity.errors import FrameworkError
from netparity.frameworks.base import call_arguments
from netparity.frameworks.mindspore.capture import _flatten

_MS_DTYPES = {"float64": ms.float64, "float32": ms.float32, "float16": ms.float16,
              "bfloat16": ms.bfloat16, "int64": ms.int64, "int32": ms.int32, "int16": ms.int16,
              "int8": ms.int8, "uint8": ms.uint8, "bool": ms.bool_}


_FLOATS = ("float64", "float32", "float16", "bfloat16")


def _host(t: Any) -> np.ndarray:
    if t.dtype in (ms.float16, ms.bfloat16):
        t = t.astype(ms.float32)
    return np.array(t.asnumpy(), copy=True)


def _is_tensor(x: Any) -> bool:
    return isinstance(x, ms.Tensor)


def _cell(model: Any, path: str) -> Any:
    cells = dict(model.cells_and_names())
    if path not in cells:
        raise FrameworkError(f"no cell {path!r} in the network")
    return cells[path]


def _tensors(inputs: Sequence[tuple[str, np.ndarray, str]]) -> list[tuple[str, Any]]:
    out = []
    for arg, arr, dtype in inputs:
        want = _MS_DTYPES.get(dtype)
        if want is None:
            raise FrameworkError(f"argument {arg}: dtype {dtype} cannot be replayed")
        out.append((arg, ms.Tensor(np.array(arr, copy=True)).astype(want)))
    return out


@contextmanager
def _mode(cell: Any, train: bool) -> Iterator[None]:
    modes = [(c, bool(c.training)) for _, c in cell.cells_and_names()]
    cell.set_train(train)
    try:
        yield
    finally:
        for c, was in modes:
            c.training = was


def run_module(model: Any, path: str, inputs: Sequence[tuple[str, np.ndarray, str]],
               train: bool = True) -> list[tuple[str, np.ndarray]]:
    """See :meth:`netparity.frameworks.base.FrameworkAdapter.run_module`."""
    cell = _cell(model, path)
    args, kwargs = call_arguments(_tensors(inputs))
    with _mode(cell, train):
        out = cell(*args, **kwargs)
    return [(a, _host(t)) for a, t in _flatten(out, "", _is_tensor)]


def run_module_backward(model: Any, path: str, inputs: Sequence[tuple[str, np.ndarray, str]],
                        grad_outputs: Sequence[tuple[str, np.ndarray]],
                        train: bool = True, params: bool = False) -> list[tuple[str, np.ndarray]]:
    """See :meth:`netparity.frameworks.base.FrameworkAdapter.run_module_backward`."""
    cell = _cell(model, path)
    tensors = _tensors(inputs)
    args, kwargs = call_arguments(tensors)
    if kwargs:
        raise FrameworkError("keyword tensor arguments cannot be differentiated by replay")
    floats = [i for i, (_, _, d) in enumerate(inputs) if d in _FLOATS]
    if not floats:
        raise FrameworkError("nothing to differentiate: no float input")
    # its own parameters (not its children's: a child's gradients are its own replay's)
    weights = cell.trainable_params(recurse=False) if params else []
    with _mode(cell, train):
        out, vjp_fn = (ms.vjp(lambda *xs: cell(*xs), *args, weights=weights) if weights else
                       ms.vjp(lambda *xs: cell(*xs), *args))
        flat = list(_flatten(out, "", _is_tensor))
        given = dict(grad_outputs)
        if any(a not in given for a, _ in flat):
            raise FrameworkError("an output's gradient was not captured")
        sens = [ms.Tensor(np.array(given[a], copy=True)).astype(t.dtype) for a, t in flat]
        cot: Any = sens[0] if len(sens) == 1 and _is_tensor(out) else tuple(sens)
        grads = vjp_fn(cot)
    wgrads: Any = ()
    if weights:  # (gradients of the inputs, of the weights)
        grads, wgrads = grads
    grads = grads if isinstance(grads, tuple) else (grads,)
    # a Parameter's name is its full path in the model
    return [(tensors[i][0], _host(grads[i])) for i in floats] + [
        (f"param:{w.name}", _host(g)) for w, g in zip(weights, wgrads)]


def _nest(values: dict[str, Any]) -> list[Any]:
    """Positional arguments from argument paths (``0``, ``2.1``: the second element of a tuple
    argument), as the op capture recorded them."""
    top: dict[int, Any] = {}
    for path, v in values.items():
        if path.startswith("kw."):
            raise FrameworkError(f"keyword argument {path[3:]!r}: primitives take positional "
                                 "arguments only")
        head, _, rest = path.partition(".")
        if not rest:
            top[int(head)] = v
            continue
        if "." in rest:
            raise FrameworkError(f"argument {path!r} is nested twice; the call cannot be rebuilt")
        parts = top.setdefault(int(head), {})
        if not isinstance(parts, dict):
            raise FrameworkError(f"argument {path!r} is both a value and a tuple")
        parts[int(rest)] = v
    if sorted(top) != list(range(len(top))):
        raise FrameworkError("an argument of the call is missing from the trace")
    args = []
    for i in range(len(top)):
        v = top[i]
        if isinstance(v, dict):
            if sorted(v) != list(range(len(v))):
                raise FrameworkError(f"tuple argument {i} has a gap")
            v = tuple(v[j] for j in range(len(v)))
        args.append(v)
    return args


def run_op(native: str, inputs: Sequence[tuple[str, np.ndarray, str]], scalars: dict[str, Any],
           op_info: dict[str, Any] | None = None) -> list[tuple[str, np.ndarray]]:
    """See :meth:`netparity.frameworks.base.FrameworkAdapter.run_op`: the primitive is built
    again from ``op_info`` (its class and constructor arguments, the op record's
    ``extra["prim"]``) and called on the tensors and the recorded non-tensor arguments."""
    from netparity.frameworks.mindspore.opcall import build_prim, call_prim, decode_value

    if not op_info or "class" not in op_info:
        raise FrameworkError(f"{native}: the trace does not say which primitive ran (captured "
                             "before primitives' classes and arguments were recorded)")
    if op_info.get("unrecorded"):
        raise FrameworkError(f"{native}: arguments not recorded: "
                             f"{', '.join(map(str, op_info['unrecorded']))}")
    prim = build_prim(op_info)
    values: dict[str, Any] = {a: t for a, t in _tensors(inputs)}
    values.update({k: decode_value(v) for k, v in scalars.items() if k not in values})
    out = call_prim(prim, _nest(values))
    return [(a, _host(t)) for a, t in _flatten(out, "", _is_tensor)]
