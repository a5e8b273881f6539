"""``stop_on_nonfinite`` for MindSpore (PyNative, op level): stop at the first primitive whose
output holds NaN/Inf.

The capture's JIT-context funnel sees every PyNative primitive after it ran (forward and the
optimizer; backward primitives do not pass it, so a backward-only NaN is caught at the first
forward or update primitive that meets it). :func:`check_op` reads each floating-point output
on the host (``asnumpy``: on CPU a view, no copy), and at the first non-finite one saves the
primitive's inputs with :func:`netparity.capture.nonfinite.save_origin`, flushes the trace and
raises :class:`~netparity.capture.nonfinite.NonFiniteStop` with one line.

Example:
    >>> with capture(net, d, level="op", stop_on_nonfinite=True) as cap:   # doctest: +SKIP
    ...     net(x)                                     # raises NonFiniteStop at ops.log
"""

from __future__ import annotations

from typing import Any

import numpy as np

from netparity.capture.nonfinite import NonFiniteStop, classify, save_origin, stop_message
from netparity.capture.session import user_source
from netparity.trace.vocab import canonical_op

_FLOAT_KINDS = "fc"


def check_op(cap: Any, prim: Any, res: Any, args: tuple[Any, ...]) -> None:
    """Raise :class:`NonFiniteStop` when an output of primitive ``prim`` holds NaN/Inf."""
    from netparity.frameworks.mindspore.capture import _flatten

    if getattr(cap, "_nf_stopped", False) or getattr(cap, "_nf_busy", False):
        return
    cap._nf_busy = True  # reading values may run primitives: they are not checked
    try:
        outs = list(_flatten(res, "", cap._is_tensor))
        arrays = [(a, _host(cap, t)) for a, t in outs]
        if all(x is None or np.isfinite(x).all() for _, x in arrays):
            return
        cap._nf_stopped = True
        origin, saved = _describe(cap, prim, args, outs)
        save_origin(cap.path, cap.rank, origin, saved)
        origin["saved"] = str(cap.path / "nonfinite" / f"rank{cap.rank}.npz")
    finally:
        cap._nf_busy = False
    cap.flush()
    raise NonFiniteStop(stop_message(origin), origin)


def _host(cap: Any, t: Any) -> np.ndarray | None:
    """The values of a floating-point tensor as a NumPy array (``None`` for other dtypes)."""
    name = cap.adapter.dtype_name(t)
    if not name.startswith(("float", "bfloat", "complex")):
        return None
    arr = t.asnumpy()
    return arr if arr.dtype.kind in _FLOAT_KINDS else arr.astype(np.float32)


def call_stats(cap: Any, args: Any, outs: list[tuple[str, Any]]
               ) -> tuple[list[tuple[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """A primitive call's input tensors (arg path, tensor) and the statistics of its inputs and
    outputs (``outs``: (arg path, tensor)), as :func:`classify` takes them."""
    from netparity.frameworks.mindspore.capture import _flatten

    ad = cap.adapter
    ins = list(_flatten(args, "", cap._is_tensor))
    st = ad.resolve_stats([ad.stats_handle(t) for _, t in ins + outs])
    in_st = [dict(s, arg=a, dtype=ad.dtype_name(t), numel=int(np.prod(t.shape)))
             for (a, t), s in zip(ins, st)]
    out_st = [dict(s, arg=a, dtype=ad.dtype_name(t), numel=int(np.prod(t.shape)))
              for (a, t), s in zip(outs, st[len(ins):])]
    return ins, in_st, out_st


def _describe(cap: Any, prim: Any, args: tuple[Any, ...], outs: list[tuple[str, Any]]
              ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    ins, in_st, out_st = call_stats(cap, args, outs)
    native = str(getattr(prim, "name", type(prim).__name__))
    op = canonical_op("mindspore", native)
    bad_in = any(s.get("nan") or s.get("posinf") or s.get("neginf") for s in in_st)
    cause = ("NaN/Inf already in this primitive's input (the data batch, a parameter, or a "
             "value made outside the captured primitives)" if bad_in else
             classify(op, in_st, out_st, out_st[0]["dtype"] if out_st else ""))
    frame = cap._stack[-1] if cap._stack else None
    origin = {"op": op, "native": native, "module": frame.path if frame is not None else "",
              "direction": "update" if cap._update > 0 else "forward", "step": cap.step_no,
              "rank": cap.rank, "source": user_source(cap._skip),
              "verdict": "entered" if bad_in else "introduced", "cause": cause,
              "inputs": in_st, "outputs": out_st}
    saved = {a: np.array(t.asnumpy(), copy=True) for a, t in ins}
    return origin, saved
