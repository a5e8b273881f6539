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
  comparison can report the shape difference.

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
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from netparity.align.model import Call
from netparity.align.names import leaf, norm_path
from netparity.align.vocab import normalise
from netparity.trace.schema import Record

GAP = 1.0
MATCH_LIMIT = 2.0 * GAP
TAU = 0.25
STATS_WEIGHT = 2.0
#: statistics this far apart are unrelated data: never paired by cost, whatever the names
STATS_VETO = 0.75
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


@dataclass
class Feats:
    """Feature arrays of a list of calls (index ``i`` describes ``calls[i]``)."""

    calls: list[Call]
    name: np.ndarray  # canonical op id
    sig: np.ndarray  # (op, input shapes, output shapes) id
    shp: np.ndarray  # (input shapes, output shapes) id
    out_shape: np.ndarray  # first output shape id
    in_shape: np.ndarray  # first input shape id
    stats: np.ndarray  # (n, 5) first output: mean, std, min, max, rms
    bucket: np.ndarray  # quantised log-rms of the first output (anchor keys)
    leaf: np.ndarray  # normalised last path token id (modules)
    path: list[str] = field(default_factory=list)  # normalised module paths
    names: list[str] = field(default_factory=list)  # canonical op names
    natives: list[str] = field(default_factory=list)  # normalised native names
    anchor_keys: list[np.ndarray] | None = None  # cached by netparity.align.seq

    def __len__(self) -> int:
        return len(self.calls)

    def in_stats(self, idx: np.ndarray) -> np.ndarray:
        """Statistics of the first input of ``calls[idx]`` (only N:M detection needs them)."""
        rows = [_stat_row(self.calls[i].inputs[0] if self.calls[i].inputs else None) for i in idx]
        return np.array(rows, dtype=np.float64).reshape(len(rows), 5)


def build_feats(calls: list[Call], ids: Interner) -> Feats:
    """Feature arrays for ``calls``; ``ids`` is shared by both sides of an alignment."""
    n = len(calls)
    name: list[int] = [0] * n
    sig: list[int] = [0] * n
    shp: list[int] = [0] * n
    osh: list[int] = [0] * n
    ish: list[int] = [0] * n
    lf: list[int] = [0] * n
    st: list[tuple[float, ...]] = [_NAN5] * n
    paths: list[str] = []
    names: list[str] = []
    natives: list[str] = []
    norm_cache: dict[str, str] = {}
    # Large traces repeat a few dozen (op, shapes) signatures and module names thousands of
    # times: intern each distinct one once (in first-seen order, so ids are the same as
    # interning every call) instead of hashing nested shape tuples five times per call.
    sig_cache: dict[tuple[str, tuple[Any, ...], tuple[Any, ...]], tuple[int, int, int, int, int]] = {}
    mod_cache: dict[str, tuple[str, int]] = {}
    root: dict[tuple[int, ...], float] = {}
    sqrt = math.sqrt
    nan = math.nan
    for i, c in enumerate(calls):
        cins = c.inputs
        couts = c.outputs
        ins = tuple([r.shape for r in cins])
        outs = tuple([r.shape for r in couts])
        op = c.op
        key = (op, ins, outs)
        f = sig_cache.get(key)
        if f is None:
            nid = ids(op)
            sid = ids((ins, outs))
            f = sig_cache[key] = (nid, sid, ids((nid, sid)), ids((outs[0] if outs else None,)),
                                  ids((ins[0] if ins else None,)))
        name[i], shp[i], sig[i], osh[i], ish[i] = f
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
            m = mod_cache.get(c.module)
            if m is None:
                m = mod_cache[c.module] = (norm_path(c.module), ids(("leaf", leaf(c.module))))
            paths.append(m[0])
            lf[i] = m[1]
        names.append(op)
        nat = norm_cache.get(c.native)
        if nat is None:
            nat = norm_cache[c.native] = normalise(c.native) if c.native else c.op
        natives.append(nat)
    stats = np.array(st, dtype=np.float64).reshape(n, 5)
    with np.errstate(divide="ignore", invalid="ignore"):
        lr = np.log2(np.abs(stats[:, 4]) + 1e-30)
    bucket = np.where(np.isfinite(lr), np.floor(lr * 2.0), -999).astype(np.int64)
    arr = [np.array(v, dtype=np.int64) for v in (name, sig, shp, osh, ish, lf)]
    return Feats(calls, arr[0], arr[1], arr[2], arr[3], arr[4], stats, bucket, arr[5], paths,
                 names, natives)


def stats_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise distance in ``[0, 1]`` between rows of two ``(n, 5)`` statistics matrices.

    Columns: mean, std, min, max, rms. NaN (unknown) on either side gives the neutral 0.5.
    """
    A = a[:, None, :]
    B = b[None, :, :]
    scale = np.maximum(np.abs(A[..., 4]), np.abs(B[..., 4]))[..., None]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        denom = TAU * (np.maximum(np.abs(A), np.abs(B)) + scale) + 1e-30
        d = np.minimum(np.abs(A - B) / denom, 1.0)
    d = np.where(np.isnan(d), _NO_STATS, d)
    return np.asarray(d.mean(axis=2))


def cost_matrix(A: Feats, ia: np.ndarray, B: Feats, ib: np.ndarray, modules: bool = False) -> np.ndarray:
    """Pairing cost of ``A[ia]`` x ``B[ib]`` (see the module docstring)."""
    na = A.name[ia][:, None]
    nb = B.name[ib][None, :]
    c = (na != nb).astype(np.float64)
    same_shp = A.shp[ia][:, None] == B.shp[ib][None, :]
    same_out = A.out_shape[ia][:, None] == B.out_shape[ib][None, :]
    c += np.where(same_shp, 0.0, np.where(same_out, 0.5, 1.0))
    d = stats_distance(A.stats[ia], B.stats[ib])
    c += STATS_WEIGHT * d
    if modules:
        c += np.where(A.leaf[ia][:, None] == B.leaf[ib][None, :], 0.0, 0.5)
    return np.where(d > STATS_VETO, np.inf, c)


def pair_cost(A: Feats, i: int, B: Feats, j: int, modules: bool = False) -> float:
    """Cost of one pair (same formula as :func:`cost_matrix`)."""
    return float(cost_matrix(A, np.array([i]), B, np.array([j]), modules)[0, 0])


def tensor_close(sa: np.ndarray, sha: int, sb: np.ndarray, shb: int, limit: float = 0.2) -> bool:
    """Two tensors plausibly hold the same values: same shape and statistics distance < limit."""
    if sha != shb:
        return False
    return float(stats_distance(sa[None, :], sb[None, :])[0, 0]) < limit
