"""``stop_on_nonfinite`` for PyTorch: stop the run at the first op that outputs NaN/Inf.

A ``TorchDispatchMode`` pushed *above* the capture's own op mode (so the origin op's inputs and
outputs are recorded before the stop, and the capture's statistics ops never reach it) checks
every floating-point output of every aten op -- forward, backward and ``optimizer.step()`` --
with one ``isfinite().all()``. At the first non-finite output it saves the op's inputs to
``<trace>/nonfinite/rank{N}.npz`` (with a ``.json`` description), flushes the trace, and raises
:class:`~netparity.capture.nonfinite.NonFiniteStop` with one line: the op, its module,
direction, step, rank, source line and the classic cause the inputs show. :func:`replay` runs
the saved op again.

Example:
    >>> import tempfile, torch, netparity                       # doctest: +SKIP
    >>> with netparity.capture(model, d, stop_on_nonfinite=True) as cap:  # doctest: +SKIP
    ...     loss = model(x)                                    # raises NonFiniteStop
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import torch

from netparity import hoststats
from netparity.capture.nonfinite import NonFiniteStop, classify, save_origin, stop_message
from netparity.frameworks.torch._common import (
    _autograd_node,
    _flatten,
    _flatten_call,
    _in_backward,
)
from netparity.frameworks.torch.adapter import _HOST_READY, _kernel_view, kernel_threads
from netparity.frameworks.torch.op_dispatch import _OpMode
from netparity.trace.vocab import UNINITIALISED_OPS, canonical_op

#: aten ops that only move, select or compare values: finite in, finite out, so their outputs
#: need no check (a value that arrives non-finite is caught at the next op that computes, as
#: "already in the inputs"). Casts and copies are not here: float32 -> float16 can overflow.
_MOVES = frozenset({
    "view", "_unsafe_view", "reshape", "_reshape_alias", "view_as", "t", "transpose",
    "permute", "expand", "expand_as", "detach", "alias", "clone", "slice", "select", "squeeze",
    "unsqueeze", "split", "split_with_sizes", "unbind", "as_strided", "contiguous", "flatten",
    "zeros_like", "ones_like", "empty_like", "empty", "zeros", "ones", "new_empty",
    "new_zeros", "new_ones", "empty_strided", "lift_fresh", "relu", "relu_", "threshold",
    "threshold_backward", "max_pool2d_with_indices", "cat", "stack", "index_select", "gather",
    "embedding", "narrow", "chunk", "zero_",
}) | UNINITIALISED_OPS  # an allocation's output is unwritten memory, not a computed NaN
#: per op overload: True when it is one of the moves (decided once per overload)
_SAFE: dict[Any, bool] = {}


class _GuardMode(_OpMode):
    """The capture's op mode with another handler: check outputs, record nothing."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return cast(NonFiniteGuard, self.cap)._guarded(func, args, kwargs or {})


class NonFiniteGuard:
    """Mixin of :class:`~netparity.frameworks.torch.capture.TorchCapture`: the live stop."""

    stop_on_nonfinite = False
    _guard: _GuardMode | None = None
    _stopped = False
    # provided by the capture this is mixed into
    _busy: bool
    _scaler_seen: bool
    _tls: Any
    _in_update: int
    _param_names: dict[int, str]
    adapter_t: Any
    path: Any
    rank: int
    step_no: int
    # (annotations only: a method stub here would shadow the real one later in the MRO)
    _source: Callable[[], str]
    flush: Callable[[], None]

    def _install_guard(self) -> None:
        """Push the guard mode (last, so it sits above the capture's op mode)."""
        if self.stop_on_nonfinite and self._guard is None:
            self._stopped = False
            self._guard = _GuardMode(self)  # type: ignore[arg-type]
            self._guard.__enter__()

    def _remove_guard(self) -> None:
        """Pop the guard mode (first: modes leave in the reverse order they came)."""
        if self._guard is not None:
            g, self._guard = self._guard, None
            g.__exit__(None, None, None)

    def _guarded(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run one op; stop when a floating-point output holds NaN/Inf."""
        out = func(*args, **kwargs)
        if self._busy or self._stopped or (self._scaler_seen and (
                self._in_update or _in_backward())):  # loss scaling handles those
            return out
        outs = computed_outputs(func, out)
        if not outs:
            return out
        # (the check itself must not reach the capture's op mode below this one)
        with torch._C._DisableTorchDispatch():
            bad = any(_nonfinite(t) for _, t in outs)
        if bad:
            self._nonfinite_stop(func, args, kwargs, outs)
        return out

    def _nonfinite_stop(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                        outs: list[tuple[str, torch.Tensor]],
                        where: dict[str, Any] | None = None) -> None:
        """Describe the origin, save its inputs, flush the trace and raise. ``where``
        (direction, module, source) is given by the light guard's replay."""
        self._stopped = True  # one stop: the exception's unwinding runs more ops
        busy, self._busy = self._busy, True
        try:
            with torch._C._DisableTorchDispatch():
                origin, arrays = self._describe_origin(func, args, kwargs, outs, where)
                npz = save_origin(self.path, self.rank, origin, arrays)
                origin["saved"] = str(npz)
            self._busy = busy
            self.flush()
        finally:
            self._busy = busy
        raise NonFiniteStop(stop_message(origin), origin)

    def _describe_origin(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                         outs: list[tuple[str, torch.Tensor]], where: dict[str, Any] | None = None
                         ) -> tuple[dict[str, Any], dict[str, Any]]:
        tls = self._tls
        if where is not None:
            direction, info = where["direction"], None
        elif self._in_update:
            direction, info = "update", None
        elif _in_backward():
            direction, info = "backward", (tls.bwd[-1] if tls.bwd else None)
        else:
            direction, info = "forward", (tls.stack[-1] if tls.stack else None)
        native = str(func)
        op = canonical_op("torch", native)
        ins, scalars = _flatten_call(args, kwargs)
        ad = self.adapter_t
        st = ad.resolve_stats([ad.stats_handle(t) for _, t in ins + outs])
        in_st = [dict(s, arg=a, dtype=ad.dtype_name(t), numel=t.numel())
                 for (a, t), s in zip(ins, st)]
        out_st = [dict(s, arg=a, dtype=ad.dtype_name(t), numel=t.numel())
                  for (a, t), s in zip(outs, st[len(ins):])]
        bad_in = [s for s in in_st if s.get("nan") or s.get("posinf") or s.get("neginf")]
        params = [self._param_names.get(id(t)) for a, t in ins
                  if any(s["arg"] == a for s in bad_in)]
        if not bad_in:
            verdict = "introduced"
            cause = classify(op, in_st, out_st, out_st[0]["dtype"] if out_st else "")
        else:
            verdict = "entered"
            named = [p for p in params if p]
            cause = (f"NaN/Inf in parameter {named[0]} (made by an earlier update)" if named
                     else "NaN/Inf already in this op's input (the data batch, or a value made "
                          "outside the captured ops)")
        node = _autograd_node() if direction == "backward" else ""
        if node:  # SqrtBackward0: the forward op whose derivative this is
            cause = f"{cause}; in {node}" if cause else f"in {node}"
        src = self._source() if where is None else where["source"]
        if info is not None and info.source and direction != "forward":
            src = src or info.source
        module = where["module"] if where is not None else info.path if info is not None else ""
        origin = {"op": op, "native": native, "module": module,
                  "direction": direction, "step": self.step_no, "rank": self.rank,
                  "source": src, "verdict": verdict, "cause": cause, "scalars": scalars,
                  "autograd_node": node,
                  "inputs": in_st, "outputs": out_st, "pid": os.getpid()}
        arrays = {a: t.detach().cpu().numpy() if t.dtype != torch.bfloat16
                  else t.detach().float().cpu().numpy() for a, t in ins}
        return origin, arrays


def computed_outputs(func: Any, out: Any) -> list[tuple[str, torch.Tensor]]:
    """The tensors op ``func`` returned, by argument path; none for ops that only move values
    (:data:`_MOVES`, decided once per overload)."""
    safe = _SAFE.get(func)
    if safe is None:
        safe = _SAFE[func] = str(func).split(".")[1] in _MOVES
    outs: list[tuple[str, torch.Tensor]] = []
    if safe:
        return outs
    if isinstance(out, torch.Tensor):
        outs.append(("", out))
    else:
        _flatten(out, "", outs)
    return outs


def _nonfinite(t: torch.Tensor) -> bool:
    """Does ``t`` hold NaN/Inf? On the CPU the statistics kernel's pass (it reports NaN/Inf);
    elsewhere one sum first -- a single reduction without a temporary, where
    ``isfinite().all()`` costs several: a NaN or Inf makes the sum non-finite, and a finite
    sum proves every element finite. Only a non-finite sum (or overflow of a large finite sum)
    takes the exact test."""
    if not (t.is_floating_point() or t.is_complex()) or not t.numel():
        return False
    kernel = hoststats._kernel
    if kernel is not None:  # CPU float32/64: the statistics kernel's one pass, ~5x torch.sum
        a = _kernel_view(t.detach(), _HOST_READY)
        if a is not None:
            # (None for NaN/Inf -- and for finite values beyond float16's range: look again)
            return kernel.vec(a, kernel_threads()) is None and not bool(np.isfinite(a).all())
    if not t.is_complex() and math.isfinite(float(t.sum(dtype=torch.float32))):
        return False
    return not bool(torch.isfinite(t).all())


def replay(trace_dir: str | os.PathLike[str], rank: int = 0) -> Any:
    """Run the op a live stop saved again, on its saved inputs (positional and keyword
    tensors and scalars; nested arguments are not rebuilt). Returns its output.

    Example:
        >>> out = replay("runs/stopped")          # doctest: +SKIP
        >>> bool(torch.isfinite(out).all())       # doctest: +SKIP
        False
    """
    from netparity.capture.nonfinite import load_origin
    from netparity.errors import UsageError

    info, arrays = load_origin(trace_dir, rank)
    name = info["native"]  # aten.log.default
    parts = name.split(".")
    try:
        fn: Any = getattr(getattr(torch.ops.aten, parts[1]), parts[2] if len(parts) > 2
                          else "default")
    except (AttributeError, IndexError):
        raise UsageError(f"cannot replay {name}: not an aten op") from None
    vals: dict[str, Any] = {k: torch.from_numpy(v) for k, v in arrays.items()}
    vals.update(info.get("scalars") or {})
    pos = sorted((k for k in vals if k.isdigit()), key=int)
    if any("." in k and not k.startswith("kw.") for k in vals):
        raise UsageError(f"cannot replay {name}: nested arguments are not rebuilt")
    args = [vals[k] for k in pos]
    kwargs = {k[3:]: v for k, v in vals.items() if k.startswith("kw.")}
    for k in ("kw.dtype",):
        if isinstance(kwargs.get(k[3:]), str):
            kwargs[k[3:]] = getattr(torch, kwargs[k[3:]].replace("torch.", ""))
    return fn(*args, **kwargs)
