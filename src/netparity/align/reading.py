"""Reading a trace index for alignment: records (:func:`load_records`) and call tables
(:func:`read_table`).

Alignment of two 100k-op traces must take seconds, and turning every one of ~500k index rows
into a :class:`~netparity.trace.schema.Record` already costs more than that (SQLite hands
Python every column of every row as a separate object). :func:`read_table` therefore reads only
what alignment looks at, column by column: each column comes back from SQLite as one string
(``group_concat``) that NumPy parses, and floating-point statistics -- which must keep every bit
-- as rows, only for the records that hold a call's first output. The calls' records are read
later, all at once, the first time any of them is asked for (:class:`LazyCall`); the comparison
engine asks right away, ``netparity align`` never.

Which record is a call's first input or output follows :func:`~netparity.align.model.
calls_from_records` exactly (records grouped by ``(rank, step, event)``, ordered by sequence
number, then by argument path unless the positional arguments are already in order), so a table
read here equals :func:`~netparity.align.table.table_from_calls` of the records read eagerly.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
from collections.abc import Callable, Iterable
from dataclasses import fields
from typing import Any

import numpy as np

from netparity.align.features import (
    SigIds,
    leaf_id,
    make_feats,
    native_name,
    object_array,
    sig_ids,
)
from netparity.align.model import Call, _arg_key, calls_from_records
from netparity.align.table import CallTable, Pools
from netparity.errors import UsageError
from netparity.trace.reader import _SELECT, Trace
from netparity.trace.schema import COLUMN_NAMES, STAT_FIELDS, Record

_STAT_SLICE = slice(16, 16 + len(STAT_FIELDS))
#: the fast loader below unpacks rows by position and spells the statistics out
_FAST_STATS = ("min", "max", "mean", "std", "norm", "abs_sum", "nan", "posinf", "neginf", "zeros",
               "fp16_overflow")
_FAST_COLUMNS = ("seq", "step", "rank", "kind", "op", "native", "module", "call", "module_call",
                 "direction", "role", "arg", "event", "dtype", "shape",
                 *(f"s_{k}" for k in _FAST_STATS), "shard", "offset", "nbytes", "hash", "source",
                 "extra")
_FAST_SELECT = (
    "SELECT " + ", ".join(f'"{c}"' for c in _FAST_COLUMNS)
    # NaN statistics are stored as the text 'nan' (SQLite turns a NaN REAL into NULL): flag
    # the rare rows holding one in SQL instead of scanning every row's values in Python
    + ", ('nan' IN (" + ", ".join(f'"s_{k}"' for k in _FAST_STATS) + ")) FROM records"
)
_FAST_OK = STAT_FIELDS == _FAST_STATS and set(_FAST_COLUMNS) <= set(COLUMN_NAMES)


def _fast_records(rows: list[tuple[Any, ...]]) -> list[Record]:
    """Rows of the index to :class:`Record` objects.

    Same result as :func:`netparity.trace.schema.row_to_record`, about twice as fast on large
    traces: shapes are parsed once per distinct string and the dataclass ``__init__`` is skipped.
    The column order is the schema's (``COLUMN_NAMES``).
    """
    shapes: dict[str, tuple[int, ...]] = {}
    new = object.__new__
    out: list[Record] = []
    append = out.append
    for row in rows:
        s = row[14]
        shp = shapes.get(s)
        if shp is None:
            shp = shapes[s] = tuple(json.loads(s))
        vals = row[_STAT_SLICE]
        stats = dict(zip(STAT_FIELDS, vals))
        if "nan" in vals:
            for k, v in stats.items():
                if v == "nan":
                    stats[k] = float("nan")
        r = new(Record)
        r.__dict__ = {
            "kind": row[3], "op": row[4], "native": row[5], "module": row[6], "call": row[7],
            "module_call": row[8], "direction": row[9], "role": row[10], "arg": row[11],
            "dtype": row[13], "shape": shp, "step": row[1], "rank": row[2], "seq": row[0],
            "event": row[12], "stats": stats, "shard": row[27], "offset": row[28],
            "nbytes": row[29], "hash": row[30], "source": row[31],
            "extra": json.loads(row[32]) if row[32] else {},
        }
        append(r)
    return out


def _fast_records2(rows: list[tuple[Any, ...]]) -> list[Record]:
    """Rows of ``_FAST_SELECT`` to :class:`Record` objects (same result as ``row_to_record``).

    The per-row work is what remains after everything else was hoisted out: tuple unpacking
    into locals, a dict literal for the statistics (no NaN scan: SQL flags those rows), shapes
    parsed once per distinct string, and no dataclass ``__init__``. About 1.7x faster than
    :func:`_fast_records` on 100k-op traces.
    """
    shapes: dict[str, tuple[int, ...]] = {}
    new = object.__new__
    out: list[Record] = []
    append = out.append
    loads = json.loads
    nan = float("nan")
    for (seq, step, rank, kind, op, native, module, call, module_call, direction, role, arg,
         event, dtype, s, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, shard, offset, nbytes,
         hsh, source, extra, has_nan) in rows:
        shp = shapes.get(s)
        if shp is None:
            shp = shapes[s] = tuple(loads(s))
        if has_nan:
            stats = {k: (nan if v == "nan" else v) for k, v in
                     zip(_FAST_STATS, (a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10))}
        else:
            stats = {"min": a0, "max": a1, "mean": a2, "std": a3, "norm": a4, "abs_sum": a5,
                     "nan": a6, "posinf": a7, "neginf": a8, "zeros": a9, "fp16_overflow": a10}
        r = new(Record)
        r.__dict__ = {
            "kind": kind, "op": op, "native": native, "module": module, "call": call,
            "module_call": module_call, "direction": direction, "role": role, "arg": arg,
            "dtype": dtype, "shape": shp, "step": step, "rank": rank, "seq": seq,
            "event": event, "stats": stats, "shard": shard, "offset": offset,
            "nbytes": nbytes, "hash": hsh, "source": source,
            "extra": loads(extra) if extra else {},
        }
        append(r)
    return out


def load_records(
    trace: Trace,
    *,
    rank: int = 0,
    step: int | Iterable[int] | None = None,
    direction: str | Iterable[str] | None = None,
    kinds: Iterable[str] | None = None,
) -> list[Record]:
    """Records of one rank in execution order (what alignment uses: about twice as
    fast as :meth:`Trace.records <netparity.trace.reader.Trace.records>`).

    Example:
        >>> recs = load_records(open_trace("runs/ref"), kinds=("module",))   # doctest: +SKIP
    """
    _check_rank(trace, rank)
    cond, params = _where(step, direction, kinds)
    if _FAST_OK:
        return _fast_records2(trace._query(_FAST_SELECT + cond + " ORDER BY seq", params, rank))
    return _fast_records(trace._query(_SELECT + cond + " ORDER BY seq", params, rank))


def _check_rank(trace: Trace, rank: int) -> None:
    if rank not in trace.ranks:
        raise UsageError(f"{trace.path}: no rank {rank} (ranks: {trace.ranks})")


def _where(step: int | Iterable[int] | None, direction: str | Iterable[str] | None,
           kinds: Iterable[str] | None) -> tuple[str, list[Any]]:
    """The ``WHERE`` clause (never empty, so callers can append ``AND ...``) and its values."""
    where: list[str] = ["1"]
    params: list[Any] = []
    for col, val in (("step", step), ("direction", direction), ("kind", kinds)):
        if val is None:
            continue
        vals = [val] if isinstance(val, (str, int)) else list(val)
        where.append(f'"{col}" IN ({",".join("?" for _ in vals)})')
        params.extend(vals)
    return " WHERE " + " AND ".join(where), params


# ---- call tables ------------------------------------------------------------------------------

_SEP = "\x1e"  # joins text values in one group_concat; a value holding it falls back to rows
#: a call's first output (or input) statistics: mean, std, min, max, norm, any of them NULL
_STATS = ["seq", "s_mean", "s_std", "s_min", "s_max", "s_norm",
          "(s_mean IS NULL OR s_std IS NULL OR s_min IS NULL OR s_max IS NULL OR s_norm IS NULL)"]
#: records that may open their call's inputs or outputs: the only tensor or argument 0
_ARG0 = " AND arg IN ('', '0')"
_CALL_COLS = (["seq", "call", "module_call"], ["op", "native", "module", "direction"])
_BY_SEQ_CHUNK = 500  # values per "seq IN (...)" query, below every SQLite variable limit


class _Index:
    """The records of one rank that a ``WHERE`` clause selects, read column by column."""

    def __init__(self, trace: Trace, rank: int, cond: str, params: list[Any]):
        self.trace, self.rank, self.cond, self.params = trace, rank, cond, params

    def _run(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        return self.trace._query(sql, params, self.rank)

    def columns(self, ints: list[str], texts: list[str],
                extra: str = "") -> tuple[list[np.ndarray], list[list[str]]]:
        """Integer expressions as int64 arrays and text columns as lists, in one table scan.

        Each column is one ``group_concat`` string: SQLite builds it in C and NumPy or
        ``str.split`` takes it apart, instead of one Python object per value. All columns of
        one call come from the same scan, so they line up; order is the scan's, so callers
        read ``seq`` too and sort.
        """
        aggs = [f"group_concat({e})" for e in ints] + [f"group_concat({c}, char(30))"
                                                          for c in texts]
        sql = f"SELECT count(*), {', '.join(aggs)} FROM records{self.cond}{extra}"
        try:
            row = self.trace._conn(self.rank).execute(sql, self.params).fetchone()
        except sqlite3.DataError:  # longer than SQLite's string limit: read rows instead
            row = None
        if row is not None:
            n = int(row[0])
            ints_out = [_ints(s, n) for s in row[1 : 1 + len(ints)]]
            texts_out = [s.split(_SEP) if n else [] for s in row[1 + len(ints) :]]
            if all(a is not None for a in ints_out) and all(len(t) == n for t in texts_out):
                return [a for a in ints_out if a is not None], texts_out
        rows = self._run(f"SELECT {', '.join(ints + texts)} FROM records{self.cond}{extra}",
                         self.params)
        cols = list(zip(*rows)) if rows else [()] * (len(ints) + len(texts))
        return ([np.array(c, dtype=np.int64) for c in cols[: len(ints)]],
                [list(c) for c in cols[len(ints) :]])

    def rows(self, cols: list[str], extra: str) -> list[tuple[Any, ...]]:
        """Rows of ``cols`` for the selected records matching ``extra``, by sequence number."""
        return self._run(f"SELECT {', '.join(cols)} FROM records{self.cond}{extra} ORDER BY seq",
                         self.params)

    def rows_by_seq(self, cols: list[str], seqs: list[int]) -> list[tuple[Any, ...]]:
        """Rows of ``cols`` for the records with these sequence numbers (few: the odd ones)."""
        out: list[tuple[Any, ...]] = []
        for k in range(0, len(seqs), _BY_SEQ_CHUNK):
            part = seqs[k : k + _BY_SEQ_CHUNK]
            out += self._run(f"SELECT {', '.join(cols)} FROM records WHERE seq IN "
                             f"({','.join('?' * len(part))}) ORDER BY seq", part)
        return out


def _ints(s: str | None, n: int) -> np.ndarray | None:
    """A ``group_concat`` of ``n`` integers as an int64 array (None when it is not one)."""
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if s is None:
        return None
    a = np.fromstring(s, dtype=np.int64, sep=",")
    return a if len(a) == n else None


def _lookup(keys: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Positions of ``want`` in the sorted ``keys``, -1 where absent."""
    pos = np.searchsorted(keys, want)
    pos = np.minimum(pos, max(len(keys) - 1, 0))
    hit = (keys[pos] == want) if len(keys) else np.zeros(len(want), dtype=bool)
    return np.where(hit, pos, -1)


class _Records:
    """The selected records in sequence order, grouped into calls the way
    :func:`~netparity.align.model.calls_from_records` groups them.

    ``order`` lists record positions call by call, inputs before outputs, each run in argument
    order; ``start``/``n_in``/``n_out`` locate a call's runs in it.
    """

    def __init__(self, ix: _Index, cols: list[np.ndarray], shapes: list[str]):
        seq, event, step, rank, is_mod, is_in, argc = cols
        o = np.argsort(seq, kind="stable")
        self.seq, self.is_mod, self.is_in = seq[o], is_mod[o].astype(bool), is_in[o].astype(bool)
        self.event, self.step, self.rank = event[o], step[o], rank[o]
        self.shape_strs, shape_id = _intern(shapes)
        self.shape_id = shape_id[o]
        self._group(argc[o])
        self._sort_args(ix)

    def _group(self, argc: np.ndarray) -> None:
        """Call of every record (calls numbered by first record), and the order inside calls."""
        n = len(self.seq)
        lex = np.lexsort((self.event, self.step, self.rank))
        new = np.zeros(n, dtype=bool)
        if n:
            new[0] = True
            for k in (self.rank, self.step, self.event):
                new[1:] |= k[lex][1:] != k[lex][:-1]
        gid = np.empty(n, dtype=np.int64)
        gid[lex] = np.cumsum(new) - 1
        first = lex[new]  # lexsort is stable: the first record of each group
        order = np.argsort(first, kind="stable")
        num = np.empty(len(first), dtype=np.int64)
        num[order] = np.arange(len(first))
        self.first = first[order]  # first record of every call, calls in execution order
        self.call_of = num[gid]
        run = self.call_of * 2 + (~self.is_in)
        self.order = np.argsort(run, kind="stable")
        counts = np.bincount(run, minlength=2 * len(first))
        self.run_start = np.concatenate(([0], np.cumsum(counts)))
        self.n_in, self.n_out = counts[0::2], counts[1::2]
        self.start = np.cumsum(self.n_in + self.n_out) - self.n_in - self.n_out
        # runs of more than one record whose arguments are not single characters in
        # ascending order get sorted by argument path, as calls_from_records does
        r, a = run[self.order], argc[self.order]
        same = r[1:] == r[:-1]
        bad = same & ((a[1:] < a[:-1]) | (a[1:] < 0) | (a[:-1] < 0))
        self.unsorted_runs = np.unique(r[1:][bad])

    def _sort_args(self, ix: _Index) -> None:
        if not len(self.unsorted_runs):
            return
        starts = self.run_start
        spans = [(int(starts[r]), int(starts[r + 1])) for r in self.unsorted_runs.tolist()]
        pos = np.concatenate([self.order[s:e] for s, e in spans])
        args = dict(ix.rows_by_seq(["seq", "arg"], self.seq[pos].tolist()))
        for s, e in spans:
            seg = self.order[s:e].tolist()
            seg.sort(key=lambda p: _arg_key(args[int(self.seq[p])]))
            self.order[s:e] = seg

    def first_in(self) -> np.ndarray:
        """Record position of every call's first input (-1 when it has none)."""
        return np.where(self.n_in > 0, self.order[np.minimum(self.start, len(self.order) - 1)],
                        -1)

    def first_out(self) -> np.ndarray:
        """Record position of every call's first output (-1 when it has none)."""
        at = np.minimum(self.start + self.n_in, len(self.order) - 1)
        return np.where(self.n_out > 0, self.order[at], -1)


def _intern(values: list[str]) -> tuple[list[str], np.ndarray]:
    """Distinct values (first-seen order) and each value's index among them."""
    d: dict[str, int] = {}
    ids = [d.setdefault(v, len(d)) for v in values]
    return list(d), np.array(ids, dtype=np.int64)


def _by_seq(ix: _Index, cols: list[str], extra: str, seqs: np.ndarray) -> list[tuple[Any, ...]]:
    """Rows of ``cols`` (``seq`` first) for records ``seqs``: one scan of the records matching
    ``extra``, which hold nearly all of them, plus a look-up of those that do not."""
    rows = ix.rows(cols, extra)
    have = np.array([r[0] for r in rows], dtype=np.int64)
    pos = _lookup(have, seqs)
    missing = sorted(set(seqs[pos < 0].tolist()))
    if missing:
        rows = sorted(rows + ix.rows_by_seq(cols, missing), key=lambda r: int(r[0]))
    return rows


def _stat_matrix(rows: list[tuple[Any, ...]], seqs: np.ndarray, root: np.ndarray,
                 shape_id: np.ndarray) -> np.ndarray:
    """``(len(seqs), 5)`` mean, std, min, max, rms of records ``seqs`` (-1: none, all NaN) from
    ``_STATS`` rows, as :func:`netparity.align.features._stat_row` computes them."""
    out = np.full((len(seqs), 5), math.nan)
    if not rows:
        return out
    m = np.array(rows, dtype=np.float64).reshape(len(rows), 7)  # 'nan' text and NULL: NaN
    have = m[:, 0].astype(np.int64)
    pos = _lookup(have, seqs)
    ok = (seqs >= 0) & (pos >= 0)
    v = m[pos[ok]]
    out[ok, :4] = v[:, 1:5]
    rms = v[:, 5] / root[shape_id[ok]]
    out[ok, 4] = np.where(v[:, 6] != 0, math.nan, rms)
    return out


def read_table(
    trace: Trace,
    pools: Pools,
    *,
    rank: int = 0,
    step: int | Iterable[int] | None = None,
    direction: str | Iterable[str] | None = None,
    kinds: Iterable[str] = ("module", "op"),
) -> CallTable:
    """The :class:`CallTable` of one rank's module/op calls (``kinds``), read from the index.

    Its calls are :class:`LazyCall`s: their records are read on first access.
    """
    _check_rank(trace, rank)
    cond, params = _where(step, direction, kinds)
    ix = _Index(trace, rank, cond, params)
    cols, (shapes,) = ix.columns(
        ["seq", "event", "step", "rank", "kind = 'module'", "role = 'input'",
         "CASE WHEN length(arg) = 1 THEN unicode(arg) ELSE -1 END"], ["shape"])
    rec = _Records(ix, cols, shapes)
    info = _call_info(ix, rec)
    source = _RecordSource(trace, rank, step, direction, kinds)
    return _assemble(ix, rec, info, pools, source)


def _call_info(ix: _Index, rec: _Records) -> dict[str, Any]:
    """Call-level columns, taken from each call's first record (as ``calls_from_records`` does).

    Read for the records that open a call's inputs (nearly always its first record) in one
    scan; the first records of the other calls by sequence number."""
    ints, texts = ix.columns(*_CALL_COLS, extra=" AND role = 'input'" + _ARG0)
    seqs = rec.seq[rec.first]
    o = np.argsort(ints[0], kind="stable")
    pos = _lookup(ints[0][o], seqs)
    at = np.where(pos >= 0, o[np.maximum(pos, 0)], -1)
    ints = [np.asarray(a) for a in ints]
    texts = [list(t) for t in texts]
    missing = np.nonzero(at < 0)[0]
    if len(missing):
        rows = ix.rows_by_seq(_CALL_COLS[0] + _CALL_COLS[1], seqs[missing].tolist())
        got = {int(r[0]): r for r in rows}
        base = len(ints[0])
        for k in range(len(_CALL_COLS[0])):
            ints[k] = np.concatenate((ints[k], np.array(
                [got[int(x)][k] for x in seqs[missing]], dtype=np.int64)))
        for k in range(len(_CALL_COLS[1])):
            texts[k] += [got[int(x)][3 + k] for x in seqs[missing]]
        at[missing] = base + np.arange(len(missing))
    sel = at.tolist()
    info: dict[str, Any] = {"call": ints[1][at], "module_call": ints[2][at]}
    for name, t in zip(_CALL_COLS[1], texts):
        info[name] = [t[k] for k in sel]
    src_ints, (src,) = ix.columns(["seq"], ["source"], extra=" AND source <> ''")
    info["source"] = _first_sources(rec, src_ints[0], src)
    return info


def _first_sources(rec: _Records, seqs: np.ndarray, srcs: list[str]) -> list[str]:
    """Each call's first non-empty ``source`` (records with one are given by ``seqs``)."""
    out = [""] * len(rec.first)
    if not len(seqs):
        return out
    o = np.argsort(seqs, kind="stable")
    pos = _lookup(rec.seq, seqs[o])
    calls = rec.call_of[pos]
    _, first = np.unique(calls, return_index=True)
    for c, k in zip(calls[first].tolist(), o[first].tolist()):
        out[c] = srcs[k]
    return out


def _assemble(ix: _Index, rec: _Records, info: dict[str, Any], pools: Pools,
              source: _RecordSource) -> CallTable:
    """Features and call columns of the table (see :func:`read_table`)."""
    n = len(rec.first)
    shape_tuples = [tuple(json.loads(s)) for s in rec.shape_strs]
    root = np.array([math.sqrt(math.prod(int(d) for d in t) or 1) for t in shape_tuples])
    fi, fo = rec.first_in(), rec.first_out()
    seq_fi = np.where(fi >= 0, rec.seq[np.maximum(fi, 0)], -1) if n else fi
    seq_fo = np.where(fo >= 0, rec.seq[np.maximum(fo, 0)], -1) if n else fo
    stats = _stat_matrix(_by_seq(ix, _STATS, " AND role <> 'input'" + _ARG0, seq_fo[fo >= 0]),
                         seq_fo, root, rec.shape_id[np.maximum(fo, 0)] if n else fo)
    is_module = rec.is_mod[rec.first]
    sigs, shapes, leaves = _signatures(rec, info, is_module, shape_tuples, pools)
    ops = info["op"]
    natives = object_array(_native_names(info["native"], ops))
    first_inputs = _FirstInputs(ix, seq_fi, np.where(fi >= 0, rec.shape_id[np.maximum(fi, 0)],
                                                     0) if n else fi, root)
    feats = make_feats(sigs, leaves, stats, object_array(ops), natives, first_inputs)
    module = pools.paths.many(info["module"])
    direction = pools.directions.many(info["direction"])
    seq = np.where(rec.n_in > 0, seq_fi, seq_fo)
    make = _call_maker(rec, info, is_module, seq, shapes, source)
    return CallTable(feats=feats, is_module=is_module, step=rec.step[rec.first],
                     direction=direction, module=module, call=info["call"],
                     module_call=info["module_call"], seq=seq, make_call=make)


def _native_names(natives: list[str], ops: list[str]) -> list[str]:
    """Normalised native names, each distinct one normalised once."""
    done: dict[str, str] = {}
    out = []
    for nat, op in zip(natives, ops):
        v = done.get(nat) if nat else op
        if v is None:
            v = done[nat] = native_name(nat, op)
        out.append(v)
    return out


def _call_maker(rec: _Records, info: dict[str, Any], is_module: np.ndarray, seq: np.ndarray,
                shapes: list[tuple[Any, Any]], source: _RecordSource) -> Callable[[int], Call]:
    """A function building call ``i`` as a :class:`LazyCall` (the dataclass ``__init__`` is
    skipped: a results list holds up to hundreds of thousands of calls)."""
    first = rec.first
    event, step, rank = (rec.event[first].tolist(), rec.step[first].tolist(),
                         rec.rank[first].tolist())
    kind = ["module" if m else "op" for m in is_module.tolist()]
    module, op, native, direction, src = (info["module"], info["op"], info["native"],
                                          info["direction"], info["source"])
    call, mcall, seqs = info["call"].tolist(), info["module_call"].tolist(), seq.tolist()
    new = object.__new__

    def make(i: int) -> Call:
        c = new(LazyCall)
        c.__dict__ = {
            "event": event[i], "kind": kind[i], "module": module[i], "op": op[i],
            "native": native[i], "call": call[i], "module_call": mcall[i],
            "direction": direction[i], "step": step[i], "rank": rank[i], "source": src[i],
            "_seq": seqs[i], "_shapes": shapes[i], "_source": source,
        }
        return c

    return make


def _signatures(rec: _Records, info: dict[str, Any], is_module: np.ndarray,
                shape_tuples: list[tuple[int, ...]], pools: Pools,
                ) -> tuple[list[SigIds], list[tuple[Any, Any]], np.ndarray]:
    """Signature ids, (input shapes, output shapes) and leaf ids of every call.

    A call's shapes are a run of shape ids in ``rec.order``; equal runs (as bytes) with the
    same op share one entry, so the shape tuples are built once per distinct signature."""
    ids = pools.ids
    sid = rec.shape_id[rec.order].astype(np.int32)
    buf = sid.tobytes()
    b0 = (rec.start * 4).tolist()
    b1 = ((rec.start + rec.n_in + rec.n_out) * 4).tolist()
    cache: dict[tuple[str, int, bytes], tuple[SigIds, tuple[Any, Any]]] = {}
    leaf_cache: dict[str, int] = {}
    sigs: list[SigIds] = []
    shapes: list[tuple[Any, Any]] = []
    leaves = [0] * len(b0)
    for i, (op, ni, x, y, mod, ism) in enumerate(zip(info["op"], rec.n_in.tolist(), b0, b1,
                                                     info["module"], is_module.tolist())):
        key = (op, ni, buf[x:y])
        f = cache.get(key)
        if f is None:
            run = [shape_tuples[k] for k in sid[x // 4 : y // 4].tolist()]
            ins, outs = tuple(run[:ni]), tuple(run[ni:])
            f = cache[key] = (sig_ids(ids, op, ins, outs), (ins, outs))
        sigs.append(f[0])
        shapes.append(f[1])
        if ism:
            lf = leaf_cache.get(mod)
            if lf is None:
                lf = leaf_cache[mod] = leaf_id(ids, mod)
            leaves[i] = lf
    return sigs, shapes, np.array(leaves, dtype=np.int64)


class _FirstInputs:
    """First-input statistics of calls, read from the index when N:M detection asks (or is
    about to ask: :meth:`warm`) and kept."""

    def __init__(self, ix: _Index, seqs: np.ndarray, shape_id: np.ndarray, root: np.ndarray):
        self.ix, self.seqs, self.shape_id, self.root = ix, seqs, shape_id, root
        self.mat = np.full((len(seqs), 5), math.nan)
        self.known = seqs < 0  # calls without inputs: NaN

    def __call__(self, idx: np.ndarray) -> np.ndarray:
        self.warm(idx)
        return self.mat[idx]

    def warm(self, idx: np.ndarray) -> None:
        need = np.unique(idx[~self.known[idx]])
        if not len(need):
            return
        rows = self.ix.rows_by_seq(_STATS, self.seqs[need].tolist())
        self.mat[need] = _stat_matrix(rows, self.seqs[need], self.root, self.shape_id[need])
        self.known[need] = True


# ---- calls whose records are read on first access ----------------------------------------------

class _RecordSource:
    """Reads the records of one side's calls, all at once, when the first of them is asked for
    (the comparison engine asks for nearly all; ``netparity align`` for none)."""

    def __init__(self, trace: Trace, rank: int, step: Any, direction: Any, kinds: Any):
        self.trace, self.rank, self.step, self.direction = trace, rank, step, direction
        self.kinds = tuple(kinds)
        self.lock = threading.Lock()
        self.calls: dict[tuple[int, int, int], Call] | None = None

    def get(self, key: tuple[int, int, int]) -> tuple[list[Record], list[Record]]:
        with self.lock:
            if self.calls is None:
                recs = load_records(self.trace, rank=self.rank, step=self.step,
                                    direction=self.direction, kinds=self.kinds)
                self.calls = {(c.rank, c.step, c.event): c for c in calls_from_records(recs)}
        c = self.calls.get(key)
        return (c.inputs, c.outputs) if c is not None else ([], [])


class LazyCall(Call):
    """A :class:`~netparity.align.model.Call` of :func:`read_table`: ``inputs`` and ``outputs``
    are read from the trace on first access (the trace directory must still exist then);
    ``seq`` and ``to_json`` need no records. Pickles and copies as a plain ``Call``."""

    @property  # type: ignore[override]
    def inputs(self) -> list[Record]:
        if "inputs" not in self.__dict__:
            self._load()
        return self.__dict__["inputs"]  # type: ignore[no-any-return]

    @inputs.setter
    def inputs(self, value: list[Record]) -> None:
        self.__dict__["inputs"] = value

    @property  # type: ignore[override]
    def outputs(self) -> list[Record]:
        if "outputs" not in self.__dict__:
            self._load()
        return self.__dict__["outputs"]  # type: ignore[no-any-return]

    @outputs.setter
    def outputs(self, value: list[Record]) -> None:
        self.__dict__["outputs"] = value

    def _load(self) -> None:
        d = self.__dict__
        ins, outs = d["_source"].get((d["rank"], d["step"], d["event"]))
        d.setdefault("inputs", ins)
        d.setdefault("outputs", outs)

    @property
    def seq(self) -> int:
        return int(self.__dict__["_seq"])

    def _io_shapes(self) -> tuple[list[list[int]], list[list[int]]]:
        if "inputs" in self.__dict__:
            return super()._io_shapes()
        ins, outs = self.__dict__["_shapes"]
        return [list(s) for s in ins], [list(s) for s in outs]

    def __reduce__(self) -> tuple[Any, ...]:
        return (Call, tuple(getattr(self, f.name) for f in fields(Call)))
