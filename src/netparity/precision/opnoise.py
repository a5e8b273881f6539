"""Each aligned op pair judged against the reference op's own noise (plain ``compare`` of two
op-level traces that carry tensors; issue 28, deliver 0).

For a pair of op calls (reference, candidate) with tensors on both sides:

* ``r64``: the reference op made again in float64 on its captured inputs; its **noise** is
  ``||ref_out - r64|| / ||r64||`` (its own rounding, at least one ULP of the pair's coarser
  dtype);
* ``c64``: the candidate's op made again in float64 on the *reference's* inputs (mapped onto
  its arguments: the same paths in one framework, the float tensors in order, by shape, across
  frameworks); the **local** difference ``||c64 - r64|| / ||r64||`` is what the candidate's
  operator computes differently, free of any difference its inputs carried in.

The candidate's op **introduces** a difference when local > :data:`K` x noise: a FAIL. Otherwise
the comparison's own verdict stands (this never turns a failing pair into a passing one).
Nothing is said (``None``) when a side cannot be replayed, when a replay does not reproduce
its own captured output, or when the reference's inputs do not fit the candidate's arguments.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from netparity.errors import FrameworkError
from netparity.precision.engine import _is_random, normwise
from netparity.precision.standards import EPS, STANDARD, is_float

#: a port difference this many times the reference op's own noise is a FAIL
K = 100.0
_FAILS = (FrameworkError, RuntimeError, TypeError, ValueError, KeyError, IndexError)

Tensors = list[tuple[str, np.ndarray, str]]


class _Side:
    def __init__(self, tr: Any) -> None:
        from netparity.frameworks.registry import get_adapter

        self.tr = tr
        self.adapter = get_adapter(tr.framework)
        self.calls: dict[tuple[int, int], dict[tuple[int, int], list[Any]]] = {}

    def call(self, rec: Any) -> list[Any]:
        key = (int(rec.rank), int(rec.step))
        by = self.calls.get(key)
        if by is None:
            by = self.calls[key] = {}
            for r in self.tr.records(rank=rec.rank, step=rec.step, kind="op"):
                by.setdefault((int(r.rank), int(r.event)), []).append(r)
        return by.get((int(rec.rank), int(rec.event)), [])

    def inputs(self, recs: list[Any]) -> Tensors:
        return [(r.arg, np.asarray(self.tr.tensor(r)), r.dtype) for r in recs
                if r.role == "input"]

    def run(self, recs: list[Any], ins: Tensors) -> dict[str, np.ndarray]:
        extra = next((r.extra for r in recs if isinstance(r.extra, dict) and r.extra), {})
        wide = [(a, v, "float64" if is_float(d) else d) for a, v, d in ins]
        got = self.adapter.run_op(recs[0].native, wide, dict(extra.get("scalars") or {}),
                                  dict(extra["prim"]) if extra.get("prim") else None)
        return {a: np.asarray(v, np.float64) for a, v in got}


def _mapped(ref_ins: Tensors, cand_ins: Tensors, same: bool) -> Tensors | None:
    """The reference's inputs put in the candidate's argument slots, or None when they do not
    fit (or do not resemble the candidate's own inputs: a wrong mapping, not a port bug)."""
    if same:
        by = {a: (v, d) for a, v, d in ref_ins}
        if set(by) != {a for a, _, _ in cand_ins}:
            return None
        out = [(a, by[a][0], d) for a, _, d in cand_ins]
    else:
        ref_f = [(v, d) for _, v, d in ref_ins if is_float(d)]
        cand_f = [(a, v, d) for a, v, d in cand_ins if is_float(d)]
        if len(ref_f) != len(cand_f) or len(cand_f) != len(cand_ins):
            return None
        out = []
        for (rv, _), (a, cv, d) in zip(ref_f, cand_f):
            if rv.shape == cv.shape:
                out.append((a, rv, d))
            elif rv.ndim == 2 and rv.T.shape == cv.shape:  # a weight passed transposed
                out.append((a, np.ascontiguousarray(rv.T), d))
            else:
                return None
    for (_, v, d), (_, cv, _) in zip(out, cand_ins):
        if is_float(d) and v.size and normwise(cv, v) > 1e-2:
            return None
    return out


class OpNoise:
    """Judges op pairs of two traces against the reference op's noise (module docstring)."""

    def __init__(self, ref_tr: Any, cand_tr: Any) -> None:
        self.ref, self.cand = _Side(ref_tr), _Side(cand_tr)
        self.same = ref_tr.framework == cand_tr.framework
        self._lock = threading.Lock()
        self._done: dict[tuple[Any, ...], tuple[dict[str, np.ndarray], dict[str, np.ndarray]]
                         | None] = {}

    @classmethod
    def for_traces(cls, ref_tr: Any, cand_tr: Any) -> OpNoise | None:
        """An instance when both traces hold op records with tensors, else None."""
        for tr in (ref_tr, cand_tr):
            try:
                if not tr.count(kind="op") or not any(
                        r.has_payload for r in tr.iter_records(kind="op", step=tr.steps()[0],
                                                               limit=50)):
                    return None
            except (IndexError, FrameworkError):
                return None
        try:
            return cls(ref_tr, cand_tr)
        except FrameworkError:  # a framework not installed here: the table judges
            return None

    def _replays(self, rr: list[Any], cr: list[Any]
                 ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None:
        key = (rr[0].rank, rr[0].step, rr[0].event, cr[0].event)
        if key in self._done:
            return self._done[key]
        got = None
        try:
            ref_ins = self.ref.inputs(rr)
            mapped = _mapped(ref_ins, self.cand.inputs(cr), self.same)
            if mapped is not None:
                got = (self.ref.run(rr, ref_ins), self.cand.run(cr, mapped))
        except _FAILS:
            got = None
        self._done[key] = got
        return got

    def judge(self, ref_rec: Any, cand_rec: Any) -> tuple[str, str, dict[str, float]] | None:
        """``(status, reason, evidence)`` for an op output pair, or None (no opinion)."""
        if (ref_rec.kind != "op" or cand_rec.kind != "op" or ref_rec.role != "output"
                or not (ref_rec.has_payload and cand_rec.has_payload)
                or ref_rec.direction not in ("forward", "backward")
                or not (is_float(ref_rec.dtype) and is_float(cand_rec.dtype))
                or _is_random(ref_rec.op, ref_rec.native)
                or _is_random(cand_rec.op, cand_rec.native)):
            return None
        with self._lock:
            rr, cr = self.ref.call(ref_rec), self.cand.call(cand_rec)
            if not rr or not cr:
                return None
            got = self._replays(rr, cr)
        if got is None:
            return None
        r64, c64 = got[0].get(ref_rec.arg), got[1].get(cand_rec.arg)
        if r64 is None or c64 is None or r64.size != c64.size:
            return None
        ref_out = np.asarray(self.ref.tr.tensor(ref_rec), np.float64)
        if ref_out.size != r64.size:
            return None
        unit = max(EPS[ref_rec.dtype], EPS[cand_rec.dtype])
        noise = normwise(ref_out.ravel(), r64.ravel())
        if not noise <= STANDARD["float32"] * unit * 4:
            return None  # the replay does not make the reference's own output again
        c = c64.ravel() if c64.shape == r64.shape or c64.ndim != 2 else c64.T.ravel()
        local = normwise(c, r64.ravel())
        bound = K * max(noise, unit)
        ev = {"noise": noise, "local": local, "bound": bound, "k": K}
        if local > bound:
            return "fail", (f"introduced: the candidate's op on the reference's inputs "
                            f"differs by {local:.3g} (normwise, float64 replays), "
                            f"{local / max(noise, unit):.3g}x the reference op's own "
                            f"noise {max(noise, unit):.3g}"), ev
        return None
