"""A comparison's pairs of matched calls as columns, chunk by chunk, for the writers that list
every pair (the pair table's Parquet file, the CSV).

A 100k-op statistics comparison has ~300k pairs held by a
:class:`~netparity.compare.pairtable.PairTable` as columns: the two scans' rows, tolerance and
status codes and a :class:`~netparity.compare.metrics.StatsBatch`. Asking ``result.pairs``
for them made a :class:`~netparity.compare.results.PairResult`, its record pair and metrics
dict each (~5 s and ~0.5 GB) only to take them apart again into columns. :func:`chunks` reads
those pairs straight from the table's columns -- the values the objects would hold, the
metrics' JSON text and the CSV's metric cells exactly as the objects give them (the same
Python numbers, ``repr``-formatted as ``json`` does) -- and makes objects only of the pairs
that are not plain: held as objects already (judged one by one, re-judged), outside the
statistics batch, with a NaN/Inf count mismatch, or with a non-finite number in their metrics
(JSON spells those differently).

Example:
    >>> from netparity.compare.results import CompareResult
    >>> list(chunks(CompareResult(), metrics_json=True))
    []
"""

from __future__ import annotations

import gc
import json
import operator
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from netparity.compare.results import PairResult

#: the scalar fields of a pair (every field but ``metrics`` and ``fp64``), in
#: :class:`PairResult` order
FIELDS = ("key", "kind", "direction", "step", "rank", "role", "arg", "module", "op",
          "cand_module", "cand_op", "ref_dtype", "cand_dtype", "ref_shape", "cand_shape",
          "rtol", "atol", "tol_source", "status", "reason", "call", "order", "source")
#: the CSV's cells taken from a pair's metrics (a missing ``max_abs``/``max_rel``: the
#: statistics' lower bound)
METRIC_CELLS = ("basis", "max_abs", "mean_abs", "max_rel", "mean_rel", "rmse", "cosine",
                "within", "q50", "q90", "q99", "nan_mismatch", "inf_mismatch", "min_atol",
                "min_rtol")
#: pairs per chunk (bounds what a writer holds at once)
CHUNK = 1 << 16

# a statistics pair's metrics dict (StatsBatch._dict) as json.dumps spells it, finite numbers
_STATS_JSON = (
    '{"basis": "stats", "numel": %r, "rtol": %r, "atol": %r, "stat_diff": {"min": %r, '
    '"max": %r, "mean": %r, "std": %r, "norm": %r}, "max_abs_lb": %r, "max_rel_lb": %r, '
    '"ref_maxabs": %r, "ref_rms": %r, "nonfinite_counts": {"nan": [%r, %r], "posinf": '
    '[%r, %r], "neginf": [%r, %r]}, "nan_mismatch": 0, "inf_mismatch": 0, "min_atol": %r, '
    '"min_rtol": %r}')


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block: a writer allocates millions of
    small lists, tuples and strings (none of them in a cycle), and each burst of them set off
    collections that walked every live object of the comparison -- ~1.5 s of the ~6 s that
    writing a 100k-op comparison's JSON took, ~0.6 s of its CSV."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _plain(o: Any) -> Any:
    tolist = getattr(o, "tolist", None)  # NumPy scalars and arrays
    if callable(tolist):
        return tolist()
    return str(o)


def _encoder() -> Any:
    """``json.dumps`` (default separators, NaN allowed, NumPy values as numbers) of one
    object, json's C encoder made once instead of once per call."""
    enc = json.JSONEncoder(default=_plain, check_circular=False)
    try:
        from _json import make_encoder  # type: ignore[import-not-found]
    except ImportError:  # pragma: no cover - CPython has it
        return enc.encode
    it = make_encoder(None, enc.default, json.encoder.encode_basestring_ascii, None,
                      enc.key_separator, enc.item_separator, False, False, True)
    join = "".join
    return lambda o: join(it(o, 0))


_dumps = _encoder()


def metric_cell(m: dict[str, Any], c: str) -> Any:
    """The CSV cell ``c`` of a pair's metrics."""
    v = m.get(c)
    if v is None and c in ("max_abs", "max_rel"):
        v = m.get(c + "_lb")
    return v


def _pick(seq: Any, at: list[int]) -> list[Any]:
    if not at:
        return []
    if len(at) == 1:
        return [seq[at[0]]]
    return list(operator.itemgetter(*at)(seq))


_FIELDS_OF = operator.attrgetter(*FIELDS)


def _object_rows(pairs: list[PairResult], out: dict[str, list[Any]], *, metrics_json: bool,
                 csv_cells: bool, histograms: bool) -> None:
    """Append the columns of pair objects to ``out``."""
    if not pairs:
        return
    for c, vals in zip(FIELDS, zip(*map(_FIELDS_OF, pairs))):
        out[c].extend(vals)
    ms = [p.metrics for p in pairs]
    if metrics_json:
        out["error"].extend([float(p.error()) for p in pairs])
        if not histograms:
            ms = [m if "hist" not in m else {k: v for k, v in m.items() if k != "hist"}
                  for m in ms]
        out["metrics"].extend(map(_dumps, ms))
        out["fp64"].extend([None if p.fp64 is None else _dumps(p.fp64) for p in pairs])
    else:
        out["fp64"].extend([p.fp64 for p in pairs])
        out["error"].extend([None] * len(pairs))
    if csv_cells:
        for c in METRIC_CELLS:
            col = [m.get(c) for m in ms]
            if c in ("max_abs", "max_rel") and None in col:
                col = [metric_cell(m, c) for m in ms]
            out[c].extend(col)


def _empty(metrics_json: bool, csv_cells: bool) -> dict[str, list[Any]]:
    names = [*FIELDS, "fp64", "error"]
    if metrics_json:
        names.append("metrics")
    if csv_cells:
        names.extend(METRIC_CELLS)
    return {c: [] for c in names}


def chunks(result: Any, *, metrics_json: bool = False, csv_cells: bool = False,
           histograms: bool = True, size: int = CHUNK) -> Iterator[dict[str, list[Any]]]:
    """The pairs of matched calls (``result.pairs``, in that order) as columns, ``size``
    pairs at a time: one list per :data:`FIELDS` entry (shapes as lists or tuples of ints),
    ``fp64`` (None, or with ``metrics_json`` its JSON text), ``error``
    (:meth:`PairResult.error`; None where a pair object's is not wanted: no ``metrics_json``), with ``metrics_json`` ``metrics`` (the JSON text of each
    pair's metrics, ``hist`` left out unless ``histograms``), with ``csv_cells`` one list per
    :data:`METRIC_CELLS` entry. A result holding a pair table is read from its columns (its
    pairs are not made: ``result.pairs`` stays unasked)."""
    t = result.table
    if t is None or t.sides is None or t.batch is None:
        pairs = result.pairs
        for lo in range(0, len(pairs), size):
            out = _empty(metrics_json, csv_cells)
            _object_rows(pairs[lo:lo + size], out, metrics_json=metrics_json,
                         csv_cells=csv_cells, histograms=histograms)
            yield out
        return
    perm = np.asarray(t.perm, dtype=np.int64)
    plain = _plain_pairs(t)
    for lo in range(0, len(perm), size):
        yield _table_chunk(t, perm[lo:lo + size], plain, metrics_json=metrics_json,
                           csv_cells=csv_cells, histograms=histograms)


def _plain_pairs(t: Any) -> np.ndarray:
    """Mask of the table's pairs read from its columns (see the module docstring)."""
    b = t.batch
    made = np.zeros(t.n, dtype=bool)
    made[np.asarray(t.made, dtype=np.int64)] = True
    ok = (t.brow >= 0) & ~made
    j = t.brow[ok]
    nan_m, inf_m = b.nonfinite_mismatch()
    fin = np.isfinite(b.diffs).all(axis=1)
    for x in (b.lb, b.rel, b.mag, b.rms, b.min_atol, b.min_rtol, b.rtol, b.atol):
        fin &= np.isfinite(x)
    good = fin & (nan_m == 0) & (inf_m == 0)
    ok[ok] = good[j]
    return ok


def _text(col: Any, rows: np.ndarray) -> list[Any]:
    vals = np.empty(len(col.values), dtype=object)
    vals[:] = col.values
    return vals[col.codes[rows]].tolist()  # type: ignore[no-any-return]


def _table_chunk(t: Any, idx: np.ndarray, plain: np.ndarray, *, metrics_json: bool,
                 csv_cells: bool, histograms: bool) -> dict[str, list[Any]]:
    from netparity.compare.pairtable import CODE_STATUS
    from netparity.compare.verdicts import judge_stats

    n = len(idx)
    fast_m = plain[idx]
    fpos = np.nonzero(fast_m)[0]
    spos = np.nonzero(~fast_m)[0]
    f = idx[fpos]  # table positions of the plain pairs of the chunk
    fl = f.tolist()
    R, C = t.sides[0].cols, t.sides[1].cols
    r, c = t.rrow[f], t.crow[f]
    b = t.batch
    j = t.brow[f]
    fast: dict[str, list[Any]] = {
        "key": _pick(t.keys, fl), "call": _pick(t.call_keys, fl),
        "kind": _text(R["kind"], r), "direction": _text(R["direction"], r),
        "role": _text(R["role"], r), "arg": _text(R["arg"], r),
        "module": _text(R["module"], r), "op": _text(R["op"], r),
        "source": _text(R["source"], r), "ref_dtype": _text(R["dtype"], r),
        "cand_module": _text(C["module"], c), "cand_op": _text(C["op"], c),
        "cand_dtype": _text(C["dtype"], c),
        "step": R["step"][r].tolist(), "rank": R["rank"][r].tolist(),
        "order": R["seq"][r].tolist(),
        "ref_shape": _shapes(t.sides[0], r), "cand_shape": _shapes(t.sides[1], c),
        "rtol": t.rtol[f].tolist(), "atol": t.atol[f].tolist(),
        "tol_source": [x.source for x in _values(t.tols, f)],
        "fp64": [None] * len(fl), "error": b.rel[j].tolist(),
    }
    code = t.code[f]
    fast["status"] = np.array(CODE_STATUS, dtype=object)[code].tolist()
    lb, mag = b.lb[j].tolist(), b.mag[j].tolist()
    diffs = b.diffs[j].tolist()
    reason = [""] * len(fl)
    for k in np.nonzero(code != 0)[0].tolist():  # judge_stats's message, as the object has it
        d = diffs[k]
        m = {"stat_diff": dict(zip(("min", "max", "mean", "std", "norm"), d))}
        bound = fast["atol"][k] + fast["rtol"][k] * mag[k]
        reason[k] = judge_stats(m, lb[k], bound)[1]
    fast["reason"] = reason
    if metrics_json:
        rin, ain = _values(b.rtol_in, j), _values(b.atol_in, j)
        numel = b.numel[j].tolist()
        nr, nc = b.cnt_r[j].tolist(), b.cnt_c[j].tolist()
        rel, rms = fast["error"], b.rms[j].tolist()
        mina, minr = b.min_atol[j].tolist(), b.min_rtol[j].tolist()
        fast["metrics"] = [
            _STATS_JSON % (numel[k], rin[k], ain[k], *diffs[k], lb[k], rel[k], mag[k],
                           rms[k], nr[k][0], nc[k][0], nr[k][1], nc[k][1], nr[k][2],
                           nc[k][2], mina[k], minr[k])
            for k in range(len(fl))]
    if csv_cells:
        none = [None] * len(fl)
        zero = [0] * len(fl)
        fast.update(basis=["stats"] * len(fl), max_abs=lb, mean_abs=none,
                    max_rel=fast["error"], mean_rel=none, rmse=none, cosine=none,
                    within=none, q50=none, q90=none, q99=none, nan_mismatch=zero,
                    inf_mismatch=zero, min_atol=b.min_atol[j].tolist(),
                    min_rtol=b.min_rtol[j].tolist())
    if not len(spos):
        return fast
    slow = _empty(metrics_json, csv_cells)
    _object_rows([t.get(i) for i in idx[spos].tolist()], slow, metrics_json=metrics_json,
                 csv_cells=csv_cells, histograms=histograms)
    # the chunk's rows in order: the plain ones then the others, put in place in C
    order = np.argsort(np.concatenate([fpos, spos]), kind="stable").tolist()
    put = operator.itemgetter(*order) if n > 1 else (lambda x: x)
    return {name: list(put(vals + slow[name])) for name, vals in fast.items()}


def _values(v: Any, j: np.ndarray) -> list[Any]:
    """``v[j]`` of a list or an object array, as a list."""
    if isinstance(v, np.ndarray):
        return v[j].tolist()  # type: ignore[no-any-return]
    return _pick(v, j.tolist())


def _shapes(rows: Any, at: np.ndarray) -> list[Any]:
    """The shape of rows ``at`` of a scan (tuples of ints, one object per distinct shape)."""
    table = np.empty(len(rows.shapes()) + 1, dtype=object)
    table[:-1] = rows.shapes()
    return table[rows.cols["shape"].codes[at]].tolist()  # type: ignore[no-any-return]
