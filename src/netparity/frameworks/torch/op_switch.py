"""Operator-level switching for ``netparity bisect`` (PyTorch, a dtype pair): inside one module's
forward, run a chosen set of its operator calls in the reference's dtype and the rest as the
candidate runs them (docs/bisect.md, "Operators").

The switch is a ``TorchFunctionMode`` active only while the module's ``forward`` runs, so it
sees the calls the module's code makes (``Tensor.softmax``, ``torch.nn.functional.linear``,
``Tensor.to``), above autograd: the backward of a switched call is the one of what actually ran.
A call is counted when one of its arguments is a floating tensor; it is a *unit* of the search
when it computes a floating tensor in a low-precision way: a float16/bfloat16 input, output or
``dtype`` argument, under autocast, or under another dispatch mode (``--emulate fp16-ops``).

* A switched call runs with autocast and every dispatch mode off, its float16/bfloat16 inputs
  and ``dtype`` arguments in the reference's dtype; its result stays in that dtype.
* Any other call runs as the candidate's code makes it, on what it is given: the reference's
  precision a switched call produced flows on by PyTorch's own dtype propagation (switching
  the ``Tensor.to(float16)`` that lowers a tensor switches what it feeds), except where its
  floating arguments now mix dtypes the candidate's own run did not mix (a float32 activation
  meeting float16 weights): then each gets the dtype the candidate's run gave it.
* The module's output is cast back to the candidate's output dtypes.

Example:
    >>> calls = observe_ops(model.blocks[2].attn, "float32", lambda: step(x, y))  # doctest: +SKIP
    >>> [c.name for c in calls if c.low]                                          # doctest: +SKIP
    ['Tensor.to', 'Tensor.softmax', 'Tensor.to']
"""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import _disable_current_modes, _get_current_dispatch_mode
from torch.utils._pytree import tree_flatten, tree_map

from netparity.errors import UsageError

LOW = (torch.float16, torch.bfloat16)
_TORCH_DIR = os.path.dirname(torch.__file__)


@dataclass
class OpCall:
    """One counted call of the module's forward (index: its rank among the counted calls)."""

    index: int
    name: str
    where: str  # file:line of the call in the user's code ("" when not found)
    dtypes: list[str | None]  # the floating tensor arguments' dtypes, flattened (None: other)
    out: list[str]  # the floating outputs' dtypes
    computes: bool  # returns a floating tensor and is not in place
    low: bool  # computes in a low-precision way (a unit of the search)
    how: list[str] = field(default_factory=list)  # why ``low``
    feeds: list[str] = field(default_factory=list)  # the calls that take its output

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _name(func: Any) -> str:
    q = str(getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or func)
    if q.startswith(("TensorBase.", "Tensor.")):
        return "Tensor." + q.partition(".")[2]
    mod = getattr(func, "__module__", None) or "torch"
    if mod.startswith("torch._C"):
        mod = "torch.nn.functional" if mod == "torch._C._nn" else "torch"
    return f"{mod}.{q.rpartition('.')[2]}"


def _in_place(name: str) -> bool:
    short = name.rpartition(".")[2]
    return (short.endswith("_") and not short.startswith("__")) or \
        short.startswith("__i") or short == "__setitem__"


def _where() -> str:
    f = sys._getframe(2)
    here = os.path.dirname(__file__)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith((_TORCH_DIR, here)) and "contextlib" not in fn:
            return f"{fn}:{f.f_lineno}"
        f = f.f_back  # type: ignore[assignment]
    return ""


def _float(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point()


def _dtype_name(d: torch.dtype) -> str:
    return str(d).removeprefix("torch.")


class _Mode(TorchFunctionMode):
    def __init__(self, ref_dtype: torch.dtype, recorded: list[OpCall] | None,
                 switched: frozenset[int]) -> None:
        super().__init__()
        self.ref_dtype, self.recorded, self.switched = ref_dtype, recorded, switched
        self.calls: list[OpCall] = []
        self.out_dtypes: list[list[str]] = []  # the module's output dtypes, per forward call
        self.count = 0
        self._made: dict[int, tuple[Any, int]] = {}  # id(output) -> (weakref, call index)

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        flat, _ = tree_flatten((args, kwargs))
        if not any(_float(t) for t in flat):
            return func(*args, **kwargs)
        i = self.count
        self.count += 1
        if self.recorded is None:
            return self._record(i, func, flat, args, kwargs)
        if i >= len(self.recorded):
            raise UsageError("bisect: the region's operator calls changed between runs (more "
                             "calls than the candidate's own run made): operators cannot be "
                             "bisected")
        if i in self.switched:
            ref = self.ref_dtype

            def up(v: Any) -> Any:
                if _float(v) and v.dtype in LOW:
                    return v.to(ref)
                return ref if isinstance(v, torch.dtype) and v in LOW else v

            with ExitStack() as st:
                st.enter_context(_disable_current_modes())
                for kind in ("cpu", "cuda"):
                    if kind == "cpu" or torch.cuda.is_available():
                        st.enter_context(torch.autocast(device_type=kind, enabled=False))
                return func(*tree_map(up, args), **tree_map(up, kwargs))
        # the candidate's call: the reference's precision a switched call upstream produced
        # flows on (dtype propagation, as if the candidate's code had computed it), unless its
        # floating arguments now mix dtypes they did not mix: then they get the candidate's own
        now = [_dtype_name(t.dtype) for t in flat if _float(t)]
        was = [d for d in self.recorded[i].dtypes if d is not None]
        if len(set(now)) <= 1 or now == was:
            return func(*args, **kwargs)
        want = iter(self.recorded[i].dtypes)

        def back(v: Any) -> Any:
            if not isinstance(v, torch.Tensor):
                return v
            d = next(want, None)
            if d is not None and _float(v) and _dtype_name(v.dtype) != d:
                return v.to(getattr(torch, d))
            return v

        a2, k2 = tree_map(back, (args, kwargs))
        return func(*a2, **k2)

    def _record(self, i: int, func: Any, flat: list[Any], args: Any, kwargs: Any) -> Any:
        out = func(*args, **kwargs)
        name = _name(func)
        outs = [t for t in tree_flatten(out)[0] if _float(t)]
        how = []
        if any(_float(t) and t.dtype in LOW for t in flat) or any(t.dtype in LOW for t in outs):
            how.append("float16/bfloat16 tensors")
        if any(isinstance(v, torch.dtype) and v in LOW for v in flat):
            how.append("a float16/bfloat16 dtype argument")
        if torch.is_autocast_enabled("cpu"):
            how.append("autocast")
        if _get_current_dispatch_mode() is not None:
            how.append("a dispatch mode (--emulate)")
        computes = bool(outs) and not _in_place(name)
        for t in flat:
            made = self._made.get(id(t)) if isinstance(t, torch.Tensor) else None
            if made is not None and made[0]() is t:
                self.calls[made[1]].feeds.append(f"{name} (#{i})")
        for t in outs:
            self._made[id(t)] = (weakref.ref(t), len(self.calls))
        self.calls.append(OpCall(
            i, name, _where(),
            [_dtype_name(t.dtype) if _float(t) else None for t in flat
             if isinstance(t, torch.Tensor)],
            [_dtype_name(t.dtype) for t in outs], computes, computes and bool(how), how))
        return out


@contextmanager
def _in_forward(module: torch.nn.Module, mode: _Mode) -> Iterator[list[list[str]]]:
    """``mode`` active while ``module.forward`` runs; its floating outputs cast back to the
    dtypes recorded (``yields`` the list the output dtypes of each call are recorded in)."""
    orig = module.forward
    outs: list[list[str]] = []
    recording = mode.recorded is None
    calls = iter(mode.out_dtypes)

    def forward(*args: Any, **kwargs: Any) -> Any:
        with mode:
            got = orig(*args, **kwargs)
        if recording:
            outs.append([_dtype_name(t.dtype) for t in tree_flatten(got)[0] if _float(t)])
            return got
        want = iter(next(calls, []))

        def back(t: Any) -> Any:
            if not _float(t):
                return t
            d = next(want, None)
            return t.to(getattr(torch, d)) if d and _dtype_name(t.dtype) != d else t

        return tree_map(back, got)

    module.forward = forward  # type: ignore[method-assign]
    try:
        yield outs
    finally:
        del module.forward


@dataclass
class Observed:
    """The candidate's own run of a module's forward: its counted calls and output dtypes."""

    calls: list[OpCall]
    out_dtypes: list[list[str]]


def observe_ops(module: torch.nn.Module, ref_dtype: str, run: Callable[[], Any]) -> Observed:
    """Run ``run()`` recording the calls ``module``'s forward makes."""
    mode = _Mode(getattr(torch, ref_dtype), None, frozenset())
    with _in_forward(module, mode) as outs:
        run()
    return Observed(mode.calls, outs)


def run_switched(module: torch.nn.Module, ref_dtype: str, observed: Observed,
                 switched: frozenset[int], run: Callable[[], Any]) -> Any:
    """``run()`` with the calls of ``module``'s forward whose indices are in ``switched`` in the
    reference's dtype (see the module docstring); returns what ``run`` returns."""
    mode = _Mode(getattr(torch, ref_dtype), observed.calls, switched)
    mode.out_dtypes = observed.out_dtypes
    with _in_forward(module, mode):
        got = run()
    if mode.count != len(observed.calls):
        raise UsageError("bisect: the region's operator calls changed between runs: operators "
                         "cannot be bisected")
    return got


__all__ = ["LOW", "Observed", "OpCall", "observe_ops", "run_switched"]
