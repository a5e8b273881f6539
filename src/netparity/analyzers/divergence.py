"""Localisation: which call introduced a divergence, which only inherited it, and where it starts.

The comparison engine (:mod:`netparity.compare`) measures and judges tensor *pairs*. This
analyzer works on its :class:`~netparity.compare.results.CompareResult` and decides, per matched
call and in execution order:

* ``status`` -- the worst of the call's output pairs;
* ``origin`` -- **introduced** when the call's inputs pass (it is a culprit), **propagated** when
  an input already diverges and the output's normwise relative error is at most
  ``amplification`` (100) times the inputs' (a layer that turns a small input difference into a
  much larger output error is still flagged introduced, with a note). Without captured inputs a
  call is propagated when an earlier call of the same step and direction diverged. Backward uses
  the same rule: there the "inputs" are the gradients with respect to the call's outputs;
* the first divergence of each direction (forward, backward, update) and the minimum passing
  tolerances.

:func:`compare` and :func:`recheck` are the user-facing comparison: engine, then localisation
(``netparity.compare(...)`` is this :func:`compare`).

Example:
    >>> from netparity.compare.results import CompareResult
    >>> bool(localise(CompareResult()))
    True
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from netparity import heap
from netparity.compare import engine
from netparity.compare.pairtable import CODE_RANK, PairTable, row_of
from netparity.compare.restructured import settle as settle_restructured
from netparity.compare.restructured import settle_reordered
from netparity.compare.results import CallResult, CompareResult, Divergence, PairResult, worst
from netparity.compare.verdicts import AMPLIFICATION
from netparity.errors import UsageError

__all__ = [
    "AMPLIFICATION", "SUMMARY_KEYS", "classify_calls", "compare", "first_divergence", "localise",
    "min_tolerances", "recheck",
]

#: metrics copied into a Divergence (the evidence shown on the first screen)
SUMMARY_KEYS = (
    "basis", "max_abs", "mean_abs", "max_rel", "mean_rel", "rmse", "cosine", "within", "q50",
    "q90", "q99", "nan_mismatch", "inf_mismatch", "min_atol", "min_rtol", "rtol", "atol",
    "max_abs_lb", "max_rel_lb", "ref_rms", "norm_err", "norm_tol",
)


def _g(m: dict[str, Any], k: str) -> float:
    v = m.get(k)
    return float(v) if v is not None else 0.0


def classify_calls(
    calls: list[CallResult], pairs: Mapping[str, PairResult],
    amplification: float = AMPLIFICATION
) -> None:
    """Set ``status``, ``origin``, ``note``, ``in_error``/``out_error`` of every call in place."""
    diverged: set[tuple[str, int, int, str]] = set()
    for c in sorted(calls, key=lambda c: (c.step, c.order)):
        outs = [pairs[k] for k in c.outputs if k in pairs]
        ins = [pairs[k] for k in c.inputs if k in pairs]
        c.status = worst([p.status for p in outs])
        c.out_error = max((p.error() for p in outs), default=0.0)
        c.in_error = max((p.error() for p in ins), default=0.0)
        scope = (c.direction, c.step, c.rank, c.level)
        c.note = ""
        if c.status in ("pass", "unknown"):
            c.origin = ""
        elif ins:
            in_status = worst([p.status for p in ins])
            if in_status in ("pass", "unknown"):
                c.origin = "introduced"
            elif c.out_error > amplification * max(c.in_error, 1e-300):
                c.origin = "introduced"
                ratio = c.out_error / c.in_error if c.in_error else math.inf
                c.note = (
                    f"inputs already differ (rel err {c.in_error:.3g}) but the output error is "
                    f"{ratio:.3g}x larger"
                )
            else:
                c.origin = "propagated"
        else:
            c.origin = "propagated" if scope in diverged else "introduced"
            c.note = "inputs not captured; judged by execution order"
        if c.status in ("fail", "warn"):
            diverged.add(scope)


def _divergence(c: CallResult, pairs: Mapping[str, PairResult]) -> Divergence:
    """The evidence of one call: its worst output pair's headline metrics."""
    outs = [pairs[k] for k in c.outputs if k in pairs]
    bad = [p for p in outs if p.status == c.status] or outs
    worst_pair = max(bad, key=lambda p: p.error()) if bad else None
    metrics: dict[str, Any] = {}
    if worst_pair is not None:
        metrics = {k: worst_pair.metrics[k] for k in SUMMARY_KEYS if k in worst_pair.metrics}
        metrics["pair"] = worst_pair.key
        if worst_pair.reason:
            metrics["reason"] = worst_pair.reason
        if worst_pair.fp64:
            metrics["fp64"] = worst_pair.fp64
    return Divergence(
        module=c.module, op=c.op, direction=c.direction, step=c.step, rank=c.rank,
        source=c.source, verdict=c.origin or "introduced", status=c.status, metrics=metrics,
        key=c.key, level=c.level, cand_module=c.cand_module, cand_op=c.cand_op,
        cand_source=c.cand_source, note=c.note, in_error=c.in_error, out_error=c.out_error,
    )


def first_divergence(
    calls: list[CallResult], pairs: Mapping[str, PairResult], direction: str
) -> Divergence | None:
    """The first failing call of ``direction`` in execution order (first warning if none fail).

    Execution order is (step, sequence number of the call's first output): an op finishes
    before the module that runs it, so at level "both" the op is found first, with its module.
    """
    cs = sorted((c for c in calls if c.direction == direction), key=lambda c: (c.step, c.order))
    return _first_in(cs, pairs)


def _first_in(cs: list[CallResult], pairs: Mapping[str, PairResult]) -> Divergence | None:
    """:func:`first_divergence` of calls of one direction already in execution order."""
    for want in ("fail", "warn"):
        for c in cs:
            if c.status == want:
                owner = _introducing_owner(c, cs)
                if owner is None:
                    return _divergence(c, pairs)
                d = _divergence(owner, pairs)
                d.note = (f"introduced in its own code, not in a child: {c.name} is the first "
                          "call inside it that received a differing input"
                          + (f"; {d.note}" if d.note else ""))
                return d
    return None


def _encloses(a: CallResult, c: CallResult) -> bool:
    """Whether module call ``a`` may have run call ``c`` (same step, rank and direction; ``a``
    finished later; ``a``'s module path is ``c``'s or an ancestor of it)."""
    if a.level != "module" or a is c or a.order <= c.order or (a.step, a.rank) != (c.step, c.rank):
        return False
    if c.level == "op" and a.module == c.module:
        return True
    return a.module == "" or c.module.startswith(a.module + ".")


def _introducing_owner(c: CallResult, cs: list[CallResult]) -> CallResult | None:
    """For a first divergent call that only *propagated* a difference (its inputs already
    differ, yet no earlier call diverged), the innermost enclosing module call whose inputs
    agree and whose output does not: the difference was made by that module's own code between
    its children (an attention's scaling of its logits, a residual add written in
    ``forward``), so that module -- not the child that carried it -- introduced it. None when
    there is no such module (the difference came in with the data or an uncaptured input)."""
    if c.origin != "propagated":
        return None
    cur = c
    while True:
        outer = [a for a in cs if _encloses(a, cur)]
        if not outer:
            return None
        a = min(outer, key=lambda x: x.order)
        if a.status not in ("fail", "warn"):
            return None
        if a.origin == "introduced":
            return a
        cur = a


def min_tolerances(pairs: list[PairResult]) -> list[dict[str, Any]]:
    """Per tolerance in use: the smallest atol (at that rtol) and rtol (at that atol) that pass."""
    return min_tolerance_rows([row_of(p) for p in pairs])


_ROW_COLUMNS = ("basis", "rtol", "atol", "source", "ref_rms", "nonfinite", "min_atol",
                "min_rtol")


def min_tolerance_rows(rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """:func:`min_tolerances` of pairs given as rows ``(basis, rtol, atol, tol_source,
    ref_rms, nonfinite mismatch, min_atol, min_rtol)`` (:func:`netparity.compare.pairtable.row_of`)."""
    return min_tolerance_columns(_columns_of_rows(rows))


def _columns_of_rows(rows: list[tuple[Any, ...]]) -> dict[str, np.ndarray]:
    """Rows as :func:`min_tolerance_columns` reads them (None: 0.0)."""
    cols: dict[str, np.ndarray] = {}
    for name, col in zip(_ROW_COLUMNS, zip(*rows) if rows else [()] * len(_ROW_COLUMNS)):
        if name in ("basis", "source"):
            cols[name] = np.array(list(col) + [None], dtype=object)[:-1]  # strings stay objects
        elif name == "nonfinite":
            cols[name] = np.array([bool(v) for v in col], dtype=bool)
        else:
            cols[name] = np.array([0.0 if v is None else float(v) for v in col],
                                  dtype=np.float64)
    return cols


def _groups(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group of each ``(x, y)`` (floats compared with ``==``, as dict keys are) and each
    group's first position; groups numbered in sorted key order."""
    o = np.lexsort((y, x))
    xs, ys = x[o], y[o]
    new = np.ones(len(o), dtype=bool)
    new[1:] = (xs[1:] != xs[:-1]) | (ys[1:] != ys[:-1])
    gid = np.cumsum(new) - 1
    inv = np.empty(len(o), dtype=np.int64)
    inv[o] = gid
    first = np.full(int(gid[-1]) + 1 if len(o) else 0, len(o), dtype=np.int64)
    np.minimum.at(first, gid, o)
    return inv, first


def min_tolerance_columns(cols: Mapping[str, np.ndarray]) -> list[dict[str, Any]]:
    """:func:`min_tolerances` of pairs given as columns (those of
    :meth:`PairTable.tolerance_parts <netparity.compare.pairtable.PairTable.tolerance_parts>`),
    as whole arrays: one group per (rtol, atol) in order of first use, largest first.

    A pair whose atol is relative to its tensor's RMS (the cross profile: ``(atol x rms)`` in
    its tolerance source) has its own absolute atol, so such pairs group by rtol alone and
    report atol in units of each tensor's RMS instead of one line per pair."""
    return min_tolerance_parts([cols])


def min_tolerance_parts(parts: Iterable[Mapping[str, np.ndarray]]) -> list[dict[str, Any]]:
    """:func:`min_tolerance_columns` of the pairs of consecutive parts (each a mapping of
    columns), one part at a time: the same groups, values and order as one call on all of
    them (a group is its ``(rtol, atol)`` key, floats compared with ``==``: a NaN key is a
    group of its own; counts add up, maxima take the larger, a group's first pair decides its
    ``rtol``, ``atol`` and unit)."""
    groups: dict[Any, dict[str, Any]] = {}
    offset = 0
    for cols in parts:
        _part_groups(cols, offset, groups)
        offset += len(cols["basis"])
    out = []
    for g in sorted(groups.values(), key=lambda g: g["first"]):  # in order of first use
        grp: dict[str, Any] = {
            "rtol": g["rtol"], "atol": g["atol"], "min_atol": g["min_atol"],
            "min_rtol": g["min_rtol"], "pairs": g["pairs"],
            "nonfinite_mismatch": g["nonfinite"],
            "basis": "+".join(b for b, k in zip(("stats", "tensors"), g["kinds"]) if k)}
        if g["rms"]:
            grp["atol_unit"] = "rms"
        out.append(grp)
    out.sort(key=lambda g: -int(g["pairs"]))
    return out


def _part_groups(cols: Mapping[str, np.ndarray], offset: int,
                 groups: dict[Any, dict[str, Any]]) -> None:
    """Add the pairs of one part (its first at position ``offset`` of all) to ``groups``."""
    basis = cols["basis"]
    is_stats = basis == "stats"
    is_tensors = basis == "tensors"
    keep: Any = np.nonzero(is_stats | is_tensors)[0]
    if not len(keep):
        return
    if len(keep) == len(basis):  # every pair (the usual case): views, not copies
        keep = slice(None)
    at = np.arange(len(basis))[keep]
    rtol, atol = cols["rtol"][keep], cols["atol"][keep]
    memo: dict[Any, bool] = {}
    rel = np.array([memo[x] if x in memo else memo.setdefault(x, "(atol x rms)" in x)
                    for x in cols["source"][keep].tolist()], dtype=bool)
    rms = np.where(rel, cols["ref_rms"][keep], 0.0)
    with np.errstate(invalid="ignore"):
        pos, nonpos = rms > 0, rms <= 0
    scale = np.where(pos, rms, 1.0)
    akey = np.where(nonpos, atol, -1.0)
    inv, first = _groups(rtol, akey)
    ng = len(first)
    pairs = np.bincount(inv, minlength=ng).tolist()
    nf = cols["nonfinite"][keep]
    n_nf = np.bincount(inv[nf], minlength=ng).tolist()
    ok = ~nf
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        ma = cols["min_atol"][keep] / scale
        a_unit = atol / scale  # a group's atol: its first pair's, in RMS units where relative
    mr = cols["min_rtol"][keep]
    most = []
    for v in (ma, mr):  # Python's max(0.0, x) in order: NaN never wins, 0.0 is the floor
        m = np.zeros(ng)
        g, x = inv[ok], v[ok]
        good = ~np.isnan(x)
        np.maximum.at(m, g[good], x[good])
        most.append((m + 0.0).tolist())
    kinds = [(np.bincount(inv[flag[keep]], minlength=ng) > 0).tolist()
             for flag in (is_stats, is_tensors)]
    for g, f in enumerate(first.tolist()):
        r, a = float(rtol[f]), float(akey[f])
        key: Any = (r, a) if r == r and a == a else ("nan", offset + int(at[f]))
        got = groups.get(key)
        if got is None:
            groups[key] = {
                "first": offset + int(at[f]), "rtol": r, "atol": float(a_unit[f]),
                "rms": bool(pos[f]), "min_atol": most[0][g], "min_rtol": most[1][g],
                "pairs": pairs[g], "nonfinite": n_nf[g], "kinds": [kinds[0][g], kinds[1][g]]}
            continue
        got["pairs"] += pairs[g]
        got["nonfinite"] += n_nf[g]
        got["min_atol"] = max(got["min_atol"], most[0][g])
        got["min_rtol"] = max(got["min_rtol"], most[1][g])
        got["kinds"] = [got["kinds"][0] or kinds[0][g], got["kinds"][1] or kinds[1][g]]


class _TablePairs(Mapping[str, PairResult]):
    """``{key: PairResult}`` of a :class:`PairTable`, each pair made when looked up.

    Localisation looks up the output pairs of a few calls (the first divergences), so a key
    is found by a scan of the table's keys until more than a few have been asked for; then
    the whole index is built once."""

    _SCANS = 16

    def __init__(self, table: PairTable):
        self.table = table
        self._at: dict[str, int] | None = None
        self._asked = 0
        self._found: dict[str, int] = {}

    def _index(self) -> dict[str, int]:
        if self._at is None:
            self._at = {k: i for i, k in enumerate(self.table.keys)}
        return self._at

    def _find(self, key: object) -> int:
        if self._at is None and self._asked < self._SCANS:
            got = self._found.get(key)  # type: ignore[call-overload]
            if got is None:
                self._asked += 1
                keys = self.table.keys
                try:  # the last pair of that key, as the index has it
                    got = len(keys) - 1 - keys[::-1].index(key)  # type: ignore[arg-type]
                except ValueError:
                    got = -1
                self._found[key] = got  # type: ignore[index]
            return int(got)
        return self._index().get(key, -1)  # type: ignore[call-overload]

    def __getitem__(self, key: str) -> PairResult:
        i = self._find(key)
        if i < 0:
            raise KeyError(key)
        return self.table.get(i)

    def __contains__(self, key: object) -> bool:
        return self._find(key) >= 0

    def __iter__(self) -> Any:
        return iter(self._index())

    def __len__(self) -> int:
        return len(self.table)


def classify_table(calls: list[CallResult], table: PairTable,
                   amplification: float = AMPLIFICATION) -> bool:
    """:func:`classify_calls` with the pairs of a :class:`PairTable`, as whole arrays (the
    calls are those the table's ``call`` column points into). Returns False, changing nothing,
    where an error is NaN or -0.0 (Python's ``max`` has its own rules there) or ``calls`` are
    not the ones the table was made with: then classify the pair objects."""
    return _classify_table(calls, table, amplification) is not None


class _Classified:
    """What :func:`_classify_table` worked out, for finding the first divergences."""

    def __init__(self, exec_order: np.ndarray, rank: np.ndarray, direction: np.ndarray):
        self.exec_order = exec_order  # call positions in execution order (step, order)
        self.rank = rank  # 0 pass (or unknown), 1 warn, 2 fail
        self.direction = direction  # object array

    def first(self, calls: list[CallResult], pairs: Mapping[str, PairResult],
              direction: str) -> Divergence | None:
        """:func:`first_divergence` from the arrays: only the calls around the one found
        are looked at."""
        eo = self.exec_order
        mine = eo[self.direction[eo] == direction]
        for want in (2, 1):
            hit = mine[self.rank[mine] == want]
            if len(hit):
                c = calls[int(hit[0])]
                if c.origin != "propagated":
                    return _divergence(c, pairs)
                return _first_in([calls[i] for i in mine.tolist()], pairs)
        return None


def _classify_table(calls: list[CallResult], table: PairTable,
                    amplification: float) -> _Classified | None:
    """:func:`classify_table`; None where it returns False."""
    n = len(calls)
    if table.n and (int(table.call.max()) >= n or int(table.call.min()) < 0):
        return None
    ck = np.array([c.key for c in calls] + [None], dtype=object)[:-1]
    if table.n and bool((ck[table.call] != np.array(table.call_keys + [None],
                                                    dtype=object)[:-1]).any()):
        return None  # the calls are not those the table was made with (edited since)
    table.refresh()
    err = table.errors()
    if np.isnan(err).any() or np.signbit(err).any():
        return None
    rank = CODE_RANK[table.code]
    cp, out = table.call, table.is_out
    inn = ~out
    out_rank = np.zeros(n, dtype=np.int8)
    np.maximum.at(out_rank, cp[out], rank[out])
    in_rank = np.zeros(n, dtype=np.int8)
    np.maximum.at(in_rank, cp[inn], rank[inn])
    out_err = np.zeros(n)
    np.maximum.at(out_err, cp[out], err[out])
    in_err = np.zeros(n)
    np.maximum.at(in_err, cp[inn], err[inn])
    has_in = np.bincount(cp[inn], minlength=n) > 0
    bad = out_rank > 0  # fail or warn
    amp = out_err > amplification * np.maximum(in_err, 1e-300)
    # execution order, and whether an earlier call of the same scope diverged
    step = np.array([c.step for c in calls], dtype=np.int64)
    order = np.array([c.order for c in calls], dtype=np.int64)
    ids: dict[tuple[str, int, int, str], int] = {}
    scope = np.array([ids.setdefault((c.direction, c.step, c.rank, c.level), len(ids))
                      for c in calls], dtype=np.int64)
    exec_order = np.lexsort((order, step))
    pos = np.empty(n, dtype=np.int64)
    pos[exec_order] = np.arange(n)
    by = np.lexsort((pos, scope))  # scope by scope, in execution order
    before = np.zeros(n, dtype=bool)
    if n:
        cum = np.cumsum(bad[by])
        first = np.ones(n, dtype=bool)
        first[1:] = scope[by][1:] != scope[by][:-1]
        start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
        base = np.where(start > 0, cum[start - 1], 0)
        before[by] = (cum - bad[by]) - base > 0
    origin = np.where(~bad, 0, np.where(
        has_in, np.where((in_rank == 0) | amp, 1, 2), np.where(before, 2, 1)))
    status_l = ["pass", "warn", "fail"]
    origin_l = ["", "introduced", "propagated"]
    noted = (bad & has_in & (in_rank > 0) & amp).tolist()
    blind = (bad & ~has_in).tolist()
    for c, st, og, oe, ie, nd, bl in zip(calls, out_rank.tolist(), origin.tolist(),
                                          out_err.tolist(), in_err.tolist(), noted, blind):
        c.status, c.origin, c.out_error, c.in_error = status_l[st], origin_l[og], oe, ie
        if nd:
            ratio = oe / ie if ie else math.inf
            c.note = (f"inputs already differ (rel err {ie:.3g}) but the output error is "
                      f"{ratio:.3g}x larger")
        elif bl:
            c.note = "inputs not captured; judged by execution order"
        else:
            c.note = ""
    direction = np.array([k[0] for k in ids] + [None], dtype=object)[:-1][scope]
    return _Classified(exec_order, out_rank, direction)


def localise(result: CompareResult, amplification: float | None = None, *,
             tolerances: bool = True) -> CompareResult:
    """Classify calls and fill the first divergences (and minimum tolerances) of ``result``.

    Args:
        result: a comparison's result; changed in place and returned.
        amplification: see the module docstring (default: the one the comparison recorded in
            its settings, else :data:`AMPLIFICATION`).
        tolerances: also recompute ``min_tolerance`` (``recheck`` keeps the measured one).
    """
    if amplification is None:
        amplification = float(result.settings.get("amplification", AMPLIFICATION))
    settle_reordered(result)  # a module's input laid out differently, its outputs agreeing
    settle_restructured(result)  # op level is never worse than module level
    table = result.table
    pairs: Mapping[str, PairResult]
    got = _classify_table(result.calls, table, amplification) if table is not None else None
    directions = ("forward", "backward", "update")
    if got is not None:
        pairs = _TablePairs(table)  # type: ignore[arg-type]  # pairs made only when shown
        first = {d: got.first(result.calls, pairs, d) for d in directions}
    else:
        pairs = {p.key: p for p in result.pairs}
        classify_calls(result.calls, pairs, amplification)
        first = {d: first_divergence(result.calls, pairs, d) for d in directions}
    result.first_divergence = first["forward"]
    result.first_backward = first["backward"]
    result.first_update = first["update"]
    if tolerances:
        table = result.table
        if table is not None:
            heap.trim()  # what classifying dropped, before the columns (netparity.heap)
            extra = [row_of(p) for p in (*result.params, *result.loss, *result.data)]
            parts: Iterable[Mapping[str, np.ndarray]] = table.tolerance_parts()
            if extra:
                parts = itertools.chain(parts, [_columns_of_rows(extra)])
            result.min_tolerance = min_tolerance_parts(parts)
        else:
            result.min_tolerance = min_tolerances(
                [p for p in result.all_pairs() if p.status != "unknown"])
    return result


def compare(ref: Any, cand: Any, *, progress: Any = None, **kwargs: Any) -> CompareResult:
    """Compare two traces and localise where they start to disagree.

    The engine (:func:`netparity.compare.engine.compare`, same keyword arguments: ``mapping``,
    ``level``, ``steps``, ``rank``, ``rtol``, ``atol``, ``tolerances``, ``fp64_ref``, ``k``,
    ``profile``, ``amplification``, ``workers``) measures and judges every pair; this then
    classifies the calls and names the first divergences. ``progress`` (a
    :class:`netparity.report.progress.Progress`) shows the stages and the pairs judged; it is
    ended before returning.

    Example:
        >>> r = compare("runs/ref", "runs/cand", level="both")     # doctest: +SKIP
        >>> print(r.first_divergence.describe())                  # doctest: +SKIP
    """
    if progress is None or not getattr(progress, "active", True):
        # a silent display (piped output, --quiet) costs nothing: the engine gets none
        return localise(_something(engine.compare(ref, cand, **kwargs), kwargs))
    try:
        progress.stage("align and read the traces")
        result = engine.compare(ref, cand, progress=progress, **kwargs)
        progress.stage("localise")
        return localise(_something(result, kwargs))
    finally:
        progress.done()


def _something(result: CompareResult, kwargs: dict[str, Any]) -> CompareResult:
    """A comparison that compared nothing is not a pass: INCOMPLETE (exit 1) when evidence
    it asked for is missing (a level neither trace captured), else an error (exit 2)."""
    if result.n_pairs() or result.incomplete:
        return result
    steps = kwargs.get("steps")
    raise UsageError("nothing to compare: the traces have no tensor pairs in common"
                     + (f" at step(s) {sorted(steps) if not isinstance(steps, int) else steps}"
                        if steps is not None else "")
                     + " (empty or unrelated traces, or a step/rank they do not hold)")


def recheck(result: CompareResult, *, rtol: float | None = None,
            atol: float | None = None) -> CompareResult:
    """Re-judge a saved result at new tolerances (no tensors read), then re-localise.

    ``min_tolerance`` keeps the values measured at the original tolerances; the saved
    ``coverage`` is kept (a comparison that was INCOMPLETE stays so).

    Raises:
        UsageError: the result holds no tensor pairs (re-judging nothing is not a pass).

    Example:
        >>> bool(recheck(CompareResult(), rtol=1e-3, atol=1e-5))
        Traceback (most recent call last):
        ...
        netparity.errors.UsageError: nothing to recheck: the saved result holds no tensor pairs
    """
    if not result.n_pairs():
        raise UsageError("nothing to recheck: the saved result holds no tensor pairs")
    return localise(engine.recheck(result, rtol=rtol, atol=atol), tolerances=False)
