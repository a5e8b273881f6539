"""Cell substitution for ``netparity bisect`` (MindSpore, PyNative): the same protocol as
:mod:`netparity.frameworks.torch.substitute` -- pin random cells, observe which cells a step
calls and in what order, and replace chosen cells' outputs while a step runs (a forward hook
that returns the new output; MindSpore's autodiff treats it as a constant, which the loss of
the step does not need)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import mindspore as ms
import numpy as np

from netparity.frameworks._substitute import observe as _observe
from netparity.frameworks.mindspore.adapter import MindSporeAdapter

RANDOM_LAYERS = ("Dropout", "DropPath")
PASSIVE = ("Identity", *RANDOM_LAYERS)

Inputs = list[tuple[str, np.ndarray, str]]
_AD = MindSporeAdapter()


def pin_random(model: Any) -> list[str]:
    """Set every dropout-like cell's drop probability to 0; returns their paths."""
    pinned = []
    for name, c in model.cells_and_names():
        if any(k in type(c).__name__ for k in RANDOM_LAYERS):
            p = getattr(c, "p", None)
            if isinstance(p, float) and p > 0:
                c.p = 0.0
                pinned.append(name)
            if isinstance(getattr(c, "keep_prob", None), float) and c.keep_prob < 1:
                c.keep_prob = 1.0
                if name not in pinned:
                    pinned.append(name)
    return pinned


def _flat(args: tuple[Any, ...]) -> list[tuple[str, Any]] | None:
    if not all(isinstance(a, ms.Tensor) for a in args):
        return None
    return [(str(i), a) for i, a in enumerate(args)]


def _outputs(out: Any) -> list[Any] | None:
    if isinstance(out, ms.Tensor):
        return [out]
    if isinstance(out, tuple | list) and out and all(isinstance(t, ms.Tensor) for t in out):
        return list(out)
    return None


def observe(model: Any, run: Callable[[], Any]) -> dict[str, dict[str, Any]]:
    """Run ``run()`` with every cell watched (see
    :func:`netparity.frameworks._substitute.observe`)."""

    def install(c: Any, on_call: Callable[..., None], on_return: Callable[..., None]) -> list[Any]:
        return [c.register_forward_pre_hook(lambda c, a: on_call(c, a, {})),
                c.register_forward_hook(lambda c, a, o: on_return(c, a, {}, o))]

    return _observe(model.cells_and_names(), install,
                    lambda a, k, o: _flat(a) is not None and _outputs(o) is not None,
                    PASSIVE, run)


def as_inputs(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Inputs:
    """A call's tensors as ``(argument path, array, dtype)``; bfloat16/float16 widened."""
    out = []
    for a, t in _flat(args) or []:
        dt = _AD.dtype_name(t)
        arr = t.float().asnumpy() if dt in ("bfloat16", "float16") else t.asnumpy()
        out.append((a, np.array(arr, copy=True), dt))
    return out


def like(arrays: list[np.ndarray], out: Any) -> Any:
    """``arrays`` shaped as the cell's own output ``out``, each in the dtype it replaces."""
    outs = _outputs(out) or []
    new = [ms.Tensor(np.ascontiguousarray(a, np.float32 if a.dtype == np.float64 and
                                          o.dtype != ms.float64 else None).reshape(o.shape),
                     o.dtype) for a, o in zip(arrays, outs, strict=True)]
    return new[0] if isinstance(out, ms.Tensor) else type(out)(new)


@contextmanager
def substituted(model: Any, subs: Mapping[str, Callable[[tuple[Any, ...], dict[str, Any], Any],
                                                        Any]]) -> Iterator[None]:
    """While the context lasts, the output of each cell ``path`` of ``subs`` is what
    ``subs[path](args, {}, own_output)`` returns."""
    cells = dict(model.cells_and_names())
    handles = []
    try:
        for path, fn in subs.items():
            handles.append(cells[path].register_forward_hook(
                lambda c, a, o, fn=fn: fn(a, {}, o)))
        yield
    finally:
        for h in handles:
            h.remove()
