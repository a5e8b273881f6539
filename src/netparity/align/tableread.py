"""A :class:`~netparity.align.table.CallTable` read straight from a trace index.

Alignment of two 100k-op traces must take seconds, and turning every one of ~500k index rows
into a :class:`~netparity.trace.schema.Record` already costs more than that. :func:`read_table`
reads only what alignment looks at, through the trace's column scans
(:meth:`Trace.scan <netparity.trace.reader.Trace.scan>`: NumPy arrays, text as codes into a
table of distinct values):

1. per record: sequence number, event, role, argument, shape, step, rank;
2. per call, from the records that may open its inputs (argument 0 or none): call indices,
   kind, op, native name, module path, direction;
3. ``source`` (a call's source is its first non-empty one);
4. the statistics of the records that may open a call's outputs.

Odd records (a call whose first record or first output is not argument 0) are looked up by
sequence number, so the table equals :func:`~netparity.align.table.table_from_calls` of the
eagerly read records -- which record is a call's first input or output follows
:func:`~netparity.align.model.calls_from_records` exactly. The calls are
:class:`~netparity.align.reading.LazyCall`\\ s: their records are read on first access.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from itertools import repeat
from typing import Any

import numpy as np

from netparity.align.features import (
    SigIds,
    leaf_id,
    make_feats,
    native_names_coded,
    object_array,
    sig_ids,
)
from netparity.align.model import Call, _arg_key
from netparity.align.passes import lookup_last
from netparity.align.reading import LazyCall, RecordSource, check_rank
from netparity.align.table import CallTable, Pools
from netparity.align.vocab import is_view_op, primary_input
from netparity.trace.reader import Trace
from netparity.trace.scan import Columns, Strings
from netparity.trace.schema import ROLES
from netparity.untrusted import parse_shape

_STATS5 = ["s_mean", "s_std", "s_min", "s_max", "s_norm"]
#: arguments that may open a run of inputs or outputs (the rest are looked up by seq)
_ARG0 = ["", "0"]
_NOT_INPUT = [r for r in ROLES if r != "input"]
_ARGC_0 = 48  # ord("0")
_CALL_INTS = ["seq", "call", "module_call"]
_CALL_TEXTS = ["op", "native", "module", "direction"]


def _argc(arg: str) -> int:
    """A single-character argument's code point (-2: no argument, -1: a longer one)."""
    return ord(arg) if len(arg) == 1 else (-2 if arg == "" else -1)


class _Index:
    """The records of one rank that the exact-match filters select."""

    def __init__(self, trace: Trace, rank: int, filters: dict[str, Any]):
        self.trace, self.rank, self.filters = trace, rank, filters

    def scan(self, cols: list[str], **more: Any) -> Columns:
        """Columns of the selected records (narrowed by ``more``), in sequence order."""
        return self.trace.scan(cols, rank=self.rank, **self.filters, **more)

    def by_seq(self, cols: list[str], seqs: list[int]) -> Columns:
        """Columns of the records with these sequence numbers, in sequence order (records of
        this selection: looked up within its steps, whose rows are all a scan then reads)."""
        step = self.filters.get("step")
        return self.trace.scan(cols, rank=self.rank, seq=seqs,
                               **({"step": step} if step is not None else {}))


class _Records:
    """The selected records in sequence order, grouped into calls the way
    :func:`~netparity.align.model.calls_from_records` groups them.

    ``order`` lists record positions call by call, inputs before outputs, each run in argument
    order; ``start``/``n_in``/``n_out`` locate a call's runs in it, ``first`` is each call's
    first record (calls numbered in execution order).
    """

    def __init__(self, ix: _Index):
        c = ix.scan(["seq", "event", "role", "arg", "shape", "step", "rank"])
        self.seq, self.event = c["seq"], c["event"]
        self.is_in = c["role"] == "input"
        self.argc = c["arg"].map(_argc, dtype=np.int64)
        self.step, self.rank = c["step"], c["rank"]
        self.shape_strs = c["shape"].values
        self.shape_id = c["shape"].codes.astype(np.int64)
        self._group()
        self._sort_args(ix)

    def _group(self) -> None:
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
        self.first = first[order]
        self.call_of = num[gid]
        self.run = self.call_of * 2 + (~self.is_in)
        self.order = np.argsort(self.run, kind="stable")
        counts = np.bincount(self.run, minlength=2 * len(first))
        self.run_start = np.concatenate(([0], np.cumsum(counts)))
        self.n_in, self.n_out = counts[0::2], counts[1::2]
        self.start = self.run_start[0:-1:2]

    def _sort_args(self, ix: _Index) -> None:
        """Runs of more than one record whose arguments are not single characters in ascending
        order get sorted by argument path, as ``calls_from_records`` sorts them."""
        r, a = self.run[self.order], self.argc[self.order]
        bad = (r[1:] == r[:-1]) & ((a[1:] < a[:-1]) | (a[1:] < 0) | (a[:-1] < 0))
        runs = np.unique(r[1:][bad]).tolist()
        if not runs:
            return
        spans = [(int(self.run_start[k]), int(self.run_start[k + 1])) for k in runs]
        pos = np.concatenate([self.order[s:e] for s, e in spans])
        got = ix.by_seq(["seq", "arg"], sorted(self.seq[pos].tolist()))
        args = dict(zip(got["seq"].tolist(), got["arg"].tolist()))
        for s, e in spans:
            seg = self.order[s:e].tolist()
            seg.sort(key=lambda p: _arg_key(args[int(self.seq[p])]))
            self.order[s:e] = seg

    def opening(self, outputs: bool) -> np.ndarray:
        """Record position of every call's first input (or output); -1 where it has none."""
        count = self.n_out if outputs else self.n_in
        at = self.start + (self.n_in if outputs else 0)
        return np.where(count > 0, self.order[np.minimum(at, max(len(self.order) - 1, 0))], -1)

    def output_arg0(self) -> np.ndarray:
        """Mask of the records that may open a call's outputs: argument 0 or none."""
        return ~self.is_in & ((self.argc == _ARGC_0) | (self.argc == -2))


class _CallInfo:
    """Call-level columns of every call, from its first record (``calls_from_records`` takes
    them from there). Text columns stay :class:`~netparity.trace.scan.Strings` (codes into a
    table of distinct values), so what depends on a value alone is computed once per value."""

    def __init__(self, ix: _Index, rec: _Records):
        cols = _CALL_INTS + ["kind"] + _CALL_TEXTS
        got = ix.scan(cols, role="input", arg=_ARG0)
        seqs = rec.seq[rec.first]
        at = _find(got["seq"], seqs)  # seq is unique: one match at most
        missing = np.nonzero(at < 0)[0]
        vals: dict[str, Any] = {c: got[c] for c in cols}
        if len(missing):  # first records that do not open the inputs
            more = ix.by_seq(cols, sorted(seqs[missing].tolist()))
            k = _find(more["seq"], seqs[missing])
            vals = {c: _concat(got[c], _take(more[c], k)) for c in cols}
            at[missing] = got.n + np.arange(len(missing))
        self.call, self.module_call = vals["call"][at], vals["module_call"][at]
        self.is_module = (vals["kind"] == "module")[at]
        # text columns in call order
        self.op, self.native, self.module, self.direction = (vals[c].take(at)
                                                             for c in _CALL_TEXTS)
        self.source = _first_sources(ix, rec)


def _find(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """For each query, the index of the equal key (keys unique), or -1; a scan's ``seq``
    column is increasing, so a binary search answers without sorting."""
    if not len(keys) or not len(queries) or np.any(keys[1:] <= keys[:-1]):
        return lookup_last(keys, queries)
    pos = np.minimum(np.searchsorted(keys, queries), len(keys) - 1)
    return np.where(keys[pos] == queries, pos, -1)


def _take(v: Any, idx: np.ndarray) -> Any:
    return v.take(idx) if isinstance(v, Strings) else v[idx]


def _concat(a: Any, b: Any) -> Any:
    """Two scanned columns one after the other (text: one table of distinct values)."""
    if not isinstance(a, Strings):
        return np.concatenate((a, b))
    table = {v: k for k, v in enumerate(a.values)}
    values = list(a.values)
    for v in b.values:
        if v not in table:
            table[v] = len(values)
            values.append(v)
    remap = np.array([table[v] for v in b.values] or [0], dtype=np.int32)
    return Strings(np.concatenate((a.codes, remap[b.codes])).astype(np.int32), values)


def _first_sources(ix: _Index, rec: _Records) -> np.ndarray:
    """Each call's first non-empty ``source`` (an object array of strings)."""
    got = ix.scan(["seq", "source"], nonempty="source")
    seqs = got["seq"]
    out = np.full(len(rec.first), "", dtype=object)
    if not len(seqs):
        return out
    srcs = got["source"].objects()
    calls = rec.call_of[_find(rec.seq, seqs)]
    _, first = np.unique(calls, return_index=True)
    out[calls[first]] = srcs[first]
    return out


class _Stats:
    """mean, std, min, max, RMS of records, as :func:`netparity.align.features._stat_row`
    computes them (NaN where unknown; RMS unknown when any statistic is NULL)."""

    def __init__(self, ix: _Index, rec: _Records, root: np.ndarray):
        # only the two columns a later look-up needs (N:M detection asks while aligning): not
        # the whole of ``rec``
        self.ix, self.seq, self.shape_id, self.root = ix, rec.seq, rec.shape_id, root

    def matrix(self, pos: np.ndarray, rows: np.ndarray, null: np.ndarray) -> np.ndarray:
        """``(len(pos), 5)`` for record positions ``pos`` (-1: none) given their ``(k, 5)``
        statistics ``rows`` and NULL flags."""
        out = np.full((len(pos), 5), math.nan)
        ok = pos >= 0
        out[ok, :4] = rows[ok, :4]
        rms = rows[ok, 4] / self.root[self.shape_id[pos[ok]]]
        out[ok, 4] = np.where(null[ok], math.nan, rms)
        return out

    def by_seq(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Statistics and NULL flags of records ``pos`` (all >= 0), looked up one by one."""
        seqs = self.seq[pos]
        got = self.ix.by_seq(["seq", *_STATS5], sorted(set(seqs.tolist())))
        k = _find(got["seq"], seqs)
        m, null = _matrix(got)
        return m[k], null[k]

    def openings(self, rec: _Records, pos: np.ndarray) -> np.ndarray:
        """Statistics of the records ``pos`` that open calls' outputs, in one scan of the
        records that may (argument 0 or none); others by sequence number."""
        may = rec.output_arg0()
        got = self.ix.scan(_STATS5, role=_NOT_INPUT, arg=_ARG0)
        m, nul = _matrix(got)
        if got.n != int(may.sum()):  # the index changed under us: look every one up
            may[:] = False
            m, nul = m[:0], nul[:0]
        row_of = np.full(len(rec.seq), -1, dtype=np.int64)
        row_of[np.nonzero(may)[0]] = np.arange(len(m))
        vals = np.full((len(pos), 5), math.nan)
        null = np.zeros(len(pos), dtype=bool)
        have = np.nonzero(pos >= 0)[0]
        r = row_of[pos[have]]
        vals[have[r >= 0]] = m[r[r >= 0]]
        null[have[r >= 0]] = nul[r[r >= 0]]
        odd = have[r < 0]
        if len(odd):
            vals[odd], null[odd] = self.by_seq(pos[odd])
        return self.matrix(pos, vals, null)


def _matrix(got: Columns) -> tuple[np.ndarray, np.ndarray]:
    """The five statistics as a ``(n, 5)`` float matrix (NaN where NULL or NaN) and whether
    any of a row's five is NULL (then its RMS is unknown)."""
    m = np.stack([got[c] for c in _STATS5], axis=1) if got.n else np.zeros((0, 5))
    null = np.zeros(got.n, dtype=bool)
    for c in _STATS5:
        null |= got.null(c)
    return m, null


class _FirstInputs:
    """First-input statistics of calls, read when N:M detection asks (or is about to ask:
    :meth:`warm`), and kept."""

    def __init__(self, stats: _Stats, pos: np.ndarray):
        self.stats, self.pos = stats, pos
        self.mat = np.full((len(pos), 5), math.nan)
        self.known = pos < 0  # calls without inputs: NaN

    def __call__(self, idx: np.ndarray) -> np.ndarray:
        self.warm(idx)
        return self.mat[idx]

    def warm(self, idx: np.ndarray) -> None:
        unknown = ~self.known[idx]
        if not unknown.any():  # the usual case: N:M detection asks again for warmed calls
            return
        need = np.unique(idx[unknown])
        if len(need):
            pos = self.pos[need]
            vals, null = self.stats.by_seq(pos)
            self.mat[need] = self.stats.matrix(pos, vals, null)
            self.known[need] = True


def read_table(
    trace: Trace,
    pools: Pools,
    *,
    rank: int = 0,
    step: int | Iterable[int] | None = None,
    direction: str | Iterable[str] | None = None,
    kinds: Iterable[str] = ("module", "op"),
) -> CallTable:
    """The :class:`CallTable` of one rank's calls of ``kinds``, read from the index.

    Its calls are :class:`~netparity.align.reading.LazyCall`\\ s: their records are read on
    first access.
    """
    check_rank(trace, rank)
    ix = _Index(trace, rank, {"step": step, "direction": direction, "kind": list(kinds)})
    rec = _Records(ix)
    info = _CallInfo(ix, rec)
    shape_tuples = [parse_shape(s) for s in rec.shape_strs]
    root = np.array([math.sqrt(math.prod(int(d) for d in t) or 1) for t in shape_tuples])
    stats = _Stats(ix, rec, root)
    fi, fo = rec.opening(outputs=False), rec.opening(outputs=True)
    ops = info.op.objects()
    lead = info.native.map(primary_input, dtype=np.int64)
    # the primary input of ops taking it later (addmm's x): N:M detection compares it
    late = np.nonzero((lead > 0) & (lead < rec.n_in))[0]
    primary = fi.copy()
    primary[late] = rec.order[rec.start[late] + lead[late]]
    sigs, sig_key, io = _signatures(rec, info, ops, shape_tuples, pools, lead)
    leaves = _leaves(info, pools)
    natives = native_names_coded(info.native.codes, info.native.values, ops)
    feats = make_feats(sigs, leaves, stats.openings(rec, fo), ops, natives,
                       _FirstInputs(stats, primary), view=info.op.map(is_view_op, dtype=bool),
                       ids=pools.ids)
    seq_at = np.where(fi >= 0, fi, fo)
    seq = np.where(seq_at >= 0, rec.seq[np.maximum(seq_at, 0)], -1) if len(seq_at) else seq_at
    source = RecordSource(trace, rank, step, direction, kinds)
    return CallTable(
        feats=feats, is_module=info.is_module, step=rec.step[rec.first],
        direction=pools.directions.coded(info.direction.codes, info.direction.values),
        module=pools.paths.coded(info.module.codes, info.module.values), call=info.call,
        module_call=info.module_call, seq=seq,
        make_calls=_CallMaker(rec, info, seq, sig_key, io, source), n_records=len(rec.seq))


def _leaves(info: _CallInfo, pools: Pools) -> np.ndarray:
    """Leaf ids of module calls (0 for ops): a path's leaf depends on its last token only, so
    it is interned once per distinct path (in order of first appearance, as a walk over the
    calls would intern them)."""
    out = np.zeros(len(info.is_module), dtype=np.int64)
    mods = np.nonzero(info.is_module)[0]
    if not len(mods):
        return out
    codes = info.module.codes[mods]
    u, first = np.unique(codes, return_index=True)
    seen = u[np.argsort(first, kind="stable")].tolist()
    values = info.module.values
    toks = [values[k].rpartition(".")[2] for k in seen]
    done = {tok: leaf_id(pools.ids, tok) for tok in dict.fromkeys(toks)}
    table = np.zeros(len(values), dtype=np.int64)
    table[seen] = np.fromiter(map(done.__getitem__, toks), dtype=np.int64, count=len(toks))
    out[mods] = table[codes]
    return out


def _signatures(rec: _Records, info: _CallInfo, ops: np.ndarray,
                shape_tuples: list[tuple[int, ...]], pools: Pools, lead: np.ndarray,
                ) -> tuple[np.ndarray, np.ndarray, list[tuple[Any, Any]]]:
    """Signature ids of every call, and (input shapes, output shapes) as a key per call into
    a table of the distinct ones.

    Calls with the same op and the same run of shape ids share one entry, found by hashing
    the runs with NumPy; the shape tuples and ids are built once per distinct signature."""
    n = len(rec.first)
    if not n:
        return np.zeros((0, 5), dtype=np.int64), np.zeros(0, dtype=np.int64), []
    # the primary input's position is part of the key: it decides the signature's input id
    op_ids = info.op.codes.astype(np.int64) * 8 + np.minimum(lead, 7)
    sid = rec.shape_id[rec.order]
    size = rec.n_in + rec.n_out
    key, rep = _run_keys(sid, rec.start, size, op_ids, rec.n_in)
    table: list[tuple[SigIds, tuple[Any, Any]]] = []
    for c in rep.tolist():
        s, ni, e = int(rec.start[c]), int(rec.n_in[c]), int(rec.start[c] + size[c])
        run = [shape_tuples[k] for k in sid[s:e].tolist()]
        ins, outs = tuple(run[:ni]), tuple(run[ni:])
        table.append((sig_ids(pools.ids, ops[c], ins, outs, int(lead[c])), (ins, outs)))
    sigs = np.array([t[0] for t in table], dtype=np.int64).reshape(len(table), 5)[key]
    return sigs, key, [t[1] for t in table]


def _run_keys(sid: np.ndarray, start: np.ndarray, size: np.ndarray, op_ids: np.ndarray,
              n_in: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group calls by (op, inputs count, run of shape ids): each call's group, and each
    group's first call (groups in order of first call).

    A 64-bit hash of the run proposes the groups; every call is then checked against its
    group's first call element by element, so a collision cannot merge different runs (it
    falls back to exact keys)."""
    n = len(start)
    pos = np.arange(len(sid)) - np.repeat(start, size)
    mult = np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        w = (sid.astype(np.uint64) + np.uint64(1)) * (pos.astype(np.uint64) * mult + np.uint64(1))
        h = np.add.reduceat(w * mult, start) if len(sid) else np.zeros(n, dtype=np.uint64)
        h = h ^ (op_ids.astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F)) ^ (
            n_in.astype(np.uint64) * np.uint64(0x165667B19E3779F9)) ^ size.astype(np.uint64)
    _, first, inv = np.unique(h, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    key, rep = rank[inv], np.sort(first)
    r = rep[key]  # the group's first call, per call
    same = (op_ids[r] == op_ids) & (n_in[r] == n_in) & (size[r] == size)
    if same.all():
        at = np.repeat(start[r], size) + pos
        ok = sid[at] == sid
        same &= np.logical_and.reduceat(ok, start) if len(ok) else same
    if same.all():
        return key, rep
    exact: dict[tuple[int, int, bytes], int] = {}
    keys = [exact.setdefault((o, ni, sid[s : s + z].tobytes()), len(exact))
            for o, ni, s, z in zip(op_ids.tolist(), n_in.tolist(), start.tolist(), size.tolist())]
    key = np.array(keys, dtype=np.int64)
    _, rep = np.unique(key, return_index=True)
    return key, rep


class _TableCall(LazyCall):
    """A :class:`LazyCall` of a :class:`_CallMaker`: what is the same for every call of a
    table (its record source; ``kind``, one class per kind; ``source`` when no call has one)
    and what only ``seq`` / ``to_json`` read (sequence numbers, shapes: behind the call's
    ``_row``) live on the class, so each call holds 10 (or 11) attributes, not 14, kept inline
    under the class's shared keys (:meth:`_CallMaker.__call__`). ``__dict__`` (made when first
    asked for) holds ``rank``, ``step`` and ``event`` (callers read the call's key there)."""

    _source: RecordSource
    _seq_a: np.ndarray  # per row of the table
    _sig_key: np.ndarray  # per row: its shapes in ``_io``
    _io: np.ndarray
    _key_a: np.ndarray  # per row: (rank, step, event), as in the call's ``__dict__``
    _row: int  # the call's row of the table

    def _load(self) -> None:
        d = self.__dict__
        ins, outs = self._source.get((d["rank"], d["step"], d["event"]))
        d.setdefault("inputs", ins)
        d.setdefault("outputs", outs)

    @property
    def seq(self) -> int:
        return int(self._seq_a[self._row])

    def _io_shapes(self) -> tuple[list[list[int]], list[list[int]]]:
        if "inputs" in self.__dict__:
            return Call._io_shapes(self)
        ins, outs = self._io[self._sig_key[self._row]]
        return [list(s) for s in ins], [list(s) for s in outs]


class _CallMaker:
    """Builds the calls of some rows as :class:`LazyCall`\\ s (:class:`_TableCall`), all at
    once: each column is taken at the rows in one NumPy step and the objects are made from the
    zipped lists (the dataclass ``__init__`` is skipped: a result holds up to hundreds of
    thousands of calls)."""

    def __init__(self, rec: _Records, info: _CallInfo, seq: np.ndarray, sig_key: np.ndarray,
                 io: list[tuple[Any, Any]], source: RecordSource):
        first = rec.first
        # each row's (rank, step, event): the calls' keys, for callers holding many calls (and
        # the columns the calls' own rank, step and event are taken from: no second copy)
        keys = np.stack([rec.rank[first], rec.step[first], rec.event[first]],
                        axis=1).astype(np.int64, copy=False)
        self.ints = [keys[:, 2], info.call, info.module_call, keys[:, 1], keys[:, 0]]
        self.texts = [(object_array(t.values), t.codes)
                      for t in (info.module, info.op, info.native, info.direction)]
        self.kind = info.is_module.astype(np.int8)
        # no call with a source (the usual case): "" on the class, not in every call's dict
        self.no_src = not any(info.source.tolist())
        self.src = None if self.no_src else info.source
        ios = np.empty(len(io), dtype=object)
        for k, v in enumerate(io):  # (tuple, tuple) items: not broadcast into the array
            ios[k] = v
        shared: dict[str, Any] = {"_source": source, "_seq_a": seq, "_sig_key": sig_key,
                                  "_io": ios, "_key_a": keys,
                                  "__qualname__": LazyCall.__qualname__}
        if self.no_src:
            shared["source"] = ""
        self.classes = np.array([type(LazyCall.__name__, (_TableCall,), {**shared, "kind": k})
                                 for k in ("op", "module")], dtype=object)

    def __call__(self, idx: np.ndarray) -> list[Call]:
        event, call, mcall, step, rank = (a[idx].tolist() for a in self.ints)
        module, op, native, direction = (table[codes[idx]].tolist()
                                         for table, codes in self.texts)
        new = object.__new__
        calls: list[Call] = []
        append = calls.append
        # attributes set one by one right after making each call, not a ``__dict__`` assigned:
        # CPython (3.11+) keeps them as values inline in the object, under keys its class
        # shares (~170 bytes a call instead of ~330); ``__dict__`` is made only when asked for
        srcs = repeat(None) if self.src is None else self.src[idx].tolist()
        for k, e, m, o, nt, c, mc, d, st, r, i, sr in zip(
                self.classes[self.kind[idx]].tolist(), event, module, op, native, call, mcall,
                direction, step, rank, idx.tolist(), srcs):
            x = new(k)
            x.event, x.module, x.op, x.native, x.call = e, m, o, nt, c
            x.module_call, x.direction, x.step, x.rank, x._row = mc, d, st, r, i
            if sr is not None:
                x.source = sr
            append(x)
        return calls
