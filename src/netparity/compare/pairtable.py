"""The tensor pairs of matched calls as columns: judged as whole arrays, made into
:class:`~netparity.compare.results.PairResult` objects only when someone asks for them.

A 100k-op statistics comparison has ~300k pairs. Making a ``PairResult`` with its metrics dict
and verdict string for each, localising them one by one and freeing them was most of the
comparison's time, while what a user sees of them is a handful (the first divergences, the
worst pairs) -- unless they ask for JSON, CSV or HTML, which list every pair. So the engine
keeps the pairs of matched calls in a :class:`PairTable`:

* every pair has its two records, tolerance, key, call and role; in *row mode*
  (:meth:`PairTable.of_rows`, what the engine builds when both traces were read by one
  column scan each) the records are row numbers of the two scans
  (:class:`~netparity.trace.fastrows.ScannedRows`), made into records only for the pairs
  someone asks for;
* pairs judged from statistics in one batch (the common case: statistics traces) keep their
  metrics as columns (:class:`~netparity.compare.metrics.StatsBatch`) and a status code;
* every other pair (payloads, odd statistics, the fp64 mode) is a ``PairResult`` judged as
  before, held in :attr:`PairTable.obj`.

``PairTable.get(i)`` makes pair ``i``'s ``PairResult`` (once; the same object afterwards),
with exactly the fields, metrics and reason the per-pair path gives. A
:class:`~netparity.compare.results.CompareResult` holding a table hands out a plain list from
``result.pairs`` (every pair made then; from that moment the list is the truth and the table
is dropped), while ``status``, ``counts`` and localisation
(:mod:`netparity.analyzers.divergence`) read the table's columns without making the pairs.

Example:
    >>> t = PairTable([])
    >>> len(t), t.pairs()
    (0, [])
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from netparity.compare.metrics import StatsBatch
from netparity.compare.results import PairResult
from netparity.compare.tolerances import Tol
from netparity.compare.verdicts import judge, judge_stats
from netparity.trace.fastrows import ScannedRows
from netparity.trace.schema import Record

#: status -> code of :attr:`PairTable.code`, and back
STATUS_CODE = {"pass": 0, "warn": 1, "fail": 2, "unknown": 3}
CODE_STATUS = ("pass", "warn", "fail", "unknown")
#: the rank of a code for :func:`~netparity.compare.results.worst` (unknown counts as pass)
CODE_RANK = np.array([0, 1, 2, 0], dtype=np.int8)
#: pairs per part of :meth:`PairTable.tolerance_parts`
TOLERANCE_PART = 1 << 18

_new = object.__new__


def pair_key(rec: Record, idx: str) -> str:
    """A pair's key (without the level prefix and the call's event)."""
    return (f"{rec.step}|{rec.rank}|{rec.kind}|{rec.direction}|{rec.module}|{rec.op}|"
            f"{rec.call}|{idx}")


def make_pair(ref: Record, cand: Record, rtol: float, atol: float, source: str, idx: str,
              call_key: str) -> PairResult:
    """A :class:`PairResult` not judged yet (status pass, no metrics)."""
    # the dataclass __init__ is skipped (a 100k-op comparison makes ~300k of these when every
    # pair is asked for): the attributes are exactly the ones it sets, defaults included
    pr = _new(PairResult)
    pr.__dict__ = {
        "key": pair_key(ref, idx), "kind": ref.kind, "direction": ref.direction,
        "step": ref.step, "rank": ref.rank, "role": ref.role, "arg": ref.arg,
        "module": ref.module, "op": ref.op, "cand_module": cand.module, "cand_op": cand.op,
        "ref_dtype": ref.dtype, "cand_dtype": cand.dtype, "ref_shape": list(ref.shape),
        "cand_shape": list(cand.shape), "rtol": rtol, "atol": atol,
        "tol_source": source, "status": "pass", "reason": "", "metrics": {},
        "call": call_key, "order": ref.seq, "source": ref.source, "fp64": None,
    }
    return pr


class PairTable:
    """The pairs of matched calls of one comparison, in the engine's order (call by call,
    inputs then outputs), as columns.

    Args:
        rows: one tuple per pair: ``(ref, cand, tol, scaled, idx, key, call_key, call,
            is_output)`` -- ``tol`` the pair's :class:`~netparity.compare.tolerances.Tol`
            before any RMS scaling, ``scaled`` whether its ``atol`` is still to be multiplied
            by the pair's RMS (:meth:`set_atol` gives the final values), ``call`` the position
            of the pair's :class:`~netparity.compare.results.CallResult` in ``result.calls``.
    """

    def __init__(self, rows: list[tuple[Any, ...]]):
        self.n = len(rows)
        cols: list[Any] = list(zip(*rows)) if rows else [()] * 9
        (self.refs, self.cands, self.tols, self.scaled, self.idx, self.keys, self.call_keys,
         call, is_out) = (list(c) for c in cols)
        self.call = np.array(call, dtype=np.int64)
        self.is_out = np.array(is_out, dtype=bool)
        self.scaled = np.array(self.scaled, dtype=bool)  # type: ignore[assignment]
        #: each pair's rtol and (final, once :meth:`set_atol` ran) atol: the Python numbers
        #: the pair's metrics and PairResult hold (an object array keeps their types)
        self.rtol = objects([t.rtol for t in self.tols])[:self.n]
        self.atol = objects([t.atol for t in self.tols])[:self.n]
        #: the PairResult of each pair once made (judged one by one, or asked for)
        self.obj: list[PairResult | None] = [None] * self.n
        self.made: list[int] = []  # the positions of obj that are set, in the order made
        self.code = np.zeros(self.n, dtype=np.int8)
        self.batch: StatsBatch | None = None
        self.brow = np.full(self.n, -1, dtype=np.int64)  # row in ``batch``, -1: not in it
        #: result.pairs order: (step, order), stable (an array: ~100 MB less than a list at
        #: 3M pairs)
        self.perm = np.zeros(0, dtype=np.int64)
        #: row mode: the two scans and each pair's row in them (None: records given)
        self.sides: tuple[ScannedRows, ScannedRows] | None = None
        self.rrow = self.crow = np.zeros(0, dtype=np.int64)

    @classmethod
    def of_rows(cls, ref: ScannedRows, cand: ScannedRows, rrow: np.ndarray, crow: np.ndarray,
                tols: list[tuple[Tol, bool]], tid: np.ndarray, idx: list[str],
                keys: list[str], call_keys: list[str], call: np.ndarray,
                is_out: np.ndarray) -> PairTable:
        """A table in row mode: pair ``i`` is row ``rrow[i]`` of ``ref`` and row ``crow[i]``
        of ``cand``, its tolerance and whether to scale it ``tols[tid[i]]``; the other
        columns as in :class:`PairTable`'s ``rows``."""
        t = cls([])
        t.n = len(rrow)
        t.sides = (ref, cand)
        t.rrow, t.crow = rrow, crow
        t.refs = _RowRecords(ref, rrow)  # type: ignore[assignment]
        t.cands = _RowRecords(cand, crow)  # type: ignore[assignment]
        uniq = [x for x, _ in tols]
        t.tols = objects(uniq)[tid]  # type: ignore[assignment]
        t.scaled = np.array([sc for _, sc in tols] or [False], dtype=bool)[tid]
        t.rtol = objects([x.rtol for x in uniq])[tid]
        t.atol = objects([x.atol for x in uniq])[tid]
        t.idx, t.keys, t.call_keys = idx, keys, call_keys
        t.call, t.is_out = call, is_out
        t.obj = [None] * t.n
        t.code = np.zeros(t.n, dtype=np.int8)
        t.brow = np.full(t.n, -1, dtype=np.int64)
        return t

    def __len__(self) -> int:
        return self.n

    # ---- building ------------------------------------------------------------------------
    def set_atol(self, at: Any, values: list[float]) -> None:
        """The final (RMS-scaled) ``atol`` of pairs ``at``."""
        if len(at):
            self.atol[np.asarray(at, dtype=np.int64)] = values

    def tol(self, i: int) -> Tol:
        """Pair ``i``'s tolerance with its final ``atol``."""
        t = self.tols[i]
        if not self.scaled[i]:
            return t
        s = _new(Tol)
        s.__dict__.update(rtol=t.rtol, atol=self.atol[i], source=t.source, norm=t.norm)
        return s

    def new_object(self, i: int) -> PairResult:
        """Pair ``i`` as an unjudged :class:`PairResult`, kept as its object (for the pairs
        judged one by one)."""
        t = self.tols[i]
        pr = make_pair(self.refs[i], self.cands[i], t.rtol, self.atol[i], t.source,
                       self.idx[i], self.call_keys[i])
        pr.key = self.keys[i]
        self.obj[i] = pr
        self.made.append(i)
        return pr

    def set_batch(self, at: np.ndarray, batch: StatsBatch) -> None:
        """Pairs ``at`` (positions) are judged by ``batch`` (one row each, in order)."""
        self.batch = batch
        self.brow[at] = np.arange(len(at))
        self.code[at] = batch.status()

    def finish(self) -> None:
        """Fix the order of ``result.pairs`` (step, then reference sequence number; stable)."""
        if self.sides is not None:
            cols = self.sides[0].cols
            step, seq = cols["step"][self.rrow], cols["seq"][self.rrow]
        else:
            step = np.array([r.step for r in self.refs], dtype=np.int64)
            seq = np.array([r.seq for r in self.refs], dtype=np.int64)
        self.perm = (np.lexsort((seq, step)).astype(np.int64, copy=False) if self.n
                     else np.zeros(0, dtype=np.int64))

    def subset(self, keep: np.ndarray, new_call: np.ndarray) -> PairTable:
        """The pairs ``keep`` (a mask) as a new table, judged as they are; ``new_call`` maps
        each old call position to the new one (calls were removed). The order of
        ``result.pairs`` is made again (:meth:`finish`)."""
        at = np.nonzero(keep)[0]
        pos = at.tolist()
        t = PairTable([])
        t.n = len(at)
        t.sides = self.sides
        if self.sides is not None:
            t.rrow, t.crow = self.rrow[at], self.crow[at]
            t.refs = _RowRecords(self.sides[0], t.rrow)  # type: ignore[assignment]
            t.cands = _RowRecords(self.sides[1], t.crow)  # type: ignore[assignment]
        else:
            t.refs = [self.refs[i] for i in pos]
            t.cands = [self.cands[i] for i in pos]
        t.tols = [self.tols[i] for i in pos]
        t.scaled = self.scaled[at]  # type: ignore[call-overload]
        t.idx = [self.idx[i] for i in pos]
        t.keys = [self.keys[i] for i in pos]
        t.call_keys = [self.call_keys[i] for i in pos]
        t.call = new_call[self.call[at]] if t.n else np.zeros(0, dtype=np.int64)
        t.is_out = self.is_out[at]
        t.rtol = objects(list(self.rtol[at]))
        t.atol = objects(list(self.atol[at]))
        self.refresh()
        t.obj = [self.obj[i] for i in pos]
        t.made = [k for k, o in enumerate(t.obj) if o is not None]
        t.code = self.code[at]
        t.batch = self.batch
        t.brow = self.brow[at]
        t.finish()
        return t

    # ---- reading -------------------------------------------------------------------------
    def get(self, i: int) -> PairResult:
        """Pair ``i`` as a :class:`PairResult` (made on first request, then the same object)."""
        pr = self.obj[i]
        if pr is not None:
            return pr
        pr = self.new_object(i)
        j = int(self.brow[i])
        if j >= 0 and self.batch is not None:
            m = self.batch.metrics(j)
            pr.metrics = m
            rt, at = pr.rtol, pr.atol
            if not m["nan_mismatch"] and not m["inf_mismatch"]:
                pr.status, pr.reason = judge_stats(m, m["max_abs_lb"], at + rt * m["ref_maxabs"])
            else:
                pr.status, pr.reason = judge(m, rt, at)
        return pr

    def pairs(self) -> list[PairResult]:
        """Every pair as a :class:`PairResult`, in ``result.pairs`` order."""
        if self.sides is not None:  # every record is asked for: made in one pass per side
            order = self.perm.tolist()
            self.refs.warm(order)  # type: ignore[attr-defined]
            self.cands.warm(order)  # type: ignore[attr-defined]
        get = self.get
        return [get(i) for i in self.perm.tolist()]

    def refresh(self) -> None:
        """Status codes of the pairs held as objects, from the objects (they may have been
        judged, or re-judged, one by one)."""
        code, obj = STATUS_CODE, self.obj
        if self.made:
            self.code[self.made] = [code.get(obj[i].status, 0)  # type: ignore[union-attr]
                                    for i in self.made]

    def errors(self) -> np.ndarray:
        """``PairResult.error()`` of every pair (statistics batch: ``max_rel_lb``)."""
        err = np.zeros(self.n)
        b = self.batch
        if b is not None:
            have = self.brow >= 0
            err[have] = b.rel[self.brow[have]]
        obj = self.obj
        if self.made:
            err[self.made] = [obj[i].error() for i in self.made]  # type: ignore[union-attr]
        return err

    def counts(self) -> np.ndarray:
        """How many pairs have each status code (objects re-read: :meth:`refresh`)."""
        self.refresh()
        return np.bincount(self.code, minlength=4)

    def any_stats_basis(self) -> bool:
        """Whether any pair was judged from statistics."""
        if self.batch is not None and len(self.batch):
            return True
        obj = self.obj
        return any(obj[i].metrics.get("basis") == "stats" for i in self.made)  # type: ignore[union-attr]

    def tolerance_parts(self, size: int = TOLERANCE_PART) -> Iterator[dict[str, np.ndarray]]:
        """What :func:`~netparity.analyzers.divergence.min_tolerances` reads of every pair, as
        columns, ``size`` pairs at a time in ``result.pairs`` order (``basis``, ``source``:
        object arrays; ``rtol``, ``atol``, ``ref_rms``, ``min_atol``, ``min_rtol``: float, 0.0
        where a pair has none; ``nonfinite``: bool) -- the columns of :func:`row_of`, without a
        tuple per pair, and never all at once (eight columns of a 3M-pair table are ~0.2 GB).
        Pairs set aside unjudged (status code 3) have no basis: they need no tolerance."""
        n = self.n
        b = self.batch
        nonfinite = None
        if b is not None and len(b):
            nan_m, inf_m = b.nonfinite_mismatch()
            nonfinite = (nan_m != 0) | (inf_m != 0)
        # the pairs judged one by one, by their position in result.pairs order
        made = np.asarray(self.made, dtype=np.int64)
        made_at = made
        if len(made):
            where = np.empty(n, dtype=np.int64)
            where[self.perm] = np.arange(n)
            made_at = where[made]
            o = np.argsort(made_at, kind="stable")
            made, made_at = made[o], made_at[o]
        tols, obj = self.tols, self.obj
        for lo in range(0, n, size):
            idx = self.perm[lo:lo + size]
            k = len(idx)
            part = [tols[i] for i in idx.tolist()]
            basis = np.full(k, None, dtype=object)
            source = np.empty(k, dtype=object)
            source[:] = [t.source for t in part]
            rtol = np.array([t.rtol for t in part], dtype=np.float64)
            atol = np.array(self.atol[idx], dtype=np.float64)
            del part
            rms, mina, minr = (np.zeros(k) for _ in range(3))
            nf = np.zeros(k, dtype=bool)
            if nonfinite is not None and b is not None:
                j = self.brow[idx]
                at = np.nonzero(j >= 0)[0]
                j = j[at]
                basis[at] = "stats"
                rms[at], mina[at], minr[at] = b.rms[j], b.min_atol[j], b.min_rtol[j]
                nf[at] = nonfinite[j]
            s, e = np.searchsorted(made_at, [lo, lo + k]).tolist()
            for i, p in zip(made[s:e].tolist(), (made_at[s:e] - lo).tolist()):
                (basis[p], rtol[p], atol[p], source[p], rms[p], nf[p], mina[p],
                 minr[p]) = _float_row(row_of(obj[i]))  # type: ignore[arg-type]
            basis[self.code[idx] == 3] = None
            yield {"basis": basis, "rtol": rtol, "atol": atol, "source": source,
                   "ref_rms": rms, "nonfinite": nf, "min_atol": mina, "min_rtol": minr}


def _float_row(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A :func:`row_of` tuple with its optional numbers as floats (None: 0.0, as
    :func:`~netparity.analyzers.divergence.min_tolerances` reads them)."""
    basis, rtol, atol, source, rms, nf, mina, minr = row
    rms, mina, minr = (0.0 if v is None else float(v) for v in (rms, mina, minr))
    return basis, rtol, atol, source, rms, bool(nf), mina, minr


class _RowRecords:
    """The records of one side of a row-mode table, made on first request (then the same
    object)."""

    def __init__(self, rows: ScannedRows, at: np.ndarray):
        self.rows, self.at = rows, at
        self._made: dict[int, Record] = {}

    def __len__(self) -> int:
        return len(self.at)

    def __getitem__(self, i: int) -> Record:
        r = self._made.get(i)
        if r is None:
            r = self._made[i] = self.rows.records([int(self.at[i])])[0]
        return r

    def __iter__(self) -> Any:
        return (self[i] for i in range(len(self.at)))

    def warm(self, idx: list[int]) -> None:
        """Make the records of pairs ``idx`` at once (those not made yet)."""
        made = self._made
        need = [i for i in idx if i not in made]
        for i, r in zip(need, self.rows.records(self.at[need].tolist() if need else [])):
            made[i] = r


def objects(values: list[Any]) -> np.ndarray:
    """``values`` as a 1-D object array (the objects themselves; at least one slot, so that
    indexing it with an empty index works)."""
    out = np.empty(max(len(values), 1), dtype=object)
    out[:len(values)] = values
    return out


def row_of(p: PairResult) -> tuple[Any, ...]:
    """What :func:`~netparity.analyzers.divergence.min_tolerances` reads of one pair."""
    m = p.metrics
    nf = bool(m.get("nan_mismatch") or m.get("inf_mismatch"))
    return (m.get("basis"), p.rtol, p.atol, p.tol_source, m.get("ref_rms"), nf,
            m.get("min_atol"), m.get("min_rtol"))
