"""The tensor pairs of matched calls as row numbers of the two traces' scans (the engine's
row mode): no record object per tensor for the common case.

A statistics comparison of two 100k-op traces pairs ~300k tensors; making a record for each
(and a Python tuple, key lookups and a tolerance resolution per pair) was a third of its time,
while what is compared are rows of two column scans
(:class:`~netparity.trace.fastrows.ScannedRows`, which the alignment's
:class:`~netparity.align.reading.RecordSource` reads once per side). So, when every call of an
alignment comes from one scan per side, the engine pairs the tensors of a 1:1 matched call as
row numbers -- :func:`~netparity.compare.argpairs.pair_tensors`' positional rule (as many
tensors on both sides, and the same native op or the same shapes) -- and gives the rest (N:M
groups, calls whose tensors pair by shape and value) to ``pair_tensors`` with records, as
before, then keeps their rows too. Tolerances are resolved once per distinct signature (the
dtypes, the direction; with named overrides also the names), statistics metrics and RMS
scaling are computed from the scans' statistic arrays, and the
:class:`~netparity.compare.pairtable.PairTable` holds row numbers (records are made for the
few pairs someone asks for).

The values are those of the record path, bit for bit: every quantity reads the same columns
the records would have been made of (``tests/compare/test_pairtable.py`` checks it).
"""

from __future__ import annotations

import itertools
import operator
from typing import Any

import numpy as np

from netparity.align.features import row_distance
from netparity.align.reading import CallSpans, pack_keys
from netparity.compare.argpairs import external_inputs, pair_by_value
from netparity.compare.metrics import table_rms, table_stat_rows
from netparity.compare.tolerances import Tol, Tolerances
from netparity.trace.fastrows import ScannedRows
from netparity.trace.schema import Record

#: the columns a pair key is made of (besides the event): equal on every row of a call whose
#: key prefix the engine builds from the call (a call with a row that differs: record path)
_KEY_COLUMNS = ("step", "rank", "kind", "direction", "module", "op", "call")


class Side:
    """One trace's side: its scan, the grouped order of its rows and each call's span in it
    (:meth:`RecordSource.rows <netparity.align.reading.RecordSource.rows>`), and the
    per-row arrays the engine reads (``order_a``: ``order`` as an array, ``shape_a``: each
    row's shape as an id shared by both sides, ``uniform_a``: see :meth:`_uniform`; ``seq``
    and ``shape`` as lists, made on first use)."""

    def __init__(self, source: Any, got: tuple[ScannedRows, np.ndarray, CallSpans],
                 shape_ids: dict[tuple[int, ...], int]):
        self.source = source
        self.rows, self.order_a, self.spans = got
        cols = self.rows.cols
        self.cols = cols
        self.table = self.rows.table
        #: the calls' ``(rank, step, event)`` keys (sorted) and ``(start, first output, end)``
        #: spans
        self.span_keys = self.spans.keys
        self.span_vals = self.spans.spans
        self._order: list[int] | None = None
        # shapes as ids shared by both sides (equal ids: equal shape tuples)
        gid = np.array([shape_ids.setdefault(s, len(shape_ids)) for s in self.rows.shapes()]
                       or [0], dtype=np.int64)
        self.shape_a = gid[cols["shape"].codes] if cols.n else np.zeros(0, dtype=np.int64)
        self.uniform_a = self._uniform()
        self._seq: list[int] | None = None
        self._shape: list[int] | None = None

    def done_pairing(self) -> None:
        """Drop what only pairing reads -- the record source, the grouped order and the
        calls' spans (~0.2 GB a side at 1M ops) -- keeping the scan and the per-row arrays the
        tolerances and the statistics batch read (``cols``, ``rows``, ``table``, ``shape_a``)."""
        z = np.zeros(0, dtype=np.int64)
        self.source = None
        self.order_a = self.uniform_a = z
        self.spans = CallSpans(z.reshape(0, 3), z.reshape(0, 3), z)
        self.span_keys, self.span_vals = self.spans.keys, self.spans.spans
        self._order = self._seq = None

    @property
    def order(self) -> list[int]:
        """``order_a`` as a list (made on first use)."""
        if self._order is None:
            self._order = self.order_a.tolist()
        return self._order

    @property
    def seq(self) -> list[int]:
        """Each row's sequence number."""
        if self._seq is None:
            self._seq = self.cols["seq"].tolist()
        return self._seq

    @property
    def shape(self) -> list[int]:
        """Each row's shape id (``shape_a`` as a list)."""
        if self._shape is None:
            self._shape = self.shape_a.tolist()
        return self._shape

    def span_index(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The calls' keys packed (:func:`~netparity.align.reading.pack_keys`; sorted), with their spans; None when a
        key does not pack."""
        keys = self.spans.packed()
        return None if keys is None else (keys, self.span_vals)

    @property
    def uniform(self) -> np.ndarray:
        return self.uniform_a

    def _uniform(self) -> np.ndarray:
        """Per position of ``order`` that starts a call: whether every row of the call holds
        the call's key columns (those of its first row in execution order, which the call's
        fields come from)."""
        n = len(self.order_a)
        out = np.zeros(n, dtype=bool)
        if not n or not len(self.spans):
            return out
        o = self.order_a
        sp = self.span_vals
        if len(sp) > 1 and (sp[1:, 0] <= sp[:-1, 0]).any():  # sorted as the tuples sort
            sp = sp[np.lexsort((sp[:, 2], sp[:, 1], sp[:, 0]))]
        starts, lens = sp[:, 0], sp[:, 2] - sp[:, 0]
        if int(lens.sum()) != n or (lens <= 0).any():  # not a partition: no call is uniform
            return out
        first = np.repeat(np.minimum.reduceat(o, starts), lens)
        same = np.ones(n, dtype=bool)
        for c in _KEY_COLUMNS:
            v = self.cols[c]
            a = v if isinstance(v, np.ndarray) else v.codes
            same &= a[o] == a[first]
        out[starts] = np.logical_and.reduceat(same, starts)
        return out

    def row_of(self, rec: Record) -> int:
        """The row of a record this side's scan made (-1 for any other record)."""
        d = rec.__dict__
        if d.get("_table") is not self.table or "_row" not in d:
            return -1
        return int(d["_row"])

    def text(self, name: str, rows: np.ndarray) -> np.ndarray:
        """Codes of a text column at ``rows`` (into ``self.cols[name].values``)."""
        return self.cols[name].codes[rows]  # type: ignore[no-any-return]


_SOURCE = operator.attrgetter("_source")
_REF = operator.attrgetter("ref")
_CAND = operator.attrgetter("cand")


def sides_of(al: Any) -> tuple[Side, Side] | None:
    """The two sides of an alignment whose calls all come from one column scan per side
    (:class:`~netparity.align.reading.LazyCall`\\ s of one source each); None otherwise."""
    if not al.matches:
        return None
    src_r = getattr(al.matches[0].ref[0], "_source", None)
    src_c = getattr(al.matches[0].cand[0], "_source", None)
    if src_r is None or src_c is None or not hasattr(src_r, "rows"):
        return None
    for src, which in ((src_r, "ref"), (src_c, "cand")):
        calls = itertools.chain.from_iterable(map(operator.attrgetter(which), al.matches))
        try:
            # the calls' classes hold their source (a few classes for ~10^5 calls); a call
            # with its own ``_source`` is checked one by one
            classes = set(map(type, calls))
            if any("_source" not in vars(k) for k in classes):
                calls = itertools.chain.from_iterable(map(operator.attrgetter(which),
                                                          al.matches))
                if any(s is not src for s in set(map(_SOURCE, calls))):
                    return None
            elif any(vars(k)["_source"] is not src for k in classes):
                return None
        except (AttributeError, TypeError):  # a call of no source (or an odd one)
            return None
    got_r, got_c = src_r.rows(), src_c.rows()
    if got_r is None or got_c is None:
        return None
    ids: dict[tuple[int, ...], int] = {}
    return Side(src_r, got_r, ids), Side(src_c, got_c, ids)


def _codes(side: Side, name: str, rows: np.ndarray, pool: dict[str, int]) -> np.ndarray:
    """A text column at ``rows`` as ids shared by both sides (``pool``)."""
    vals = side.cols[name].values
    table = np.array([pool.setdefault(v, len(pool)) for v in vals] or [0], dtype=np.int64)
    return table[side.cols[name].codes[rows]]  # type: ignore[no-any-return]


def resolve_tolerances(tols: Tolerances, ref: Side, cand: Side, rr: np.ndarray,
                       cr: np.ndarray) -> tuple[list[tuple[Tol, bool]], np.ndarray]:
    """:meth:`Tolerances.resolve_unscaled
    <netparity.compare.tolerances.Tolerances.resolve_unscaled>` of every pair, resolved once
    per distinct signature (what the resolution reads: the dtypes, whether the reference is
    a gradient/backward tensor, and with named overrides the names) on one pair's records:
    the distinct results and each pair's index into them."""
    n = len(rr)
    if not n:
        return [], np.zeros(0, dtype=np.int64)
    pool: dict[str, int] = {}
    back = ((ref.text("direction", rr) == ref.cols["direction"].code("backward"))
            | np.isin(ref.text("kind", rr),
                      [ref.cols["kind"].code("grad"), ref.cols["kind"].code("param")]))
    parts = [_codes(ref, "dtype", rr, pool), _codes(cand, "dtype", cr, pool),
             back.astype(np.int64)]
    if tols._named:
        parts += [_codes(ref, c, rr, pool) for c in ("module", "op", "native")]
        parts += [_codes(cand, c, cr, pool) for c in ("module", "native")]
    # one int64 per pair (ids below 2**20 each, at most three of them): np.unique on rows
    # otherwise sorts tuples
    width = 1 << 20
    if len(parts) == 3 and len(pool) < width:
        key = (parts[0] * width + parts[1]) * 2 + parts[2]
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    else:
        _, first, inv = np.unique(np.stack(parts, axis=1), axis=0, return_index=True,
                                  return_inverse=True)
    got = [tols.resolve_unscaled(ref.rows.records([int(rr[i])])[0],
                                 cand.rows.records([int(cr[i])])[0]) for i in first.tolist()]
    return got, inv.reshape(-1)


def _complex(side: Side, rows: np.ndarray) -> np.ndarray:
    vals = side.cols["dtype"].values
    table = np.array([v.startswith("complex") for v in vals] or [False], dtype=bool)
    return table[side.cols["dtype"].codes[rows]]  # type: ignore[no-any-return]


def rms(side: Side, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~netparity.compare.metrics.record_rms` of ``rows``: values and where unknown."""
    return table_rms(side.table, rows, _complex(side, rows))


def scaled_atol(ref: Side, cand: Side, rr: np.ndarray, cr: np.ndarray,
                factor: np.ndarray) -> list[float]:
    """``factor * (record_rms(ref) or record_rms(cand) or 0.0)`` per pair (the cross
    profile's RMS-relative atol; Python's ``or``: None and 0.0 fall through, NaN does not)."""
    a, a_miss = rms(ref, rr)
    b, b_miss = rms(cand, cr)
    use_a = ~a_miss & (a != 0)
    use_b = ~b_miss & (b != 0)
    v = np.where(use_a, a, np.where(use_b, b, 0.0))
    return (factor * v).tolist()  # type: ignore[no-any-return]


def stats_only(ref: Side, cand: Side, rr: np.ndarray, cr: np.ndarray) -> np.ndarray:
    """Mask of the pairs the engine's ``_stats_only`` accepts (judged from statistics),
    from the columns: not a payload on both sides, the same shape (or the same size and
    squeezed shape), not an equal hash of one dtype, a norm on the reference side."""
    rc, cc = ref.cols, cand.cols
    payload = ~rc.null("shard")[rr] & ~cand.cols.null("shard")[cr]
    sr, sc = ref.shape_a[rr], cand.shape_a[cr]
    shape_ok = sr == sc
    odd = np.nonzero(~shape_ok)[0]
    if len(odd):
        rnum, cnum = rc["numel"][rr[odd]], cc["numel"][cr[odd]]
        shapes_r = ref.rows.shapes()
        shapes_c = cand.rows.shapes()
        sq_r = [_squeeze(shapes_r[k]) for k in rc["shape"].codes[rr[odd]].tolist()]
        sq_c = [_squeeze(shapes_c[k]) for k in cc["shape"].codes[cr[odd]].tolist()]
        shape_ok[odd] = (rnum == cnum) & np.array([a == b for a, b in zip(sq_r, sq_c)],
                                                  dtype=bool)
    # an equal hash of the same dtype is judged as such (rare in a statistics trace)
    hashed = np.nonzero(~rc.null("hash")[rr] & ~cc.null("hash")[cr])[0]
    same_hash = np.zeros(len(rr), dtype=bool)
    if len(hashed):
        hv_r, hv_c = rc["hash"].values, cc["hash"].values
        dv_r, dv_c = rc["dtype"].values, cc["dtype"].values
        for i in hashed.tolist():
            a, b = int(rr[i]), int(cr[i])
            h1, h2 = hv_r[rc["hash"].codes[a]], hv_c[cc["hash"].codes[b]]
            same_hash[i] = bool(h1 and h2 and h1 == h2
                                and dv_r[rc["dtype"].codes[a]] == dv_c[cc["dtype"].codes[b]])
    norm_ok = ~ref.table.null[rr, _NORM]
    return ~payload & shape_ok & ~same_hash & norm_ok  # type: ignore[no-any-return]


_NORM = 4  # STAT_FIELDS.index("norm")


def _squeeze(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(d) for d in shape if int(d) != 1)


def stat_rows(side: Side, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~netparity.compare.metrics.table_stat_rows` of ``rows``."""
    return table_stat_rows(side.table, rows)


def complex_rows(side: Side, rows: np.ndarray) -> np.ndarray:
    """Whether each row's dtype is complex."""
    return _complex(side, rows)


#: the names of :func:`noise_class_codes`' codes
NOISE_CLASSES = ("param", "grad", "backward")


def noise_class_codes(side: Side, rows: np.ndarray) -> np.ndarray:
    """The engine's ``_noise_class`` of each row as an index into :data:`NOISE_CLASSES`
    (-1: None): ``param``/``grad`` by kind, ``backward`` by direction."""
    kinds = np.array([NOISE_CLASSES.index(k) if k in ("param", "grad") else -1
                      for k in side.cols["kind"].values] or [-1], dtype=np.int64)
    back = np.array([d == "backward" for d in side.cols["direction"].values] or [False],
                    dtype=bool)
    k = kinds[side.text("kind", rows)]
    return np.where(k >= 0, k, np.where(back[side.text("direction", rows)], 2, -1))


def texts(side: Side, name: str, rows: np.ndarray) -> list[str]:
    """A text column's values at ``rows``."""
    vals = side.cols[name].values
    return [vals[k] for k in side.text(name, rows).tolist()]


class FastCalls:
    """The 1:1 matched calls of an alignment whose tensors pair by position, found and paired
    as whole arrays (:func:`fast_calls`).

    ``at[k]``: match ``k``'s position among them (-1: the engine pairs its records);
    ``match``: the match of each fast call (increasing), ``refs`` / ``cands`` its two calls.
    Per fast call: ``order`` (the sequence number of its first output, else of the call),
    ``n_in`` / ``n_out`` (pairs of inputs / outputs: one output only for the auxiliary-output
    ops across frameworks), ``n_out_ref`` (the reference's outputs). Per pair, call by call,
    inputs then outputs: ``rr`` / ``cr`` rows of the two scans, ``call_of`` (fast call),
    ``is_out`` and ``pos`` (the tensor's position among the call's inputs or outputs).
    """

    def __init__(self, n: int) -> None:
        self.at: list[int] = [-1] * n
        self.match: list[int] = []
        self.refs: list[Any] = []
        self.cands: list[Any] = []
        self.order: list[int] = []
        self.n_in: list[int] = []
        self.n_out: list[int] = []
        self.n_out_ref: list[int] = []
        self.aux: list[bool] = []
        z = np.zeros(0, dtype=np.int64)
        self.rr, self.cr, self.call_of, self.pos = z, z, z, z
        self.is_out = np.zeros(0, dtype=bool)


def _segments(off: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For segments ``[off, off + length)``: each element's segment and position in it."""
    seg = np.repeat(np.arange(len(length)), length)
    pos = np.arange(int(length.sum())) - np.repeat(np.cumsum(length) - length, length)
    return seg, pos


_NO_SPAN = (-1, -1, -1)
_CALL_KEY = operator.attrgetter("rank", "step", "event")
_ROW = operator.attrgetter("_row")
_NATIVE = operator.attrgetter("native")
_OP = operator.attrgetter("op")


def _call_keys(calls: list[Any]) -> np.ndarray:
    """Each call's ``(rank, step, event)`` as an ``(n, 3)`` array: from the ``_key_a`` array
    of rows their classes share (calls of one :func:`~netparity.align.tableread.read_table`
    table: one attribute read per call, ``_row``), else from the calls' attributes."""
    n = len(calls)
    arrays = [vars(k).get("_key_a") for k in set(map(type, calls))]
    a0 = arrays[0] if arrays else None
    if a0 is not None and all(a is a0 for a in arrays):
        return a0[np.fromiter(map(_ROW, calls), dtype=np.int64, count=n)]  # type: ignore[no-any-return]
    return np.fromiter(itertools.chain.from_iterable(map(_CALL_KEY, calls)), dtype=np.int64,
                       count=3 * n).reshape(n, 3)


def _spans(side: Side, calls: list[Any], uniform: bool = True) -> np.ndarray:
    """Each call's ``(start, first output, end)`` in ``side.order`` (``-1`` rows: not a call
    of the side's scan, or -- with ``uniform`` -- one whose rows do not all hold its key
    columns)."""
    n = len(calls)
    want = pack_keys(_call_keys(calls))
    have = side.span_index()
    if want is not None and have is not None:
        keys, spans = have
        at = np.minimum(np.searchsorted(keys, want), max(len(keys) - 1, 0))
        sp = spans[at] if len(keys) else np.full((n, 3), -1, dtype=np.int64)
        sp[keys[at] != want if len(keys) else slice(None)] = -1
    else:  # keys that do not pack: one look-up per call
        got = [x if x is not None else _NO_SPAN
               for x in map(side.spans.get, map(_CALL_KEY, calls))]
        sp = np.array(got, dtype=np.int64).reshape(n, 3)
    if uniform:
        un = np.append(side.uniform_a, False)  # index -1: the missing ones
        sp[~un[sp[:, 0]]] = -1
    return sp


def fast_calls(sides: tuple[Side, Side], matches: list[Any], cross_fw: bool,
               aux_ops: frozenset[str]) -> FastCalls:
    """The matches whose tensors the engine pairs as rows: 1:1, both calls of the sides'
    scans with uniform key columns (:class:`Side`), and for inputs and for outputs
    :func:`~netparity.compare.argpairs.pair_tensors`' positional rule -- as many tensors on
    both sides, and the same native op or the same shape at every position. Auxiliary-output
    ops (``aux_ops``, same canonical op, across frameworks) pair their first output only."""
    ref, cand = sides
    out = FastCalls(len(matches))
    refs = list(map(_REF, matches))
    cands = list(map(_CAND, matches))
    n = len(matches)
    single = ((np.fromiter(map(len, refs), dtype=np.int64, count=n) == 1)
              & (np.fromiter(map(len, cands), dtype=np.int64, count=n) == 1))
    one = np.nonzero(single)[0].tolist()
    if not one:
        return out
    r0 = [refs[k][0] for k in one]
    c0 = [cands[k][0] for k in one]
    spr, spc = _spans(ref, r0), _spans(cand, c0)
    have = np.nonzero((spr[:, 0] >= 0) & (spc[:, 0] >= 0))[0]
    if not len(have):
        return out
    hl = have.tolist()
    r0 = [r0[i] for i in hl]
    c0 = [c0[i] for i in hl]
    ks = [one[i] for i in hl]
    s_r, m_r, e_r = spr[have].T
    s_c, m_c, e_c = spc[have].T
    same_native = np.array([a == b for a, b in zip(map(_NATIVE, r0), map(_NATIVE, c0))],
                           dtype=bool)
    ops_r = list(map(_OP, r0))
    aux = np.array([cross_fw and a in aux_ops and b == a
                    for a, b in zip(ops_r, map(_OP, c0))], dtype=bool)
    ord_r, ord_c = ref.order_a, cand.order_a
    gs_r = ref.shape_a[ord_r]  # shape id per position of order
    gs_c = cand.shape_a[ord_c]

    def positional(off_r: np.ndarray, off_c: np.ndarray, n_r: np.ndarray,
                   n_c: np.ndarray) -> np.ndarray:
        eq = n_r == n_c
        seg, pos = _segments(off_r, np.where(eq, n_r, 0))
        differ = gs_r[off_r[seg] + pos] != gs_c[off_c[seg] + pos]
        bad = np.bincount(seg[differ], minlength=len(n_r)) > 0
        return eq & (same_native | ~bad)  # type: ignore[no-any-return]

    ok = (positional(s_r, s_c, m_r - s_r, m_c - s_c)
          & positional(m_r, m_c, e_r - m_r, e_c - m_c))
    f = np.nonzero(ok)[0]
    if not len(f):
        return out
    fl = f.tolist()
    aux_f = aux[f]
    n_in = (m_r - s_r)[f]
    n_out_ref = (e_r - m_r)[f]
    n_out = np.where(aux_f & (n_out_ref > 0), 1, n_out_ref)
    # the first output's sequence number (the smallest of the outputs), else the call's
    seq_r = np.asarray(ref.cols["seq"], dtype=np.int64)[ord_r]
    seg, pos = _segments(m_r[f], n_out_ref)
    first = np.full(len(f), np.iinfo(np.int64).max)
    np.minimum.at(first, seg, seq_r[m_r[f][seg] + pos])
    refs = [r0[i] for i in fl]
    order = first
    if not (n_out_ref > 0).all():
        none = np.nonzero(n_out_ref == 0)[0]
        order[none] = [refs[i].seq for i in none.tolist()]
    # pairs: call by call, inputs then outputs
    total = n_in + n_out
    seg, pos = _segments(np.zeros(len(f), dtype=np.int64), total)
    is_out = pos >= n_in[seg]
    j = np.where(is_out, pos - n_in[seg], pos)
    out.rr = ord_r[np.where(is_out, m_r[f][seg], s_r[f][seg]) + j]
    out.cr = ord_c[np.where(is_out, m_c[f][seg], s_c[f][seg]) + j]
    out.call_of, out.is_out, out.pos = seg, is_out, j
    out.match = [ks[i] for i in fl]
    at = out.at
    for i, k in enumerate(out.match):
        at[k] = i
    out.refs, out.cands = refs, [c0[i] for i in fl]
    out.order, out.n_in, out.n_out = order.tolist(), n_in.tolist(), n_out.tolist()
    out.n_out_ref, out.aux = n_out_ref.tolist(), aux_f.tolist()
    return out


def prefetch(sides: tuple[Side, Side], matches: list[Any], which_k: list[int]) -> None:
    """Make the records of the calls of matches ``which_k`` (those paired from records:
    odd calls, N:M groups not paired as rows), both sides in one pass each."""
    if not which_k:
        return
    for side, which in ((sides[0], "ref"), (sides[1], "cand")):
        keys = [(d.get("rank"), d.get("step"), d.get("event"))
                for k in which_k for d in (c.__dict__ for c in getattr(matches[k], which))]
        side.source.prefetch(keys)


#: distances of N:M candidate pairs computed at a time (the gathered statistics and the
#: distance's temporaries: ~0.5 GB transient at 1M ops when made whole)
_DIST_ROWS = 1 << 16


class GroupRows:
    """The tensors of N:M groups paired as rows of the scans: :func:`group_inputs
    <netparity.compare.argpairs.group_inputs>` and :func:`pair_tensors
    <netparity.compare.argpairs.pair_tensors>` (``group=True``) on facts read from the
    columns for every group at once (identities, squeezed shapes, element counts, payloads,
    statistics rows) instead of records.

    ``pairs[k]`` for match ``k`` (groups whose calls are all calls of the scans):
    ``(inputs, outputs)``, each ``(ref rows, cand rows, the ref rows' pair key prefixes
    (:func:`pair_key` without the position), [(i, j)] pairs of positions)``.
    """

    def __init__(self, sides: tuple[Side, Side], matches: list[Any], todo: list[int]):
        self.sides = sides
        self.pairs: dict[int, tuple[Any, Any]] = {}
        gm = [k for k in todo if len(matches[k].ref) > 1 or len(matches[k].cand) > 1]
        if not gm:
            return
        sq_pool: dict[tuple[int, ...], int] = {}
        facts = []
        ok = np.ones(len(gm), dtype=bool)
        for side, which in ((sides[0], "ref"), (sides[1], "cand")):
            groups = [getattr(matches[k], which) for k in gm]
            calls = [c for g in groups for c in g]
            sp = _spans(side, calls, uniform=False)
            gof = np.repeat(np.arange(len(gm)), [len(g) for g in groups])
            ok &= np.bincount(gof[sp[:, 0] < 0], minlength=len(gm)) == 0
            facts.append((_RowFacts(side, sp, sq_pool), np.cumsum([len(g) for g in groups])))
        (fr, end_r), (fc, end_c) = facts
        sets: list[tuple[int, list[int], list[int], list[int], list[int]]] = []
        for g, k in enumerate(gm):
            if not ok[g]:
                continue
            a, b = int(end_r[g - 1]) if g else 0, int(end_r[g])
            c, d = int(end_c[g - 1]) if g else 0, int(end_c[g])
            sets.append((k, fr.external(a, b), fc.external(c, d), fr.outputs(b - 1),
                         fc.outputs(d - 1)))
        # every distance a group may ask for, in one pass: each role's ref x cand matrix,
        # flattened and concatenated (the same element-wise operations as per matrix); index
        # arrays and distances stay arrays (as Python lists, ~0.25 GB for a moment at 1M ops)
        ri: list[np.ndarray] = []
        ci: list[np.ndarray] = []
        for _, ins_r, ins_c, outs_r, outs_c in sets:
            for rs, cs in ((ins_r, ins_c), (outs_r, outs_c)):
                if rs and cs:  # row-major: each ref row against every cand row
                    ri.append(np.repeat(np.asarray(rs, dtype=np.int64), len(cs)))
                    ci.append(np.tile(np.asarray(cs, dtype=np.int64), len(rs)))
        z = np.zeros(0, dtype=np.int64)
        ria, cia = (np.concatenate(ri) if ri else z), (np.concatenate(ci) if ci else z)
        del ri, ci
        flat = np.zeros(len(ria))
        for s in range(0, len(ria), _DIST_ROWS):  # row by row: in parts, exactly the same
            flat[s:s + _DIST_ROWS] = row_distance(fr.stat[ria[s:s + _DIST_ROWS]],
                                                  fc.stat[cia[s:s + _DIST_ROWS]])
        del ria, cia
        dist = np.where(np.isfinite(flat), flat, 1.0)
        del flat
        at = 0
        for k, ins_r, ins_c, outs_r, outs_c in sets:
            got = []
            for rs, cs, first_only in ((ins_r, ins_c, False), (outs_r, outs_c, True)):
                w, n = len(cs), len(rs)
                # the group's matrix as lists of floats, made if pairing asks for it
                mat = (lambda a=at, w=w, n=n:  # noqa: E731
                       dist[a:a + w * n].reshape(n, w).tolist())
                at += w * n
                got.append((fr.rows_of(rs), fc.rows_of(cs), fr.prefixes(rs), pair_by_value(
                    [fr.sq[i] for i in rs], [fc.sq[j] for j in cs], [fr.numel[i] for i in rs],
                    [fc.numel[j] for j in cs], [fr.payload[i] for i in rs],
                    [fc.payload[j] for j in cs], mat, group=True,
                    first_only=first_only)))
            self.pairs[k] = (got[0], got[1])


class _RowFacts:
    """What the group pairing reads of the rows of some calls of one side (positions:
    the calls' rows one after the other, each call's inputs then outputs)."""

    def __init__(self, side: Side, spans: np.ndarray, sq_pool: dict[tuple[int, ...], int]):
        good = spans[:, 0] >= 0
        s, m, e = (np.where(good, spans[:, i], 0) for i in range(3))
        seg, pos = _segments(s, e - s)
        self.side = side
        self.rows_a = side.order_a[s[seg] + pos]
        self.rows_l: list[int] = self.rows_a.tolist()
        self._prefix: list[str] | None = None
        off = np.cumsum(e - s) - (e - s)
        self.span = np.stack([off, off + (m - s), off + (e - s)], axis=1).tolist()
        rows, cols, table = self.rows_a, side.cols, side.table
        shapes = side.rows.shapes()
        sq_ids = np.array([sq_pool.setdefault(_squeeze(t), len(sq_pool)) for t in shapes]
                          or [0], dtype=np.int64)
        codes = cols["shape"].codes[rows]
        self.sq: list[int] = sq_ids[codes].tolist()
        self.numel: list[int] = cols["numel"][rows].tolist()
        self.payload: list[bool] = (~cols.null("shard")[rows]).tolist()
        # argpairs._identity: (shape, dtype, mean, std, min, max, norm), None when one of
        # the statistics is unknown (shape and dtype as codes: compared within a side only);
        # made per group when asked (:meth:`_ident`: as tuples for every row at once, ~0.25 GB
        # for a moment at 1M ops)
        v = table.floats[rows][:, [2, 3, 0, 1, 4]]
        null = table.null[rows][:, [2, 3, 0, 1, 4]]
        known = ~null.any(axis=1)
        self._id_cols = (side.shape_a[rows], cols["dtype"].codes[rows], v, known)
        # align.features.stat_row: mean, std, min, max, norm/sqrt(numel or 1), NaN unknown
        st = np.where(null[:, :4], np.nan, v[:, :4])
        n = np.maximum(cols["numel"][rows], 1).astype(np.float64)
        rms = np.where(known, v[:, 4] / np.sqrt(n), np.nan)
        self.stat = np.concatenate([st, rms[:, None]], axis=1)

    def _ident(self, lo: int, hi: int) -> list[Any]:
        """The identities of positions ``lo..hi-1`` (see ``__init__``)."""
        sh, dt, v, known = (x[lo:hi] for x in self._id_cols)
        return [(a, b, *x) if k else None
                for a, b, x, k in zip(sh.tolist(), dt.tolist(), v.tolist(), known.tolist())]

    def external(self, a: int, b: int) -> list[int]:
        """:func:`~netparity.compare.argpairs.group_inputs` of calls ``a..b-1``."""
        if b - a <= 1:
            return list(range(self.span[a][0], self.span[a][1]))
        lo = self.span[a][0]
        ident = self._ident(lo, self.span[b - 1][2])
        io = []
        for s, m, e in self.span[a:b]:
            io.append((range(s, m), ident[s - lo:m - lo], ident[m - lo:e - lo]))
        return external_inputs(io)

    def outputs(self, k: int) -> list[int]:
        s, m, e = self.span[k]
        return list(range(m, e))

    def rows_of(self, at: list[int]) -> list[int]:
        rows = self.rows_l
        return [rows[i] for i in at]

    def prefixes(self, at: list[int]) -> list[str]:
        """:func:`pair_key` of the rows at positions ``at``, without the position key."""
        if self._prefix is None:
            c, r = self.side.cols, self.rows_a

            def text(name: str) -> list[str]:
                col = c[name]
                vals = col.values
                return [vals[k] for k in col.codes[r].tolist()]

            self._prefix = [f"{st}|{rk}|{kd}|{d}|{mo}|{op}|{ca}|" for st, rk, kd, d, mo, op, ca
                            in zip(c["step"][r].tolist(), c["rank"][r].tolist(), text("kind"),
                                   text("direction"), text("module"), text("op"),
                                   c["call"][r].tolist())]
        p = self._prefix
        return [p[i] for i in at]

