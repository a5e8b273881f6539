"""The comparison engine: align two traces, measure every matched tensor pair, judge, localise.

Example:
    >>> import netparity
    >>> result = netparity.compare("runs/ref", "runs/cand")          # doctest: +SKIP
    >>> bool(result), result.first_divergence.module                  # doctest: +SKIP
    (False, 'layer1.0.bn1')
"""

from __future__ import annotations

import functools
import gc
import math
import operator
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from statistics import median
from typing import Any, ParamSpec

import numpy as np

from netparity import heap
from netparity.compare import leafreplay_back as _leafback
from netparity.compare import rowpairs
from netparity.compare.argpairs import group_inputs, pair_tensors
from netparity.compare.coverage import coverage
from netparity.compare.metrics import (
    StatsBatch,
    records_rms,
    stats_batch,
    stats_batch_arrays,
    stats_metrics,
    stats_metrics_many,
    stats_present,
    stats_ready,
    stream_arrays,
    tensor_metrics,
)
from netparity.compare.noise import NOISE_K, calibrate
from netparity.compare.pairtable import PairTable, make_pair, pair_key
from netparity.compare.restructured import settle_commuted, settle_moved_ops
from netparity.compare.results import CallResult, CompareResult, PairResult
from netparity.compare.tolerances import Tol, Tolerances, lower_precision
from netparity.compare.verdicts import AMPLIFICATION, judge, judge_fp64, judge_stats
from netparity.errors import UsageError
from netparity.gcpause import paused_gc
from netparity.trace import Record, Trace, open_trace

LEVELS = ("module", "op", "both")
#: whether the engine pairs the common case as rows of the traces' scans when it can
#: (:mod:`netparity.compare.rowpairs`); tests flip it to compare with the record path
ROW_MODE = True
#: pairs from which a comparison freezes its objects for the garbage collector (see compare)
_FREEZE_PAIRS = 50_000
#: calls from which a comparison collects its alignment's garbage once its pairs are made
_COLLECT_CALLS = 20_000
_P = ParamSpec("_P")
#: unit roundoff per dtype: the fp64 mode's floor is eps * rms(fp64 reference)
_EPS = {
    "float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8,
    "float8_e4m3fn": 2.0**-4, "float8_e5m2": 2.0**-3,
}


#: Ops whose outputs after the first are framework-specific by-products saved for backward:
#: PyTorch's layer norm returns (out, mean, rstd), MindSpore's (out, mean, variance); batch
#: norm (out, save_mean, save_invstd) against five MindSpore outputs. Across frameworks only
#: the first output of these is compared (the rest is listed under ``unmatched``).
AUX_OUTPUT_OPS = frozenset({"batch_norm", "layer_norm", "group_norm", "instance_norm",
                            "rms_norm"})


def _open(t: Any, what: str) -> Trace:
    if isinstance(t, Trace):
        return t
    if isinstance(t, (str, os.PathLike)):
        return open_trace(t)
    raise UsageError(f"{what}: expected a trace path or Trace, got {type(t).__name__}")


def _squeeze(shape: Iterable[int]) -> tuple[int, ...]:
    return tuple(int(d) for d in shape if int(d) != 1)


_pair_key = pair_key
_new = object.__new__


class _Job:
    """One tensor pair to measure."""

    __slots__ = ("ref", "cand", "tol", "result", "fp64_rec")

    def __init__(self, ref: Record, cand: Record, tol: Tol, result: PairResult):
        self.ref, self.cand, self.tol, self.result = ref, cand, tol, result
        self.fp64_rec: Record | None = None


#: Largest RMS, relative to the median RMS of the step's gradients (or updated parameters), at
#: which a tensor counts as rounding noise of a value that is zero in exact arithmetic. Measured:
#: the gradient of a conv bias before training-mode batch norm comes out at 2e-7..4e-6 of the
#: median parameter-gradient RMS (small CNNs, batch 2..8), real gradients at 0.5..4x; the floor
#: sits between, an order of magnitude above the noise.
NOISE_FLOOR = {"float64": 1e-12, "float32": 1e-4, "complex64": 1e-4, "complex128": 1e-12,
               "float16": 3e-2, "bfloat16": 3e-2}


def _noise_class(rec: Record) -> str | None:
    """Tensors whose typical size sets the noise floor: parameter gradients, updated parameters,
    and module/op backward tensors, each measured against its own kind."""
    if rec.kind in ("param", "grad"):
        return rec.kind
    if rec.direction == "backward":
        return "backward"
    return None


def _treat_rounding_noise(jobs: list[_Job], table: PairTable | None = None,
                          sides: Any = None) -> int:
    """Pass the diverging pairs whose two sides are both rounding noise of a zero value.

    A gradient that is zero mathematically (a conv bias before training-mode batch norm: the
    normalisation cancels it; the key bias of attention) comes out of each framework as
    independent rounding noise, so it can never agree and would be reported as diverging. When
    the reference's and the candidate's RMS are both below :data:`NOISE_FLOOR` times the median
    RMS of the step's tensors of the same class (see :func:`_noise_class`) and within 10x of each
    other, the pair passes with a reason saying why. A bug that makes a real gradient vanish on
    one side still fails: the other side is not noise. Returns the number of pairs changed.

    ``jobs`` are pairs judged one by one; ``table``'s pairs judged as arrays take part too
    (a pair of them that changes is made into its object, which holds the change; ``sides``:
    a row-mode table's, whose rows are read from the scans' columns).
    """
    # only tensors of a noise class take part (forward activations never do): pick them once
    classed = [(j, c) for j, c in zip(jobs, map(_noise_class, [j.ref for j in jobs]))
               if c is not None]
    tclassed: list[tuple[int, str]] = []
    trefs, tcands = (table.refs, table.cands) if table is not None else ([], [])
    if table is not None and table.batch is not None:
        at = np.nonzero(table.brow >= 0)[0]
        if sides is not None:  # the pairs of a noise class only, picked as arrays
            code = rowpairs.noise_class_codes(sides[0], table.rrow[at])
            at = at[code >= 0]
            names = rowpairs.NOISE_CLASSES
            tclassed = [(i, names[c]) for i, c in zip(at.tolist(), code[code >= 0].tolist())]
        else:
            cls = [_noise_class(trefs[i]) for i in at.tolist()]
            tclassed = [(i, c) for i, c in zip(at.tolist(), cls) if c is not None]
    if not classed and not tclassed:
        return 0
    # per pair: (ref dtype, cand dtype, step) and both RMS values
    facts = [(j.ref.dtype, j.cand.dtype, j.ref.step) for j, _ in classed]
    rms = records_rms([j.ref for j, _ in classed])
    rms_c = records_rms([j.cand for j, _ in classed])
    if sides is not None and tclassed and table is not None:
        ti = np.array([i for i, _ in tclassed], dtype=np.int64)
        rr, cr = table.rrow[ti], table.crow[ti]
        facts += list(zip(rowpairs.texts(sides[0], "dtype", rr),
                          rowpairs.texts(sides[1], "dtype", cr),
                          sides[0].cols["step"][rr].tolist()))
        for side, rows, out in ((sides[0], rr, rms), (sides[1], cr, rms_c)):
            v, miss = rowpairs.rms(side, rows)
            out += [None if m else x for x, m in zip(v.tolist(), miss.tolist())]
    else:
        trs = [trefs[i] for i, _ in tclassed]
        tcs = [tcands[i] for i, _ in tclassed]
        facts += [(a.dtype, b.dtype, a.step) for a, b in zip(trs, tcs)]
        rms += records_rms(trs)
        rms_c += records_rms(tcs)
    scale: dict[tuple[int, str], list[float]] = {}
    for (_, _, step), (_, c), r in zip(facts, [*classed, *tclassed], rms):
        if r:
            scale.setdefault((step, c), []).append(r)
    med = {k: median(v) for k, v in scale.items()}
    changed = 0

    def noise_of(fact: tuple[str, str, int], c: str, a: float,
                 b: float) -> tuple[float, str] | None:
        floor = NOISE_FLOOR.get(lower_precision(fact[0], fact[1]))
        if floor is None:
            return None
        m = med.get((fact[2], c), 0.0)
        # both far below the step's typical size, and of one order (noise of the same zero);
        # a 1024x loss-scale mismatch of tiny gradients is not noise
        if m > 0 and a <= floor * m and b <= floor * m and max(a, b) <= 10 * min(a, b):
            return floor * m, (f"both sides are rounding noise (rms {a:.3g} and {b:.3g} <= "
                               f"{floor:g} x the step's median {c} rms {m:.3g}): zero in exact "
                               "arithmetic, e.g. a bias before batch norm")
        return None

    n0 = len(classed)
    for (j, c), fact, a, b in zip(classed, facts, rms, rms_c):
        pr = j.result
        if pr.status in ("pass", "unknown") or pr.fp64 \
                or pr.metrics.get("nan_mismatch") or pr.metrics.get("inf_mismatch"):
            continue
        got = noise_of(fact, c, a or 0.0, b or 0.0)
        if got is not None:
            pr.metrics["noise_floor"], pr.reason = got
            pr.status = "pass"
            changed += 1
    if tclassed and table is not None and table.batch is not None:
        nan_m, inf_m = table.batch.nonfinite_mismatch()
        nf = ((nan_m != 0) | (inf_m != 0)).tolist()
        brow, code = table.brow, table.code
        for (i, c), fact, a, b in zip(tclassed, facts[n0:], rms[n0:], rms_c[n0:]):
            if code[i] in (0, 3) or nf[brow[i]]:
                continue
            got = noise_of(fact, c, a or 0.0, b or 0.0)
            if got is not None:
                pr = table.get(i)  # made now: the object holds the change
                pr.metrics["noise_floor"], pr.reason = got
                pr.status = "pass"
                code[i] = 0
                changed += 1
    return changed


#: canonical ops whose 2-D inputs frameworks may pass transposed (MatMul's transpose_b, addmm's W^T)
_TRANSPOSABLE = frozenset({"matmul", "linear"})


def _layout_evidence(ref_tr: Trace, ref: Record, cand_tr: Trace, cand: Record,
                     tol: Tol) -> dict[str, Any] | None:
    """Op *inputs* whose layout is a framework convention, not a value: the same elements
    flattened (embedding ids [2, 6] vs the [12] MindSpore hands to Gather), or a weight passed
    transposed with a transpose flag (aten.mm gets W^T, MatMul gets W with transpose_b). Outputs
    are never relaxed: a real layout bug still shows in the op's output."""
    if ref.kind != "op" or ref.role != "input" or not (ref.has_payload and cand.has_payload):
        return None
    if ref.numel != cand.numel:
        return None
    a = np.asarray(ref_tr.tensor(ref))
    b = np.asarray(cand_tr.tensor(cand))
    candidates = []
    if a.shape != b.shape:
        candidates.append(("reshaped", b.reshape(-1)))
    if ref.op in _TRANSPOSABLE and a.ndim == 2 and b.ndim == 2 and a.shape == b.shape[::-1]:
        candidates.append(("transposed", np.ascontiguousarray(b.T).reshape(-1)))
    best = None
    fa = np.ascontiguousarray(a).reshape(-1)
    for how, fb in candidates:
        m = stream_arrays(fa, fb, rtol=tol.rtol, atol=tol.atol)
        m["layout"] = how
        if best is None or m.get("rmse", math.inf) < best.get("rmse", math.inf):
            best = m
    return best


def _evidence(ref_tr: Trace, ref: Record, cand_tr: Trace, cand: Record, tol: Tol) -> dict[str, Any]:
    """Metrics of one pair on the strongest basis both sides support."""
    if ref.numel != cand.numel or (
        tuple(ref.shape) != tuple(cand.shape) and _squeeze(ref.shape) != _squeeze(cand.shape)
    ):
        relaxed = _layout_evidence(ref_tr, ref, cand_tr, cand, tol)
        if relaxed is not None:
            return relaxed
        return {
            "basis": "shape",
            "reason": f"shape mismatch: ref {list(ref.shape)} vs cand {list(cand.shape)}",
        }
    if ref.hash and cand.hash and ref.hash == cand.hash and ref.dtype == cand.dtype:
        return {"basis": "hash", "numel": ref.numel, "rtol": tol.rtol, "atol": tol.atol,
                "max_abs": 0.0, "min_atol": 0.0, "min_rtol": 0.0}
    if ref.has_payload and cand.has_payload:
        m = tensor_metrics(ref_tr, ref, cand_tr, cand, rtol=tol.rtol, atol=tol.atol)
        if (ref.kind == "op" and ref.role == "input" and ref.op in _TRANSPOSABLE
                and len(ref.shape) == 2 and ref.shape[0] == ref.shape[1]
                and m.get("rmse", 0.0) > 0):
            # a square weight passed transposed (W^T to aten.mm vs W with transpose_b)
            b = np.ascontiguousarray(np.asarray(cand_tr.tensor(cand)).T)
            mt = stream_arrays(np.asarray(ref_tr.tensor(ref)), b, rtol=tol.rtol, atol=tol.atol)
            if mt.get("rmse", math.inf) < 0.01 * m["rmse"]:
                mt["layout"] = "transposed"
                return mt
        return m
    if ref.stats and cand.stats and ref.stats.get("norm") is not None:
        return stats_metrics(ref, cand, rtol=tol.rtol, atol=tol.atol)
    return {"basis": "none", "reason": "neither tensors nor statistics captured on both sides"}


def _stats_only(ref: Record, cand: Record) -> bool:
    """Whether :func:`_evidence` would judge this pair from statistics (and nothing else of
    :func:`compare`'s per-pair work -- fp64 mode, the normwise rule -- applies to it)."""
    if ref.shard is not None and cand.shard is not None:  # both have a payload
        return False
    # _evidence's shape test, with the common case (equal shapes, hence equal counts) first
    if tuple(ref.shape) != tuple(cand.shape) and (
            ref.numel != cand.numel or _squeeze(ref.shape) != _squeeze(cand.shape)):
        return False
    if ref.hash and cand.hash and ref.hash == cand.hash and ref.dtype == cand.dtype:
        return False
    # bool(ref.stats and cand.stats and ref.stats.get("norm") is not None), without making
    # the dicts of scanned records
    return stats_ready(ref) and stats_present(cand)


def _judge_stats_batch(jobs: list[_Job]) -> list[_Job]:
    """Measure and judge the statistics-basis pairs of ``jobs`` as whole arrays; returns the
    jobs left to judge one by one (other bases, and statistics the batch does not take).

    Same metrics and verdicts as :func:`_evidence` + :func:`judge` per pair: a pass is decided
    here with judge's own rule (no NaN/Inf count differs, ``max_abs_lb <= atol + rtol *
    ref_maxabs``); anything else goes through :func:`judge` for its status and reason.
    """
    batch = [j for j in jobs if _stats_only(j.ref, j.cand)]
    if len(batch) < 2:
        return jobs
    ms = stats_metrics_many([(j.ref, j.cand) for j in batch], [j.tol.rtol for j in batch],
                            [j.tol.atol for j in batch])
    done: set[int] = set()
    for j, m in zip(batch, ms):
        if m is None:
            continue
        pr = j.result
        pr.metrics = m
        rt, at = j.tol.rtol, j.tol.atol
        if not m["nan_mismatch"] and not m["inf_mismatch"]:
            # judge's stats rule (the batch's numbers are floats: no _g conversion needed)
            pr.status, pr.reason = judge_stats(m, m["max_abs_lb"], at + rt * m["ref_maxabs"])
        else:
            pr.status, pr.reason = judge(m, rt, at)
        done.add(id(j))
    return [j for j in jobs if id(j) not in done]


def _make_pair(ref: Record, cand: Record, tol: Tol, idx: str, call_key: str) -> PairResult:
    return make_pair(ref, cand, tol.rtol, tol.atol, tol.source, idx, call_key)


def _scale_tolerances(table: PairTable, sides: Any = None) -> None:
    """Multiply the ``atol`` of the table's pairs that the cross profile scales by their
    pair's RMS, as :meth:`Tolerances.resolve
    <netparity.compare.tolerances.Tolerances.resolve>` does, with the RMS values computed for
    all of them at once (``sides``: a row-mode table's, :mod:`netparity.compare.rowpairs`)."""
    ix = np.nonzero(table.scaled)[0]
    if not len(ix):
        return
    refs, cands, tols = table.refs, table.cands, table.tols
    if sides is not None:
        factor = table.atol[ix].astype(np.float64)  # the factor, until set_atol
        table.set_atol(ix, rowpairs.scaled_atol(sides[0], sides[1], table.rrow[ix],
                                                table.crow[ix], factor))
        return
    at = ix.tolist()
    rr = records_rms([refs[i] for i in at])
    rc = records_rms([cands[i] for i in at])
    table.set_atol(at, [tols[i].atol * (a or b or 0.0) for i, a, b in zip(at, rr, rc)])


def _batch_stats_pairs(table: PairTable, sides: Any = None) -> list[int]:
    """Judge the table's statistics-basis pairs as whole arrays (they stay columns of the
    table); returns the positions of the pairs left to judge one by one.

    Same metrics and verdicts as :func:`_evidence` + :func:`judge` per pair (see
    :func:`netparity.compare.metrics.stats_batch` and :meth:`StatsBatch.status
    <netparity.compare.metrics.StatsBatch.status>`). ``sides``: a row-mode table's (the
    same from the scans' columns, :mod:`netparity.compare.rowpairs`).
    """
    refs, cands, rtol, atol = table.refs, table.cands, table.rtol, table.atol
    if sides is not None:
        ca = np.nonzero(rowpairs.stats_only(sides[0], sides[1], table.rrow, table.crow))[0]
        if len(ca) < 2:
            return list(range(len(table)))
        parts = []
        for s in range(0, len(ca), _BATCH_PAIRS):  # the gathered statistics: in parts
            at = ca[s:s + _BATCH_PAIRS]
            rr, cr = table.rrow[at], table.crow[at]
            xr, okr = rowpairs.stat_rows(sides[0], rr)
            xc, okc = rowpairs.stat_rows(sides[1], cr)
            both = np.nonzero(okr & okc)[0]
            parts.append(stats_batch_arrays(
                xr, okr, xc, okc, sides[0].cols["numel"][rr[both]].tolist(),
                rowpairs.complex_rows(sides[0], rr[both]), rtol[at], atol[at]))
            del xr, xc
        b = StatsBatch.join(parts)
        handled = ca[b.at]
    else:
        cand = [i for i, (a, c) in enumerate(zip(refs, cands)) if _stats_only(a, c)]
        if len(cand) < 2:
            return list(range(len(table)))
        b = stats_batch([refs[i] for i in cand], [cands[i] for i in cand],
                        [rtol[i] for i in cand], [atol[i] for i in cand])
        handled = np.asarray(cand, dtype=np.int64)[b.at]
    table.set_batch(handled, b)
    rest = np.ones(len(table), dtype=bool)
    rest[handled] = False
    return np.nonzero(rest)[0].tolist()  # type: ignore[no-any-return]


class _RowAcc:
    """The pairs of a row-mode comparison (:mod:`netparity.compare.rowpairs`) as they are
    made: rows of both scans, position key, key, call key, call position, role -- the
    common case's as whole arrays (:class:`~netparity.compare.rowpairs.FastCalls`, with the
    keys and call positions the engine adds call by call), the others pair by pair."""

    def __init__(self) -> None:
        self.rr: list[int] = []
        self.cr: list[int] = []
        self.idx: list[str] = []
        self.keys: list[str] = []
        self.cks: list[str] = []
        self.cpos: list[int] = []
        self.out: list[bool] = []
        self.chunks: list[tuple[rowpairs.FastCalls, np.ndarray]] = []
        self.fidx: list[str] = []
        self.fkeys: list[str] = []
        self.fcks: list[str] = []

    def add(self, rr: list[int], cr: list[int], idx: list[str], keys: list[str], ck: str,
            cpos: int, is_out: bool) -> None:
        n = len(rr)
        self.rr += rr
        self.cr += cr
        self.idx += idx
        self.keys += keys
        self.cks += [ck] * n
        self.cpos += [cpos] * n
        self.out += [is_out] * n

    def fast(self, calls: rowpairs.FastCalls, idx: list[str], keys: list[str],
             cks: list[str], cpos: np.ndarray) -> None:
        """The pairs of ``calls`` (every one of its calls at once): position keys, keys,
        call keys and call positions, pair by pair."""
        self.chunks.append((calls, cpos))
        self.fidx += idx
        self.fkeys += keys
        self.fcks += cks

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every pair's ref row, cand row, call position and role (the common case first)."""
        i64 = np.int64
        rr = np.concatenate([c.rr for c, _ in self.chunks] + [np.array(self.rr, dtype=i64)])
        cr = np.concatenate([c.cr for c, _ in self.chunks] + [np.array(self.cr, dtype=i64)])
        cpos = np.concatenate([p for _, p in self.chunks] + [np.array(self.cpos, dtype=i64)])
        out = np.concatenate([c.is_out for c, _ in self.chunks]
                             + [np.array(self.out, dtype=bool)])
        return rr, cr, cpos, out

    def table(self, sides: tuple[rowpairs.Side, rowpairs.Side], tols: Tolerances) -> PairTable:
        rr, cr, cpos, out = self.columns()
        tl, tid = rowpairs.resolve_tolerances(tols, sides[0], sides[1], rr, cr)
        # the odd pairs' lists appended to the common case's in place (each a copy of ~3M
        # references at 1M ops otherwise); the accumulator is done with
        for whole, rest in ((self.fidx, self.idx), (self.fkeys, self.keys),
                            (self.fcks, self.cks)):
            whole.extend(rest)
            rest.clear()
        return PairTable.of_rows(sides[0].rows, sides[1].rows, rr, cr, tl, tid,
                                 self.fidx, self.fkeys, self.fcks, cpos, out)

    def as_objects(self, sides: tuple[rowpairs.Side, rowpairs.Side],
                   resolve: Any) -> list[tuple[Any, ...]]:
        """The pairs so far as the object rows of :class:`PairTable` (records made)."""
        rr, cr, cpos, outs = self.columns()
        refs = sides[0].rows.records(rr.tolist())
        cands = sides[1].rows.records(cr.tolist())
        out = []
        for a, b, ix, key, ck, cp, o in zip(refs, cands, self.fidx + self.idx,
                                            self.fkeys + self.keys, self.fcks + self.cks,
                                            cpos.tolist(), outs.tolist()):
            tol, scaled = resolve(a, b)
            out.append((a, b, tol, scaled, ix, key, ck, cp, o))
        self.__init__()  # type: ignore[misc]
        return out


#: pairs whose statistics a row-mode batch gathers at a time (two (n, 11) float64 matrices
#: and the batch's temporaries: ~0.5 GB at 1M ops when gathered for every pair at once)
_BATCH_PAIRS = 1 << 18
_first = operator.itemgetter(0)
#: calls whose results :func:`_fast_results` makes at a time
_CALLS_AT_ONCE = 1 << 16
#: what a fast call's keys and result read of the reference's call, and of the candidate's
_REF_FIELDS = operator.attrgetter("step", "rank", "kind", "direction", "module", "op", "call",
                                  "event", "native", "source", "module_call")
_CAND_FIELDS = operator.attrgetter("module", "op", "source")


def _fast_results(fast: rowpairs.FastCalls, lv: str, matches: list[Any], base: int,
                  acc: _RowAcc, notes: list[tuple[int, dict[str, Any]]]) -> list[CallResult]:
    """The :class:`CallResult` of every call of ``fast`` (in its order) and its pairs' keys,
    all at once: what the per-match loop makes for a call paired as rows, built from columns
    (``base + match``: the call's position in ``result.calls``; the auxiliary outputs left
    unpaired are added to ``notes`` with their match). Made :data:`_CALLS_AT_ONCE` calls at a
    time: the calls' fields as tuples and the keys' parts are temporaries (~0.4 GB at 1M ops
    when made for every call at once). Consumes its calls: each part's entries of ``matches``
    and of ``fast.refs`` / ``fast.cands`` are set to None once its results are made."""
    co, pos, is_out = fast.call_of, fast.pos, fast.is_out
    width = int(pos.max()) + 1 if len(pos) else 0
    names = np.array([f"{role}{j}" for j in range(width) for role in ("in", "out")] or [""],
                     dtype=object)
    n_in, n_out = np.asarray(fast.n_in, dtype=np.int64), np.asarray(fast.n_out, dtype=np.int64)
    ends = np.cumsum(n_in + n_out)
    mids = ends - n_out
    starts = mids - n_in
    ix: list[str] = []
    keys: list[str] = []
    pair_cks: list[str] = []
    out: list[CallResult] = []
    append = out.append
    for c0 in range(0, len(fast.refs), _CALLS_AT_ONCE):
        c1 = min(len(fast.refs), c0 + _CALLS_AT_ONCE)
        refs = list(map(_REF_FIELDS, fast.refs[c0:c1]))
        cands = list(map(_CAND_FIELDS, fast.cands[c0:c1]))
        cks = [f"{lv}|{st}|{rk}|{d}|{mo}|{op}|{ca}|{ev}"
               for st, rk, _, d, mo, op, ca, ev, _, _, _ in refs]
        # a pair's key: "<level>|<step>|<rank>|<kind>|<direction>|<module>|<op>|<call>|"
        # + "in<j>" / "out<j>" + "|<event>", as pair_key makes it from the pair's records
        pres = np.array([f"{lv}|{st}|{rk}|{kd}|{d}|{mo}|{op}|{ca}|"
                         for st, rk, kd, d, mo, op, ca, _, _, _, _ in refs], dtype=object)
        evs = np.array([f"|{r[7]}" for r in refs], dtype=object)
        p0, p1 = int(starts[c0]), int(ends[c1 - 1])
        here = co[p0:p1] - c0
        got = names[pos[p0:p1] * 2 + is_out[p0:p1]].tolist()
        made = [a + b + c for a, b, c in zip(pres[here].tolist(), got, evs[here].tolist())]
        del pres, evs  # the keys are made: their parts' strings go before the calls are made
        ix += got
        keys += made
        pair_cks += np.array(cks, dtype=object)[here].tolist()
        for (st, rk, kd, d, mo, op, ca, _, na, so, mc), (cmo, cop, cso), ck, k, order, b, s, e \
                in zip(refs, cands, cks, fast.match[c0:c1], fast.order[c0:c1],
                       (starts[c0:c1] - p0).tolist(), (mids[c0:c1] - p0).tolist(),
                       (ends[c0:c1] - p0).tolist()):
            m = matches[k]
            append(CallResult(ck, lv, mo, op, na, cmo, cop, d, st, rk, so, cso, order,
                              made[b:s], made[s:e], "pass", "", "", m.method,
                              float(m.confidence), 0.0, 0.0, ca if kd == "module" else mc))
        del refs, cands, cks, made, got
        # these calls' results hold what they need of their matches: the matches and their
        # calls go part by part (~0.7 GB at 1M ops), not with the alignment
        for k in fast.match[c0:c1]:
            matches[k] = None
        fast.refs[c0:c1] = fast.cands[c0:c1] = [None] * (c1 - c0)
    acc.fast(fast, ix, keys, pair_cks, np.asarray(fast.match, dtype=np.int64)[co] + base)
    for i in np.nonzero(np.asarray(fast.aux, dtype=bool)
                        & (np.asarray(fast.n_out_ref, dtype=np.int64) > 1))[0].tolist():
        call, nr = out[i], fast.n_out_ref[i]
        notes.append((fast.match[i], {
            "call": call.name, "role": "outputs", "ref": nr, "cand": nr,
            "direction": call.direction, "step": call.step,
            "note": "auxiliary outputs differ by framework"}))
    return out


def _match_call(m: Any, lv: str, ck: str, order: int) -> CallResult:
    """The :class:`CallResult` of a match, no tensors yet."""
    r0, c0 = m.ref[0], m.cand[0]
    return CallResult(
        key=ck, level=lv, module=r0.module,
        op=r0.op if len(m.ref) == 1 else "+".join(c.op for c in m.ref),
        native=r0.native, cand_module=c0.module,
        cand_op=c0.op if len(m.cand) == 1 else "+".join(c.op for c in m.cand),
        direction=r0.direction, step=r0.step, rank=r0.rank, source=r0.source,
        cand_source=c0.source, order=order, inputs=[], outputs=[], method=m.method,
        confidence=float(m.confidence),
        module_call=r0.call if r0.kind == "module" else r0.module_call)


def _group_result(sides: tuple[rowpairs.Side, rowpairs.Side], m: Any, io: Any, lv: str,
                  ck: str, cpos: int, mi: int, acc: _RowAcc,
                  notes: list[tuple[int, dict[str, Any]]]) -> CallResult:
    """The :class:`CallResult` of an N:M group paired as rows (:class:`rowpairs.GroupRows`),
    with its pairs added to ``acc``: what the per-match loop makes of the group's records."""
    r0 = m.ref[0]
    outs = io[1][0]
    seq = sides[0].cols["seq"]
    call = _match_call(m, lv, ck, int(seq[outs].min()) if outs else r0.seq)
    ev = f"|{r0.event}"
    for role, (ra, ca, pre, got) in zip(("in", "out"), io):
        is_out = role == "out"
        keys = call.outputs if is_out else call.inputs
        for i, j in got:
            ix = f"{role}{i}"
            key = f"{lv}|{pre[i]}{ix}{ev}"  # pair_key of the reference's record
            acc.add([ra[i]], [ca[j]], [ix], [key], ck, cpos, is_out)
            keys.append(key)
        if len(got) < max(len(ra), len(ca)):
            notes.append((mi, {"call": call.name, "role": role + "puts", "ref": len(ra),
                               "cand": len(ca), "direction": call.direction,
                               "step": call.step}))
    return call


def _call_rows(sides: tuple[rowpairs.Side, rowpairs.Side], r: Any, c: Any) -> Any:
    """Rows of a 1:1 matched call's ``((ref inputs, ref outputs), (cand inputs, cand
    outputs))``; None when either call is not a call of the sides' scans whose rows all hold
    its key columns (then: records)."""
    d, e = r.__dict__, c.__dict__
    sr = sides[0].spans.get((d.get("rank"), d.get("step"), d.get("event")))
    sc = sides[1].spans.get((e.get("rank"), e.get("step"), e.get("event")))
    if sr is None or sc is None or not (sides[0].uniform[sr[0]] and sides[1].uniform[sc[0]]):
        return None
    o, p = sides[0].order, sides[1].order
    return ((o[sr[0]:sr[1]], o[sr[1]:sr[2]]), (p[sc[0]:sc[1]], p[sc[1]:sc[2]]))


def _same_setup(ref: Trace, cand: Trace) -> bool:
    keys = ("framework", "device")
    return all(ref.manifest.get(k) == cand.manifest.get(k) for k in keys)


def _call_dict(c: Any) -> dict[str, Any]:
    return {
        "name": c.name, "kind": c.kind, "module": c.module, "op": c.op, "native": c.native,
        "direction": c.direction, "step": c.step, "rank": c.rank, "source": c.source,
    }


def _rec_dict(r: Record) -> dict[str, Any]:
    return {"name": r.module or r.op, "kind": r.kind, "direction": r.direction, "step": r.step,
            "rank": r.rank, "dtype": r.dtype, "shape": list(r.shape)}


def _collect_then_freeze(fn: Callable[_P, CompareResult]) -> Callable[_P, CompareResult]:
    """Run ``fn`` (a comparison); when its result holds :data:`_FREEZE_PAIRS` pairs or more,
    collect the garbage it left, then freeze what is alive.

    The collector is paused while a comparison makes ~10^6 objects; once it runs again, its
    young-generation passes would walk all of them two or three times over (seconds, in
    whatever code allocates next: localisation). Freezing hands them to the permanent
    generation instead; they are still freed by reference counting when released. But cycles
    among them never are: the alignment's calls have one class per table and kind (a class is
    its own cycle), whose attributes hold the table's arrays and record source -- frozen while
    the comparison's frame still held its last calls, ~0.5 GB of a 1M-op comparison stayed
    for good. So the freeze comes after the comparison's frame is gone and one full
    collection (~0.8 s at 1M ops) has freed what became garbage."""

    @functools.wraps(fn)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> CompareResult:
        result = fn(*args, **kwargs)
        if result.n_pairs() >= _FREEZE_PAIRS:
            gc.collect()
            gc.freeze()
        return result

    return run


@_collect_then_freeze
@paused_gc()  # a large comparison builds ~10^6 objects and no garbage (see netparity.gcpause)
def compare(
    ref: Any,
    cand: Any,
    *,
    mapping: Any = None,
    level: str = "module",
    steps: int | Iterable[int] | None = None,
    rank: int | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    tolerances: dict[str, tuple[float, float]] | None = None,
    fp64_ref: Any = None,
    k: float = 2.0,
    profile: str = "auto",
    amplification: float = AMPLIFICATION,
    workers: int | None = None,
    progress: Any = None,
    noise_run: Any = None,
    noise_k: float = NOISE_K,
) -> CompareResult:
    """Measure and judge every matched tensor pair of two traces (localisation: analyzers).

    Args:
        ref: reference trace (path or :class:`~netparity.trace.Trace`).
        cand: candidate trace.
        mapping: a mapping file path, a dict in mapping-file form, or a
            :class:`netparity.align.Mapping` (module/param renames between the runs).
        level: ``"module"``, ``"op"`` or ``"both"``.
        steps: step numbers to compare (default: every step both traces hold).
        rank: which rank to compare (default 0; naming it narrows the comparison's scope to
            that rank: ranks the other side lacks then leave the verdict complete).
        rtol, atol: global tolerances (override the dtype defaults).
        tolerances: per-name overrides ``{glob: (rtol, atol)}``; ``""`` is the default key.
        fp64_ref: a float64 trace of the reference run; enables the fp64-reference verdict.
        k: fp64 mode: the candidate may have ``k`` times the reference's error against fp64.
        profile: default tolerance table: ``"same"`` (assert_close), ``"cross"`` (looser, for
            different frameworks/devices), or ``"auto"`` (``cross`` when the manifests differ in
            framework or device).
        amplification: see :mod:`netparity.compare.verdicts`.
        workers: threads measuring pairs (default: number of CPUs).
        progress: a :class:`netparity.report.progress.Progress`-like object told the number
            of pairs and each judged pair (default: none).
        noise_run: a trace of the reference run again with last-bit perturbed weights and
            inputs (``netparity step`` makes one): every pair is then judged against that
            tensor's own noise, ``noise_k`` x the noise run's error plus a floor
            (:mod:`netparity.compare.noise`), instead of the tolerance table.
        noise_k: see ``noise_run``.

    Returns:
        A :class:`~netparity.compare.results.CompareResult`, truthy when nothing fails.

    Example:
        >>> r = compare("runs/ref", "runs/cand", level="both")     # doctest: +SKIP
        >>> print(r.first_divergence.describe())                  # doctest: +SKIP
    """
    from netparity.align import Mapping, align_traces, load_mapping

    if level not in LEVELS:
        raise UsageError(f"level must be one of {', '.join(LEVELS)}, not {level!r}")
    if not (k >= 0 and math.isfinite(k)):
        raise UsageError("k must be a non-negative number")
    if not (noise_k > 0 and math.isfinite(noise_k)):
        raise UsageError("noise k must be a positive number")
    ref_tr, cand_tr = _open(ref, "ref"), _open(cand, "cand")
    rank_given = rank is not None
    rank = rank if rank is not None else 0
    if isinstance(mapping, (str, os.PathLike)):
        mapping = load_mapping(mapping)
    elif isinstance(mapping, dict):
        mapping = Mapping.from_dict(mapping)
    if rank not in ref_tr.ranks or rank not in cand_tr.ranks:
        raise UsageError(
            f"rank {rank} is not in both traces (ref has {ref_tr.ranks}, cand {cand_tr.ranks})"
        )
    if profile == "auto":
        profile = "same" if _same_setup(ref_tr, cand_tr) else "cross"
    cross_fw = ref_tr.framework != cand_tr.framework
    tols = Tolerances(rtol=rtol, atol=atol, overrides=dict(tolerances or {}), profile=profile)
    if steps is None:
        step_list: list[int | None] = [None]
    else:
        step_list = [steps] if isinstance(steps, int) else list(sorted(set(steps)))
        both = set(ref_tr.steps(rank)) & set(cand_tr.steps(rank))
        missing = [s for s in step_list if s not in both]
        if missing:
            raise UsageError(f"step(s) {missing} not in both traces (common: {sorted(both)})")
    # what each side holds, from the indexes only: a gap makes the verdict INCOMPLETE
    cover = coverage(ref_tr, cand_tr, rank=rank, rank_given=rank_given, level=level,
                     steps=None if steps is None else [s for s in step_list if s is not None])

    result = CompareResult()
    # pairs of matched calls: one tuple each, columns of a PairTable (compare.pairtable) --
    # or, in row mode (compare.rowpairs: one alignment whose calls come from one column scan
    # per side), row numbers of the two scans, with no record made for the common case
    rows: list[tuple[Any, ...]] = []
    acc = _RowAcc()
    pjobs: list[_Job] = []  # param / grad / loss / data pairs (few): objects, as ever
    levels = ["module", "op"] if level == "both" else [level]
    unmatched: dict[str, list[dict[str, Any]]] = {
        "calls_ref": [], "calls_cand": [], "params_ref": [], "params_cand": [], "tensors": [],
    }
    resolve = tols.resolve_unscaled
    row_mode = ROW_MODE and len(levels) == 1 and len(step_list) == 1 and fp64_ref is None
    sides: tuple[rowpairs.Side, rowpairs.Side] | None = None
    for st in step_list:
        params_done = False  # both levels' alignments hold the same params: take them once
        for lv in levels:
            al = align_traces(ref_tr, cand_tr, level=lv, step=st, rank=rank, mapping=mapping)
            fast = None
            ms = al.matches
            base = len(result.calls)  # match mi makes call base + mi
            slots: list[Any] = [None] * len(ms)
            notes: list[tuple[int, dict[str, Any]]] = []  # (match, unmatched tensors)
            todo: Iterable[int] = range(len(ms))
            groups: rowpairs.GroupRows | None = None
            if row_mode:
                sides = rowpairs.sides_of(al)
                if sides is not None:  # the common case's pairs, as arrays
                    fast = rowpairs.fast_calls(sides, ms, cross_fw, AUX_OUTPUT_OPS)
                    fat = fast.at
                    for mi, call in zip(fast.match, _fast_results(fast, lv, ms, base, acc,
                                                                  notes)):
                        slots[mi] = call
                    todo = [mi for mi, fi in enumerate(fat) if fi < 0]
                    groups = rowpairs.GroupRows(sides, ms, todo)
                    # the records of the calls paired from records (neither of the above)
                    rowpairs.prefetch(sides, ms, [mi for mi in todo if mi not in groups.pairs])
            unmatched["calls_ref"] += [_call_dict(c) for c in al.unmatched_ref]
            unmatched["calls_cand"] += [_call_dict(c) for c in al.unmatched_cand]
            for mi in todo:  # N:M groups and odd calls (every call without row mode)
                m = ms[mi]
                r0, c0 = m.ref[0], m.cand[0]
                rl, cl = m.ref[-1], m.cand[-1]
                ck = f"{lv}|{r0.step}|{r0.rank}|{r0.direction}|{r0.module}|{r0.op}|{r0.call}|{r0.event}"
                # tensors pair by meaning, not position (compare.argpairs)
                grouped = len(m.ref) > 1 or len(m.cand) > 1
                if sides is not None and groups is not None and mi in groups.pairs:
                    slots[mi] = _group_result(sides, m, groups.pairs[mi], lv, ck, base + mi,
                                              mi, acc, notes)
                    continue
                io: Any = None  # row mode: the rows of (inputs, outputs) of both sides
                if sides is not None and not grouped:
                    io = _call_rows(sides, r0, c0)
                if io is not None:
                    order = min((sides[0].seq[i] for i in io[0][1]),  # type: ignore[index]
                                default=r0.seq)
                else:
                    outs_r, outs_c = rl.outputs, cl.outputs
                    # a single call's inputs are its inputs (group_inputs' copy is not
                    # needed: nothing below changes the lists)
                    ins_r, ins_c = ((group_inputs(m.ref), group_inputs(m.cand)) if grouped
                                    else (r0.inputs, c0.inputs))
                    order = min((o.seq for o in outs_r), default=r0.seq)
                cpos = base + mi
                call = _match_call(m, lv, ck, order)
                for role in ("in", "out"):
                    is_out = role == "out"
                    aux = (is_out and cross_fw and len(m.ref) == 1 and len(m.cand) == 1
                           and r0.op in AUX_OUTPUT_OPS and c0.op == r0.op)
                    keys = call.outputs if is_out else call.inputs
                    if io is not None:
                        ra, ca = io[0][is_out], io[1][is_out]
                        if len(ra) == len(ca) and (
                                r0.native == c0.native
                                or [sides[0].shape[i] for i in ra]  # type: ignore[index]
                                == [sides[1].shape[i] for i in ca]):  # type: ignore[index]
                            # pair_tensors' common case (by position), as rows
                            npair = 1 if aux and ra else len(ra)
                            pre = (f"{lv}|{r0.step}|{r0.rank}|{r0.kind}|{r0.direction}|"
                                   f"{r0.module}|{r0.op}|{r0.call}|{role}")
                            ev = f"|{r0.event}"
                            ixs = [f"{role}{j}" for j in range(npair)]
                            ks = [f"{pre}{j}{ev}" for j in range(npair)]
                            acc.add(ra[:npair], ca[:npair], ixs, ks, ck, cpos, is_out)
                            keys.extend(ks)
                            if aux and len(ra) > 1:
                                notes.append((mi, {
                                    "call": call.name, "role": role + "puts", "ref": len(ra),
                                    "cand": len(ca), "direction": call.direction,
                                    "step": call.step,
                                    "note": "auxiliary outputs differ by framework"}))
                            continue
                        rs, cs = ((rl.outputs, cl.outputs) if is_out
                                  else (r0.inputs, c0.inputs))
                    else:
                        rs, cs = (outs_r, outs_c) if is_out else (ins_r, ins_c)
                    if not grouped and len(rs) == len(cs) and (
                            r0.native == c0.native
                            or all(a.shape == b.shape for a, b in zip(rs, cs))):
                        tensor_pairs = list(zip(rs, cs))  # pair_tensors' common case, inline
                    else:
                        tensor_pairs = pair_tensors(
                            rs, cs, group=grouped,
                            positional=not grouped and r0.native == c0.native,
                            primary=is_out and not grouped and r0.op == c0.op,
                            first_only=is_out)
                    # keyed by the reference tensor's position: the noise run's pairs (same
                    # framework, by position) carry the same keys
                    at = {id(r): k for k, r in enumerate(rs)}
                    for a, b in tensor_pairs[:1] if aux else tensor_pairs:
                        ix = f"{role}{at[id(a)]}"
                        key = f"{lv}|{_pair_key(a, ix)}|{r0.event}"
                        if sides is not None:
                            ar, br = sides[0].row_of(a), sides[1].row_of(b)
                            if ar >= 0 and br >= 0:
                                acc.add([ar], [br], [ix], [key], ck, cpos, is_out)
                                keys.append(key)
                                continue
                            # a record of no scan: every pair as objects from here on
                            rows = acc.as_objects(sides, resolve)
                            sides = fast = None
                        tol, scaled = resolve(a, b)
                        rows.append((a, b, tol, scaled, ix, key, ck, cpos, is_out))
                        keys.append(key)
                    if len(tensor_pairs) < max(len(rs), len(cs)) or (aux and len(rs) > 1):
                        notes.append((mi, {
                            "call": call.name, "role": role + "puts", "ref": len(rs),
                            "cand": len(cs), "direction": call.direction, "step": call.step}
                            | ({"note": "auxiliary outputs differ by framework"} if aux else {})
                        ))
                slots[mi] = call
            result.calls += slots
            notes.sort(key=_first)  # match order (stable: a call's inputs, then outputs)
            unmatched["tensors"] += [e for _, e in notes]
            if not params_done:
                unmatched["params_ref"] += [_rec_dict(r) for r in al.unmatched_params_ref]
                unmatched["params_cand"] += [_rec_dict(r) for r in al.unmatched_params_cand]
                for pp in al.params:
                    tol = tols.resolve(pp.ref, pp.cand)
                    pr = _make_pair(pp.ref, pp.cand, tol, pp.ref.arg or "0", "")
                    pjobs.append(_Job(pp.ref, pp.cand, tol, pr))
                params_done = True

    # the alignment is done with (the calls' results hold what they need of it): freed before
    # the pairs' columns and the statistics batch are made (~1 GB of a 1M-op comparison)
    del al, ms, fast, groups, slots, todo
    # (and the last call the loop above looked at: its class -- one per table and kind, a
    # reference cycle -- holds the alignment's arrays and record source; with the sides' own,
    # ~0.5 GB at 1M ops, collected now, not when the comparison returns)
    m = r0 = c0 = rl = cl = None  # type: ignore[assignment]
    if sides is not None:
        for side in sides:
            side.done_pairing()
    if len(result.calls) >= _COLLECT_CALLS:
        gc.collect()
    heap.trim()  # and the heap's pages they were made in (netparity.heap)
    table = acc.table(sides, tols) if sides is not None else PairTable(rows)
    del rows, acc
    _scale_tolerances(table, sides)
    fp64_tr = _open(fp64_ref, "fp64_ref") if fp64_ref is not None else None
    # the pairs judged one by one: payloads on both sides, statistics the batch does not
    # take, everything in the fp64 mode; the rest -- statistics pairs, the bulk of a
    # statistics trace -- are judged as whole arrays and stay columns of the table
    one_by_one = (_batch_stats_pairs(table, sides) if fp64_tr is None
                  else list(range(len(table))))
    heap.trim()  # the batch's parts and gathers
    jobs = [_Job(table.refs[i], table.cands[i], table.tol(i), table.new_object(i))
            for i in one_by_one] + pjobs
    # without an fp64 trace, op pairs with tensors are judged against the reference op's own
    # noise by float64 replays (netparity.precision.opnoise; docs/precision.md)
    opnoise = None
    if fp64_tr is None and level != "module":
        from netparity.precision.opnoise import OpNoise

        opnoise = OpNoise.for_traces(ref_tr, cand_tr)
    if fp64_tr is not None:
        idx: dict[tuple[int, str], Record] = {}
        for r in fp64_tr.iter_records(rank=rank):
            idx.setdefault((r.step, r.key()), r)
        for j in jobs:
            j.fp64_rec = idx.get((j.ref.step, j.ref.key()))

    def run(j: _Job) -> None:
        pr = j.result
        pr.metrics = _evidence(ref_tr, j.ref, cand_tr, j.cand, j.tol)
        if j.tol.norm is not None and pr.metrics.get("basis") == "tensors":
            pr.metrics["norm_tol"] = j.tol.norm
        pr.status, pr.reason = judge(pr.metrics, j.tol.rtol, j.tol.atol)
        f = j.fp64_rec
        if (
            f is not None
            and f.has_payload
            and pr.metrics.get("basis") == "tensors"
            and f.numel == j.ref.numel
            and j.ref.has_payload
        ):
            e_ref = tensor_metrics(fp64_tr, f, ref_tr, j.ref, rtol=j.tol.rtol, atol=j.tol.atol)
            e_cand = tensor_metrics(fp64_tr, f, cand_tr, j.cand, rtol=j.tol.rtol, atol=j.tol.atol)
            dt = lower_precision(j.ref.dtype, j.cand.dtype)
            floor = _EPS.get(dt, _EPS["float32"]) * float(e_ref.get("ref_rms", 0.0))
            keep = ("max_abs", "rmse", "max_rel", "nan_mismatch", "inf_mismatch")
            pr.fp64 = {
                "ref_vs_fp64": {x: e_ref.get(x) for x in keep},
                "cand_vs_fp64": {x: e_cand.get(x) for x in keep},
                "k": k,
                "floor": floor,
            }
            pr.status, pr.reason = judge_fp64(e_ref, e_cand, k, floor)
        elif opnoise is not None and pr.metrics.get("basis") == "tensors":
            got = opnoise.judge(j.ref, j.cand)
            if got is not None:
                pr.status, pr.reason = got[0], got[1]
                pr.metrics["replay_noise"] = got[2]
        if progress is not None:
            progress.advance()

    # Pairs with payloads on both sides stream tensors (NumPy releases the GIL): threads. Pairs
    # judged from statistics are a few microseconds of Python each: inline, because handing
    # each of them to a pool costs more than judging it (100k-op traces: ~300k pairs).
    heavy: list[_Job] = []
    light: list[_Job] = []
    if progress is not None:
        progress.stage("judge tensor pairs", total=len(table) + len(pjobs))
        progress.advance(len(table) - len(one_by_one))  # judged in the batch above
    for j in jobs:
        (heavy if j.ref.has_payload and j.cand.has_payload else light).append(j)
    nworkers = workers or min(8, os.cpu_count() or 1)
    if nworkers > 1 and len(heavy) > 1:
        with ThreadPoolExecutor(nworkers, thread_name_prefix="netparity-compare") as ex:
            list(ex.map(run, heavy))
    else:
        light += heavy
    n_light = len(light)
    light = _judge_stats_batch(light)  # statistics pairs as whole arrays
    if progress is not None and n_light > len(light):
        progress.advance(n_light - len(light))
    for j in light:
        run(j)

    noise = _treat_rounding_noise(jobs, table, sides)
    table.refresh()
    table.finish()
    result.set_table(table)
    for j in pjobs:
        pr = j.result
        if pr.kind == "loss":
            result.loss.append(pr)
        elif pr.kind in ("data", "custom"):
            result.data.append(pr)
        else:
            result.params.append(pr)
    result.unmatched = unmatched
    result.coverage = cover
    result.settings = {
        "level": level,
        "steps": None if steps is None else [s for s in step_list if s is not None],
        "rank": rank,
        "tolerances": tols.to_json(),
        "fp64_ref": str(fp64_tr.path) if fp64_tr is not None else None,
        "k": k,
        "amplification": amplification,
        "mapping": getattr(mapping, "source", None),
    }
    result.runs = {
        "ref": {"path": str(ref_tr.path), "framework": ref_tr.framework,
                "device": ref_tr.manifest.get("device")},
        "cand": {"path": str(cand_tr.path), "framework": cand_tr.framework,
                 "device": cand_tr.manifest.get("device")},
    }
    if noise:
        result.notes.append(
            f"{noise} pair(s) passed as rounding noise of a value that is zero in exact "
            "arithmetic (both sides far below the step's typical gradient/parameter size)")
    if table.any_stats_basis() or any(p.metrics.get("basis") == "stats"
                                      for p in (*result.params, *result.loss, *result.data)):
        result.notes.append(
            "some pairs were judged from statistics only (basis 'stats'): a failure there is "
            "certain, a pass is weaker than an element-wise comparison"
        )
    if noise_run is not None:
        noise_tr = _open(noise_run, "noise run")
        if noise_tr.framework != ref_tr.framework:
            raise UsageError(f"the noise run must be a trace of the reference's framework "
                             f"({ref_tr.framework}), not {noise_tr.framework}")
        calibrate(result, compare(ref_tr, noise_tr, level=level, steps=steps, rank=rank,
                                  profile="same", workers=workers), noise_k)
        result.settings["noise_run"] = str(noise_tr.path)
    if fp64_tr is None and noise_run is None and level != "op":
        # module pairs with tensors: leaf torch.nn modules judged by float64 replay
        from netparity.compare.leafreplay import replay_leaves

        replay_leaves(result, ref_tr, cand_tr, rank or 0)
        _leafback.replay_leaves_backward(result, ref_tr, cand_tr, rank or 0)  # their gradients
    # a parameter-free op applied on the other side of a module boundary is not a divergence
    settle_moved_ops(result, ref_tr, cand_tr)
    settle_commuted(result, ref_tr, cand_tr)  # a commutative op's operands in the other order
    return result  # calls are classified and localised by netparity.analyzers.divergence


def recheck(result: CompareResult, *, rtol: float | None = None,
            atol: float | None = None) -> CompareResult:
    """Re-judge a saved :class:`CompareResult` with new global tolerances, reading no tensors.

    A tolerance left as ``None`` keeps each pair's previous value. See
    :mod:`netparity.cli.recheck_cmd` for what is exact and what is estimated.

    Example:
        >>> from netparity.compare.results import CompareResult
        >>> bool(recheck(CompareResult(), rtol=1e-3, atol=1e-5))
        True
    """
    from netparity.compare.verdicts import rejudge

    for v in (rtol, atol):
        if v is not None and not (v >= 0 and math.isfinite(v)):
            raise UsageError("tolerances must be non-negative numbers")
    estimated = 0
    for p in result.all_pairs():
        if p.fp64 or p.metrics.get("noise_floor") is not None or p.metrics.get("restructured"):
            continue  # the fp64 and rounding-noise rules do not use rtol/atol; set aside
        r = p.rtol if rtol is None else rtol
        a = p.atol if atol is None else atol
        # as in compare: global tolerances replace the cross profile's normwise rule
        p.status, p.reason, exact = rejudge(p.metrics, r, a, use_norm=rtol is None and atol is None)
        p.rtol, p.atol = r, a
        p.tol_source = "recheck"
        estimated += not exact
    result.settings = {**result.settings, "recheck": {"rtol": rtol, "atol": atol}}
    result.notes = [n for n in result.notes if not n.startswith("recheck:")]
    if estimated:
        result.notes.append(
            f"recheck: {estimated} pair verdict(s) estimated from saved histograms; run compare "
            "again for exact verdicts"
        )
    return result  # call origins: netparity.analyzers.divergence.recheck re-localises
