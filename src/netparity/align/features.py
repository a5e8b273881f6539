"""Per-call features (names, shape signatures, statistics) and the pairing cost built on them.

The cost of pairing reference call ``a`` with candidate call ``b`` is::

    cost = [canonical op differs] + shape term + 2 * stats distance (+ path term for modules)

with shape term 0 (same input and output shapes), 0.5 (same first output shape only) or 1, and
a statistics distance in ``[0, 1]`` (below). Leaving a call unmatched costs :data:`GAP` per side,
so a pair is only worth making when ``cost < 2 * GAP = 2``. That threshold encodes the rules:

* same op, same shapes, statistics close (bf16 vs fp32, a small bug)      -> matched;
* a renamed op (``Dense`` vs ``addmm``...) with same shapes and close statistics -> matched;
* same shapes but unrelated statistics (distance > ``STATS_VETO``)        -> not matched;
* same op, different shapes (e.g. a padding bug) but related statistics  -> matched, so the
  comparison can report the shape difference;
* two different ops whose outputs are single values (scalars: one number each) and not
  within :data:`SCALAR_LIMIT`                                              -> never matched;
* an op that only rearranges its input (a view, reshape, transpose, alias: ``vocab.VIEW_OPS``)
  and an op that computes                                                  -> never matched
  (whatever their statistics: a view of a layer norm's input looks like its output).

Statistics distance: for each of mean, std, min, max and L2-norm-per-element, ``|a - b|`` over
``TAU * (max(|a|, |b|) + scale)`` clipped to 1, where ``scale`` is the larger root-mean-square
value of the two tensors; averaged. The ``scale`` term keeps near-zero means from exploding the
relative difference; ``TAU = 0.25`` makes fp32-vs-bf16 noise (< 1 %) cost ~0.02 and unrelated
tensors cost ~1.

Example:
    >>> import numpy as np
    >>> a = np.array([[0.0, 1.0, -3.0, 3.0, 1.0]]); b = a * 1.001; c = a * 4 + 2
    >>> float(stats_distance(a, b)[0, 0]) < 0.01, float(stats_distance(a, c)[0, 0]) > 0.5
    (True, True)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from netparity.align.model import Call
from netparity.align.names import leaf
from netparity.align.vocab import is_view_op, normalise, primary_input
from netparity.trace.schema import Record

GAP = 1.0
MATCH_LIMIT = 2.0 * GAP
TAU = 0.25
STATS_WEIGHT = 2.0
#: statistics this far apart are unrelated data: never paired by cost, whatever the names
STATS_VETO = 0.75
#: two *different* ops whose outputs are single values (scalars or constants: one number, no
#: distribution to compare) pair only this close (statistics distance ~1.6x their relative
#: difference: 6e-4 apart, far beyond rounding, far below a coincidence); same for an N:M group
#: ending on them. Unrelated scalars (a squared gradient norm, 2.51; a clipping norm, 2.80)
#: otherwise pair by coincidence.
SCALAR_LIMIT = 1e-3
#: columns of the statistics matrix
_COLS = ("mean", "std", "min", "max")
_NO_STATS = 0.5  # distance used when either side has no statistics (neutral: shapes decide)


class Interner:
    """Shared ids for names/signatures of both sides (so equal ids mean equal values)."""

    def __init__(self) -> None:
        self.ids: dict[object, int] = {}

    def __call__(self, v: object) -> int:
        i = self.ids.get(v)
        if i is None:
            i = self.ids[v] = len(self.ids)
        return i

    def numels(self, ids: np.ndarray) -> np.ndarray:
        """Element count of each interned first-shape key ``(shape,)`` of ``ids`` (-1 where
        the key holds no shape: a call without inputs or outputs)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if not len(ids):
            return np.zeros(0, dtype=np.int64)
        keys = list(self.ids)
        uniq, inv = np.unique(ids, return_inverse=True)  # a few dozen distinct shapes
        counts = []
        for i in uniq.tolist():
            key = keys[i] if 0 <= i < len(keys) else None
            shape = key[0] if isinstance(key, tuple) and len(key) == 1 else None
            counts.append(math.prod(int(d) for d in shape) if isinstance(shape, tuple) else -1)
        return np.array(counts, dtype=np.int64)[inv.reshape(-1)]


_NAN5 = (math.nan,) * 5


def _stat_row(r: Record | None) -> tuple[float, ...]:
    """mean, std, min, max, rms of a record (NaN where unknown)."""
    if r is None:
        return _NAN5
    s = r.stats
    mean, std, mn, mx, n = s.get("mean"), s.get("std"), s.get("min"), s.get("max"), s.get("norm")
    if mean is None or std is None or mn is None or mx is None or n is None:
        return (math.nan if mean is None else mean, math.nan if std is None else std,
                math.nan if mn is None else mn, math.nan if mx is None else mx, math.nan)
    return (mean, std, mn, mx, n / math.sqrt(r.numel or 1))


#: the ids a call's signature gets: op, (input shapes, output shapes), both, first output
#: shape, first input shape
SigIds = tuple[int, int, int, int, int]


def sig_ids(ids: Interner, op: str, ins: tuple[Any, ...], outs: tuple[Any, ...],
            lead: int = 0) -> SigIds:
    """Interned ids of one call signature (every feature builder interns the same keys);
    ``lead`` is the position of the call's primary input (:func:`primary_input`)."""
    nid = ids(op)
    sid = ids((ins, outs))
    lead = lead if lead < len(ins) else 0
    return (nid, sid, ids((nid, sid)), ids((outs[0] if outs else None,)),
            ids((ins[lead] if ins else None,)))


def stat_row(r: Record | None) -> tuple[float, ...]:
    """mean, std, min, max and RMS of a record's statistics (NaN where unknown): the row
    :func:`row_distance` and :func:`stats_distance` compare."""
    return _stat_row(r)


def stats_rows(rows: list[tuple[float, ...]]) -> np.ndarray:
    """An ``(n, 5)`` float matrix of :func:`_stat_row` tuples."""
    return np.array(rows, dtype=np.float64).reshape(len(rows), 5)


@dataclass
class Feats:
    """Feature arrays of a list of calls (index ``i`` describes call ``i``)."""

    name: np.ndarray  # canonical op id
    sig: np.ndarray  # (op, input shapes, output shapes) id
    shp: np.ndarray  # (input shapes, output shapes) id
    out_shape: np.ndarray  # first output shape id
    in_shape: np.ndarray  # primary input shape id (the first, except addmm's x...)
    stats: np.ndarray  # (n, 5) first output: mean, std, min, max, rms
    bucket: np.ndarray  # quantised log-rms of the first output (anchor keys)
    leaf: np.ndarray  # normalised last path token id (modules)
    names: np.ndarray  # canonical op names (object array)
    natives: np.ndarray  # normalised native names (object array)
    view: np.ndarray  # bool: the op only rearranges its input (vocab.is_view_op)
    #: first-input statistics of calls ``idx`` (``(k, 5)``): only N:M detection needs them, so
    #: a trace-backed builder fetches them on demand instead of reading every input record
    first_inputs: Callable[[np.ndarray], np.ndarray]
    anchor_keys: list[np.ndarray] | None = None  # cached by netparity.align.seq
    #: element counts of the first output and the primary input (-1: none; None: unknown)
    out_numel: np.ndarray | None = None
    in_numel: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.name)

    def in_stats(self, idx: np.ndarray) -> np.ndarray:
        """Statistics of the first input of calls ``idx``."""
        return self.first_inputs(np.asarray(idx, dtype=np.int64))

    def warm_inputs(self, idx: np.ndarray) -> None:
        """Calls ``idx`` may soon need :meth:`in_stats`: fetch them together, if that helps."""
        warm = getattr(self.first_inputs, "warm", None)
        if warm is not None and len(idx):
            warm(np.asarray(idx, dtype=np.int64))

    def take(self, idx: np.ndarray) -> Feats:
        """The features of calls ``idx`` (in that order), as a new :class:`Feats`."""
        return Feats(self.name[idx], self.sig[idx], self.shp[idx], self.out_shape[idx],
                     self.in_shape[idx], self.stats[idx], self.bucket[idx], self.leaf[idx],
                     self.names[idx], self.natives[idx], self.view[idx],
                     _Subset(self.first_inputs, idx), None,
                     None if self.out_numel is None else self.out_numel[idx],
                     None if self.in_numel is None else self.in_numel[idx])


class _Subset:
    """First-input statistics of some of another feature set's calls."""

    def __init__(self, parent: Callable[[np.ndarray], np.ndarray], idx: np.ndarray):
        self.parent, self.idx = parent, idx

    def __call__(self, j: np.ndarray) -> np.ndarray:
        return self.parent(self.idx[j])

    def warm(self, j: np.ndarray) -> None:
        warm = getattr(self.parent, "warm", None)
        if warm is not None:
            warm(self.idx[j])


def make_feats(sigs: list[SigIds] | np.ndarray, leaf_ids: np.ndarray, stats: np.ndarray,
               names: np.ndarray, natives: np.ndarray,
               first_inputs: Callable[[np.ndarray], np.ndarray],
               view: np.ndarray | None = None, ids: Interner | None = None) -> Feats:
    """Assemble :class:`Feats` from per-call signature ids and first-output statistics;
    ``view`` (:func:`is_view_op` of each name) is computed here when not given; ``ids``, the
    interner of the signatures, gives the element counts (:attr:`Feats.out_numel`)."""
    n = len(stats)
    s = np.array(sigs, dtype=np.int64).reshape(n, 5)
    with np.errstate(divide="ignore", invalid="ignore"):
        lr = np.log2(np.abs(stats[:, 4]) + 1e-30)
    bucket = np.where(np.isfinite(lr), np.floor(lr * 2.0), -999).astype(np.int64)
    if view is None:
        known: dict[str, bool] = {}  # a few dozen distinct names: each one tested once
        view = np.array([known[op] if op in known else known.setdefault(op, is_view_op(op))
                         for op in names.tolist()], dtype=bool)
    view = np.asarray(view, dtype=bool).reshape(n)
    numel = (None, None) if ids is None else (ids.numels(s[:, 3]), ids.numels(s[:, 4]))
    return Feats(s[:, 0].copy(), s[:, 2].copy(), s[:, 1].copy(), s[:, 3].copy(), s[:, 4].copy(),
                 stats, bucket, np.asarray(leaf_ids, dtype=np.int64), names, natives, view,
                 first_inputs, None, numel[0], numel[1])


def object_array(values: list[Any]) -> np.ndarray:
    """A 1-D object array of ``values`` (strings stay Python strings)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def build_feats(calls: list[Call], ids: Interner) -> Feats:
    """Feature arrays for ``calls``; ``ids`` is shared by both sides of an alignment."""
    n = len(calls)
    sigs: list[SigIds] = []
    lf: list[int] = [0] * n
    st: list[tuple[float, ...]] = [_NAN5] * n
    names: list[str] = []
    # Large traces repeat a few dozen (op, shapes) signatures and module names thousands of
    # times: intern each distinct one once (in first-seen order, so ids are the same as
    # interning every call) instead of hashing nested shape tuples five times per call.
    sig_cache: dict[tuple[str, int, tuple[Any, ...], tuple[Any, ...]], SigIds] = {}
    leaf_cache: dict[str, int] = {}
    root: dict[tuple[int, ...], float] = {}
    sqrt = math.sqrt
    nan = math.nan
    for i, c in enumerate(calls):
        cins = c.inputs
        couts = c.outputs
        ins = tuple([r.shape for r in cins])
        outs = tuple([r.shape for r in couts])
        op = c.op
        lead = primary_input(c.native)
        key = (op, lead, ins, outs)
        f = sig_cache.get(key)
        if f is None:
            f = sig_cache[key] = sig_ids(ids, op, ins, outs, lead)
        sigs.append(f)
        if couts:
            r = couts[0]
            s = r.stats
            mean, std, mn, mx, nrm = (s.get("mean"), s.get("std"), s.get("min"), s.get("max"),
                                      s.get("norm"))
            if mean is None or std is None or mn is None or mx is None or nrm is None:
                st[i] = (nan if mean is None else mean, nan if std is None else std,
                         nan if mn is None else mn, nan if mx is None else mx, nan)
            else:
                shape = r.shape
                q = root.get(shape)
                if q is None:
                    q = root[shape] = sqrt(r.numel or 1)
                st[i] = (mean, std, mn, mx, nrm / q)
        if c.kind == "module":
            m = leaf_cache.get(c.module)
            if m is None:
                m = leaf_cache[c.module] = leaf_id(ids, c.module)
            lf[i] = m
        names.append(op)

    def first_inputs(idx: np.ndarray) -> np.ndarray:
        return stats_rows([_stat_row(lead_input(calls[i])) for i in idx.tolist()])

    natives = native_names([c.native for c in calls], names)
    return make_feats(sigs, np.array(lf, dtype=np.int64), stats_rows(st), object_array(names),
                      object_array(natives), first_inputs, ids=ids)


def lead_input(call: Call) -> Record | None:
    """A call's primary input record (:func:`~netparity.trace.vocab.primary_input`), or None."""
    ins = call.inputs
    if not ins:
        return None
    k = primary_input(call.native)
    return ins[k] if k < len(ins) else ins[0]


def native_names(natives: list[str], ops: list[str]) -> list[str]:
    """Normalised native name of each call (its op name when it has none), each distinct native
    normalised once."""
    done: dict[str, str] = {}
    out = []
    for nat, op in zip(natives, ops):
        v = done.get(nat) if nat else op
        if v is None:
            v = done[nat] = native_name(nat, op)
        out.append(v)
    return out


def native_names_coded(codes: np.ndarray, values: list[str], ops: np.ndarray) -> np.ndarray:
    """:func:`native_names` of a text column given as codes into its distinct ``values`` (a
    scanned column), as an object array: each distinct native normalised once, and the op
    (``ops``, an object array) where the native is empty."""
    table = object_array([native_name(v, "") if v else "" for v in values] or [""])
    out = table[codes] if len(values) else np.empty(0, dtype=object)
    empty = np.array([not v for v in values] or [False], dtype=bool)[codes]
    out[empty] = ops[empty]
    return out  # type: ignore[no-any-return]


def leaf_id(ids: Interner, module: str) -> int:
    """Interned id of a module path's normalised last token."""
    return ids(("leaf", leaf(module)))


def native_name(native: str, op: str) -> str:
    """The normalised native name op-group mappings match against (the op when unknown)."""
    return normalise(native) if native else op


def stats_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise distance in ``[0, 1]`` between rows of two ``(n, 5)`` statistics matrices.

    Columns: mean, std, min, max, rms. NaN (unknown) on either side gives the neutral 0.5.
    """
    return _distance(a[:, None, :], b[None, :, :])


def row_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance between row ``k`` of ``a`` and row ``k`` of ``b`` (as :func:`stats_distance`)."""
    return _distance(a, b)


def _distance(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """The statistics distance of broadcastable ``(..., 5)`` arrays, over the last axis.

    Written with few temporaries: the N:M search calls it thousands of times on tiny arrays.
    """
    aa, ab = np.abs(A), np.abs(B)
    scale = np.maximum(aa[..., 4:5], ab[..., 4:5])
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        d = np.abs(A - B)
        d /= TAU * (np.maximum(aa, ab) + scale) + 1e-30
        np.minimum(d, 1.0, out=d)
    d[np.isnan(d)] = _NO_STATS
    return np.asarray(np.add.reduce(d, axis=-1) / d.shape[-1])


def cost_matrix(A: Feats, ia: np.ndarray, B: Feats, ib: np.ndarray, modules: bool = False) -> np.ndarray:
    """Pairing cost of ``A[ia]`` x ``B[ib]`` (see the module docstring)."""
    return pair_costs(A, np.asarray(ia)[:, None], B, np.asarray(ib)[None, :], modules)[0]


def pair_costs(A: Feats, ia: np.ndarray, B: Feats, ib: np.ndarray,
               modules: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Pairing cost of ``A[ia[k]]`` with ``B[ib[k]]`` for broadcastable index arrays (an
    ``(n, 1)`` and a ``(1, m)`` column give :func:`cost_matrix`; two flat arrays, the cost of
    many pairs at once), and the statistics distance of their first outputs in it.

    Every cell is computed alone, so a cell has the same value whichever way it is asked for.
    """
    na = A.name[ia]
    nb = B.name[ib]
    c = (na != nb).astype(np.float64)
    same_shp = A.shp[ia] == B.shp[ib]
    same_out = A.out_shape[ia] == B.out_shape[ib]
    c += np.where(same_shp, 0.0, np.where(same_out, 0.5, 1.0))
    sa, sb = A.stats[ia], B.stats[ib]
    d = _distance(sa, sb)
    c += STATS_WEIGHT * d
    if modules:
        c += np.where(A.leaf[ia] == B.leaf[ib], 0.0, 0.5)
        return np.where(d > STATS_VETO, np.inf, c), d
    veto = (d > STATS_VETO) | (A.view[ia] != B.view[ib])
    veto |= (na != nb) & (d >= SCALAR_LIMIT) & single_valued(sa) & single_valued(sb)
    veto |= other_sizes(A, ia, B, ib, na != nb)
    return np.where(veto, np.inf, c), d


def other_sizes(A: Feats, ia: np.ndarray, B: Feats, ib: np.ndarray,
                other_op: np.ndarray) -> np.ndarray | bool:
    """Op pairs that hold tensors of different sizes and are not one op with a shape bug:
    first outputs of different element counts, and either different ops or primary inputs of
    different element counts too. Such ops are never the same computation (a tanh GELU's
    ``add`` against a linear layer's bias ``add`` of another width); one op whose output alone
    changed size from the same input (a padding bug) is still paired, to be reported."""
    if A.out_numel is None or B.out_numel is None or A.in_numel is None or B.in_numel is None:
        return False
    oa, ob = A.out_numel[ia], B.out_numel[ib]
    other_in = A.in_numel[ia] != B.in_numel[ib]
    return np.asarray((oa != ob) & (oa >= 0) & (ob >= 0) & (other_op | other_in))


def single_valued(stats: np.ndarray) -> np.ndarray:
    """Rows of a ``(..., 5)`` statistics array whose tensor holds one value (min == max)."""
    return np.asarray(stats[..., 2] == stats[..., 3])
