"""``stop_on_nonfinite`` in MindSpore's backward (PyNative): a live stop at the Cell whose
backward makes the first NaN/Inf, named down to the forward primitive whose backward did it.

MindSpore runs backward primitives in its C++ grad executor: no Python hook sees them. What
Python does see live is ``Cell.register_backward_hook`` (the gradients w.r.t. a Cell's outputs
and inputs, as each Cell's backward finishes) and ``Tensor.register_hook`` (the gradient w.r.t.
any tensor of a PyNative graph). The stop uses both:

* every Cell (the optimizer's excepted) keeps references to the inputs of its calls in this step
  (a forward pre-hook; a call's are dropped once its backward ran), and a backward hook checks its
  input gradients on the host; when one is non-finite while every output gradient is finite,
  that Cell's backward introduced the NaN/Inf (inner Cells' hooks run before their parents');
* that Cell is then run again on its saved inputs under ``mindspore.vjp``, with the capture's
  primitive interception (the JIT context and the wrapped Tensor operators) registering a
  gradient hook on each primitive's inputs and outputs, and the backward of that replay is run
  with the Cell's saved output gradient. The first primitive whose output gradient is finite
  and whose input gradient is not is the one whose backward made the NaN/Inf: the stop names it
  (``sqrt``, native ``Sqrt``), its forward source line, and the classic cause its forward
  inputs show (``sqrt of zero or negative input``), "in its backward" -- the backward kernel
  itself is not seen.

When the replay does not reproduce the value (random primitives such as dropout, a backward
introduced by a C++-dispatched Tensor method the interception does not see) the stop names the
Cell alone. It raises :class:`~netparity.capture.nonfinite.NonFiniteStop` after saving
``<trace>/nonfinite/rank{N}.npz`` (the primitive's forward inputs and its output gradient, or the
Cell's output gradient) and ``.json``.

Example:
    >>> with capture(net, d, level="op", stop_on_nonfinite=True) as cap:   # doctest: +SKIP
    ...     loss, grads = grad_fn(x, y)       # NonFiniteStop: ... by sqrt in 1 (backward ...
"""

from __future__ import annotations

from typing import Any

import numpy as np

from netparity.capture.nonfinite import NonFiniteStop, classify, save_origin, stop_message
from netparity.capture.session import user_source
from netparity.trace.vocab import canonical_op


def _finite(t: Any) -> bool:
    """Whether a gradient (``None``: no gradient) holds only finite values."""
    if t is None or not hasattr(t, "asnumpy"):
        return True
    a = t.asnumpy()
    return a.dtype.kind not in "fc" or bool(np.isfinite(a).all())


class _Replay:
    """The primitives of one replayed Cell call and what their gradient hooks saw."""

    def __init__(self, cap: Any):
        self.cap = cap
        self.prims: list[tuple[Any, tuple[Any, ...], Any, str]] = []  # prim, args, res, source
        self.out_finite: dict[int, bool] = {}
        self.out_grad: dict[int, Any] = {}
        self.origin: int | None = None

    def observe(self, prim: Any, res: Any, args: tuple[Any, ...]) -> None:
        from netparity.frameworks.mindspore.capture import _flatten

        i = len(self.prims)
        self.prims.append((prim, args, res, user_source(self.cap._skip)))
        for role, obj in (("in", args), ("out", res)):
            for _, t in _flatten(obj, "", self.cap._is_tensor):
                try:
                    t.register_hook(lambda g, i=i, role=role: self._seen(i, role, g))
                except Exception:  # noqa: BLE001 - a tensor outside the graph: no gradient
                    pass

    def _seen(self, i: int, role: str, g: Any) -> None:
        if role == "out":
            ok = _finite(g)
            self.out_finite[i] = self.out_finite.get(i, True) and ok
            if ok:
                self.out_grad.setdefault(i, g)
        elif self.origin is None and self.out_finite.get(i) and not _finite(g):
            self.origin = i


class BackwardStop:
    """The backward half of ``stop_on_nonfinite`` for one :class:`MindSporeCapture`."""

    def __init__(self, cap: Any):
        self.cap = cap
        self.calls: dict[int, list[tuple[tuple[Any, ...], dict[str, Any]]]] = {}
        self.step = -1
        self.replay: _Replay | None = None

    def install(self, cell: Any) -> list[Any]:
        """Hook one Cell; the handles to remove."""
        return [cell.register_forward_pre_hook(self._pre, with_kwargs=True),
                cell.register_backward_hook(self._bwd)]

    def _pre(self, cell: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self.replay is not None:
            return
        if self.step != self.cap.step_no:
            self.calls.clear()
            self.step = self.cap.step_no
        self.calls.setdefault(id(cell), []).append((args, kwargs))

    def _bwd(self, cell: Any, grad_input: Any, grad_output: Any) -> None:
        cap = self.cap
        if self.replay is not None or getattr(cap, "_nf_stopped", False):
            return
        saved = self.calls.get(id(cell))
        call = saved.pop() if saved else None
        gi = grad_input if isinstance(grad_input, (tuple, list)) else (grad_input,)
        go = grad_output if isinstance(grad_output, (tuple, list)) else (grad_output,)
        if all(_finite(g) for g in gi) or not all(_finite(g) for g in go):
            return
        cap._nf_stopped = True
        origin, arrays = self._describe(cell, call, tuple(go))
        save_origin(cap.path, cap.rank, origin, arrays)
        origin["saved"] = str(cap.path / "nonfinite" / f"rank{cap.rank}.npz")
        cap.flush()
        raise NonFiniteStop(stop_message(origin), origin)

    def _describe(self, cell: Any, call: Any, go: tuple[Any, ...]
                  ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        cap = self.cap
        path = cap._paths.get(id(cell), "")
        native_cell, op_cell = cap._native.get(id(cell), (type(cell).__name__, ""))
        rep = self._replay(cell, call, go) if call is not None else None
        base = {"module": path, "direction": "backward", "step": cap.step_no, "rank": cap.rank,
                "verdict": "introduced"}
        if rep is None or rep.origin is None:
            why = ("its inputs were not kept" if call is None else
                   "replaying it did not reproduce the value (random primitives, or a Tensor "
                   "method the capture does not see)")
            origin = dict(base, op=op_cell, native=native_cell, source="",
                          cause=f"in the backward of Cell {path or '(root)'}: the gradient "
                                f"w.r.t. its inputs is non-finite from a finite gradient of its "
                                f"outputs; the primitive is not named ({why})")
            return origin, {f"grad_output.{i}": g.asnumpy() for i, g in enumerate(go)
                            if g is not None}
        prim, args, res, src = rep.prims[rep.origin]
        native = str(getattr(prim, "name", type(prim).__name__))
        op = canonical_op("mindspore", native)
        from netparity.frameworks.mindspore.capture import _flatten
        from netparity.frameworks.mindspore.nonfinite import call_stats

        ins, in_st, out_st = call_stats(cap, args, list(_flatten(res, "", cap._is_tensor)))
        why = classify(op, in_st, out_st, out_st[0]["dtype"] if out_st else "")
        where = f"in its backward ({native}'s backward kernel itself is not seen: found by " \
                f"replaying Cell {path or '(root)'} with a gradient hook on each primitive)"
        origin = dict(base, op=op, native=native, source=src,
                      cause=f"{why}; {where}" if why else where,
                      inputs=in_st, outputs=out_st, cell=native_cell)
        arrays = {a: np.array(t.asnumpy(), copy=True) for a, t in ins}
        g = rep.out_grad.get(rep.origin)
        if g is not None:
            arrays["grad_output"] = np.array(g.asnumpy(), copy=True)
        return origin, arrays

    def _replay(self, cell: Any, call: Any, go: tuple[Any, ...]) -> _Replay | None:
        """Run the Cell call again under ``mindspore.vjp`` with a gradient hook on every
        primitive's inputs and outputs, then its backward with the saved output gradient."""
        import mindspore as ms

        args, kwargs = call
        # fresh copies: hooks on the original tensors would stay in the run's own graph
        args = tuple(ms.Tensor(a.asnumpy().copy()) if self.cap._is_tensor(a) else a
                     for a in args)
        rep = _Replay(self.cap)
        busy, self.cap._busy = self.cap._busy, True  # the capture records nothing meanwhile
        self.replay = rep
        try:
            def fwd(*a: Any) -> Any:
                return cell(*a, **kwargs)

            out, vjp_fn = ms.vjp(fwd, *args)
            sens = go if isinstance(out, (tuple, list)) else go[0]
            vjp_fn(sens)
        except Exception:  # noqa: BLE001 - the replay only names the primitive; the Cell stays
            return None
        finally:
            self.replay = None
            self.cap._busy = busy
        return rep
