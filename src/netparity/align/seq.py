"""Sequence alignment of two call lists: anchors first, dynamic programming in the gaps.

Strategy (the patience-diff idea, with data instead of text):

1. **Fixed pairs** given by the caller (mapping entries, equal module paths) split the problem.
2. **Anchors**: calls whose key (canonical op + shapes + a coarse magnitude bucket of the output;
   then op + shapes; then shapes + bucket) occurs exactly once in the current range on both
   sides, whose pairing cost is low, and that keep execution order (longest increasing
   subsequence). The ranges between anchors are handled recursively, so repeated blocks get
   anchors from keys that are unique *within* the gap.
3. **Dynamic programming** (global alignment with a gap cost, vectorised row by row) inside
   gaps small enough; a sliding window for huge anchorless gaps.
4. **N:M groups**: between two pairs of identical ops, a run of calls on one side whose first
   input matches the other run's first input and whose last output matches the other run's last
   output (shape and statistics) becomes one group (``linear`` <-> ``matmul + add``, a fused
   layer norm <-> its decomposition). Renamed 1:1 pairs in the region may be dissolved into it.
5. **Reordered calls**: leftovers near each other are paired out of order when their cost is low
   (independent ops the other framework runs in a different order).

Nothing is dropped: whatever is not paired is returned as unmatched.

Example:
    >>> import numpy as np
    >>> from netparity.align.model import Call
    >>> from netparity.align.features import Interner, build_feats
    >>> from netparity.trace import Record
    >>> def call(op, shape):
    ...     c = Call(0, "op", "", op, op, 0, 0, "forward", 0, 0, "")
    ...     c.outputs = [Record(kind="op", shape=shape, stats={"mean": 1.0, "std": 1.0,
    ...                                                        "min": 0.0, "max": 3.0, "norm": 2.0})]
    ...     return c
    >>> ids = Interner()
    >>> A = build_feats([call("conv", (2,)), call("relu", (2,))], ids)
    >>> B = build_feats([call("conv", (2,)), call("sigmoid", (3,)), call("relu", (2,))], ids)
    >>> pairs, ua, ub = align_seq(A, list(range(2)), B, list(range(3)))
    >>> [(p.a, p.b) for p in pairs], ua, ub
    ([([0], [0]), ([1], [2])], [], [1])
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from netparity.align.features import (
    GAP,
    MATCH_LIMIT,
    SCALAR_LIMIT,
    STATS_VETO,
    STATS_WEIGHT,
    Feats,
    cost_matrix,
    pair_costs,
    row_distance,
    single_valued,
    stats_distance,
)
from netparity.sequences import longest_increasing

#: gaps up to this many cells go straight to dynamic programming
DP_CELLS = 40_000
#: anchorless gaps up to this many cells still get one DP; above, a sliding window
DP_MAX = 400_000
WINDOW = 300
#: anchors and out-of-order pairs need stronger evidence than an in-order DP pair
ANCHOR_LIMIT = 1.0
CROSS_LIMIT = 1.0
CROSS_WINDOW = 24
#: statistics distance below which two tensors count as "the same data" for N:M groups
GROUP_TENSOR_LIMIT = 0.2
GROUP_REGION = 40
GROUP_RUN = 16
#: problems up to this many cells get their costs and distances from one batched computation
#: (:func:`blocks`) and run the dynamic programming in plain Python: on a few dozen cells a
#: NumPy call costs more than the arithmetic it does
SMALL_CELLS = 256
#: a 1:1 pair grows into an N:1 group only when its outputs differ at least this much ...
GROW_MIN = 1e-3
#: ... and the grown group's last output is at least this much closer (ratio of distances)
GROW_GAIN = 0.5


@dataclass
class Pair:
    """Indices into the two :class:`Feats`: 1:1 when both lists hold one index."""

    a: list[int]
    b: list[int]
    method: str
    cost: float
    note: str = ""


_lis = longest_increasing  # order-consistent anchors (shared with ckpt mapping)


def increasing_chain(values: np.ndarray) -> np.ndarray:
    """:func:`_lis` of an int array, as an array; an increasing array (pairs that all keep
    execution order, the usual case) is its own chain and skips the Python loop."""
    if len(values) < 2 or bool((values[1:] > values[:-1]).all()):
        return np.arange(len(values), dtype=np.int64)
    return np.array(_lis(values.tolist()), dtype=np.int64)


def _elementwise_cost(A: Feats, ia: np.ndarray, B: Feats, ib: np.ndarray, modules: bool) -> np.ndarray:
    c = (A.name[ia] != B.name[ib]).astype(np.float64)
    c += np.where(A.shp[ia] == B.shp[ib], 0.0, np.where(A.out_shape[ia] == B.out_shape[ib], 0.5, 1.0))
    d = row_distance(A.stats[ia], B.stats[ib])
    c += STATS_WEIGHT * d
    if modules:
        c += np.where(A.leaf[ia] == B.leaf[ib], 0.0, 0.5)
        return np.where(d > STATS_VETO, np.inf, c)
    return np.where((d > STATS_VETO) | (A.view[ia] != B.view[ib]), np.inf, c)


def _anchor_keys(F: Feats) -> list[np.ndarray]:
    """Anchor keys, computed once per feature set: op+shapes+magnitude, op+shapes,
    shapes+magnitude."""
    if F.anchor_keys is None:
        F.anchor_keys = [F.sig * 4096 + (F.bucket + 2048), F.sig, F.shp * 4096 + (F.bucket + 2048)]
    return F.anchor_keys


@dataclass
class Block:
    """Costs and distances among the calls of one small problem ``(ia, ib)``, made in advance
    for many problems at once by :func:`blocks`: flat lists, cell ``(i, j)`` at ``i * m + j``
    for the ``i``-th call of ``ia`` and the ``j``-th of ``ib``."""

    m: int
    cost: list[float]  # cost_matrix
    out: list[float]  # statistics distance of the first outputs
    din: list[float]  # N:M detection: primary inputs' distance, inf where shapes differ ...
    dout: list[float]  # ... first outputs' distance, inf where shapes differ or scalars differ

    def rows(self, flat: list[float], ra: list[int], rb: list[int]) -> list[list[float]]:
        m = self.m
        if len(rb) == m and rb[0] == 0 and rb[-1] == m - 1:
            return [flat[r * m : r * m + m] for r in ra]
        return [[flat[r * m + c] for c in rb] for r in ra]


def _group_dists(A: Feats, ia: np.ndarray, B: Feats, ib: np.ndarray, din: np.ndarray,
                 out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distances N:M detection compares, for broadcastable index arrays: primary inputs
    (``din``) and first outputs (``out``), infinite where their shapes differ; and an output
    that is a single value (a scalar, or a constant) has no distribution to compare: two
    unrelated scalars fall within the group limit by coincidence (a LLaMA port's first squared
    gradient norm, 2.51, against the reference's clipping norm, 2.80, grouped the loss with the
    clipping and failed a faithful port), so a group ending on such outputs needs them to agree
    as a computation does."""
    din = np.where(A.in_shape[ia] == B.in_shape[ib], din, np.inf)
    dout = np.where(A.out_shape[ia] == B.out_shape[ib], out, np.inf)
    flat = single_valued(A.stats[ia]) & single_valued(B.stats[ib])
    return din, np.where(flat & (dout >= SCALAR_LIMIT), np.inf, dout)


def blocks(A: Feats, B: Feats,
           problems: list[tuple[np.ndarray, np.ndarray]]) -> list[Block | None]:
    """:class:`Block`\\ s of the problems ``(ia, ib)`` of at most :data:`SMALL_CELLS` cells (None
    for the others), computed together: thousands of small problems (the op partitions that do
    not pair by position) in a few whole-array operations instead of a few each."""
    n = np.array([len(x) for x, _ in problems], dtype=np.int64)
    m = np.array([len(y) for _, y in problems], dtype=np.int64)
    cells = n * m
    small = (cells > 0) & (cells <= SMALL_CELLS)
    out: list[Block | None] = [None] * len(problems)
    ks = np.nonzero(small)[0]
    if not len(ks):
        return out
    n, m, cells = n[ks], m[ks], cells[ks]
    cat_a = np.concatenate([problems[k][0] for k in ks.tolist()]).astype(np.int64)
    cat_b = np.concatenate([problems[k][1] for k in ks.tolist()]).astype(np.int64)
    off_a, off_b, off_c = np.cumsum(n) - n, np.cumsum(m) - m, np.cumsum(cells) - cells
    part = np.repeat(np.arange(len(ks)), cells)
    local = np.arange(int(cells.sum()), dtype=np.int64) - off_c[part]
    i = local // m[part]
    ra = off_a[part] + i
    rb = off_b[part] + (local - i * m[part])
    ga, gb = cat_a[ra], cat_b[rb]
    cost, dist = pair_costs(A, ga, B, gb)
    din = row_distance(A.in_stats(cat_a)[ra], B.in_stats(cat_b)[rb])
    din, dout = _group_dists(A, ga, B, gb, din, dist)
    lists = [x.tolist() for x in (cost, dist, din, dout)]
    for k, mk, lo, hi in zip(ks.tolist(), m.tolist(), off_c.tolist(), (off_c + cells).tolist()):
        out[k] = Block(mk, *(x[lo:hi] for x in lists))
    return out


class _Dist:
    """Pairing costs and statistics distances among the calls of one problem, as Python lists:
    looked up in its :class:`Block` when it has one, else computed when asked."""

    def __init__(self, A: Feats, B: Feats, modules: bool, block: Block | None = None,
                 pos_a: dict[int, int] | None = None, pos_b: dict[int, int] | None = None):
        self.A, self.B, self.modules, self.block = A, B, modules, block
        self.pos_a, self.pos_b = pos_a or {}, pos_b or {}

    def _at(self, xa: list[int], xb: list[int]) -> tuple[list[int], list[int]]:
        return [self.pos_a[x] for x in xa], [self.pos_b[x] for x in xb]

    def cost(self, sa: np.ndarray, sb: np.ndarray) -> np.ndarray:
        """:func:`cost_matrix` of ``A[sa]`` x ``B[sb]``."""
        if self.block is None:
            return cost_matrix(self.A, sa, self.B, sb, self.modules)
        rows = self.cost_rows(sa.tolist(), sb.tolist())
        return np.array(rows, dtype=np.float64).reshape(len(sa), len(sb))

    def cost_rows(self, xa: list[int], xb: list[int]) -> list[list[float]]:
        blk = self.block
        if blk is None:
            return self.cost(np.array(xa, dtype=np.int64), np.array(xb, dtype=np.int64)).tolist()
        return blk.rows(blk.cost, *self._at(xa, xb))

    def out_rows(self, xa: list[int], xb: list[int]) -> list[list[float]]:
        """:func:`stats_distance` of the first outputs of ``A[xa]`` x ``B[xb]``."""
        blk = self.block
        if blk is None:
            return stats_distance(self.A.stats[xa], self.B.stats[xb]).tolist()
        return blk.rows(blk.out, *self._at(xa, xb))

    def out_pairs(self, xa: list[int], xb: list[int]) -> list[float]:
        """:func:`row_distance` of the first outputs of ``A[xa[k]]`` and ``B[xb[k]]``."""
        blk = self.block
        if blk is None:
            return row_distance(self.A.stats[xa], self.B.stats[xb]).tolist()
        m, out = blk.m, blk.out
        return [out[self.pos_a[x] * m + self.pos_b[y]] for x, y in zip(xa, xb)]

    def group_rows(self, xa: list[int],
                   xb: list[int]) -> tuple[list[list[float]], list[list[float]]]:
        """:func:`_group_dists` of ``A[xa]`` x ``B[xb]``."""
        blk = self.block
        if blk is None:
            ia, ib = np.array(xa, dtype=np.int64), np.array(xb, dtype=np.int64)
            din = stats_distance(self.A.in_stats(ia), self.B.in_stats(ib))
            out = stats_distance(self.A.stats[ia], self.B.stats[ib])
            gin, gout = _group_dists(self.A, ia[:, None], self.B, ib[None, :], din, out)
            return gin.tolist(), gout.tolist()
        pa, pb = self._at(xa, xb)
        return blk.rows(blk.din, pa, pb), blk.rows(blk.dout, pa, pb)


def _dp_rows(C: np.ndarray) -> list[tuple[int, int, float]]:
    """Global alignment with gap cost :data:`GAP` of the rows and columns of the cost matrix
    ``C`` (pairs cost at least :data:`MATCH_LIMIT` are never made), vectorised row by row;
    returns the (row, column, cost) of the paired cells in order."""
    n, m = C.shape
    C = np.where(C < MATCH_LIMIT, C, np.inf)
    D = np.empty((n + 1, m + 1))
    D[0] = np.arange(m + 1) * GAP
    choice = np.empty((n + 1, m + 1), np.int8)
    jj = np.arange(m + 1) * GAP
    E = np.empty(m + 1)
    for i in range(1, n + 1):
        prev = D[i - 1]
        diag = prev[:-1] + C[i - 1]
        up = prev[1:] + GAP
        E[0] = prev[0] + GAP
        np.minimum(diag, up, out=E[1:])
        T = np.minimum.accumulate(E - jj) + jj
        D[i] = T
        ch = np.where(diag <= up, 0, 1).astype(np.int8)
        row = choice[i]
        row[0] = 1
        row[1:] = np.where(T[1:] < E[1:] - 1e-9, 2, ch)
    return _trace_back(choice, C, n, m)


def _dp_small(C: list[list[float]]) -> list[tuple[int, int, float]]:
    """:func:`_dp_rows` in plain Python, for small matrices given as lists of rows: the same
    arithmetic in the same order (row minimum of ``E - jj``, plus ``jj``), so the same pairs and
    costs; tests/align/test_seq_blocks.py checks it."""
    inf = math.inf
    m = len(C[0]) if C else 0
    jj = [j * GAP for j in range(m + 1)]
    prev = list(jj)
    choice: list[list[int]] = [[]]
    masked: list[list[float]] = []
    for crow in C:
        row = [c if c < MATCH_LIMIT else inf for c in crow]
        masked.append(row)
        e = prev[0] + GAP
        low = e - jj[0]
        cur = [low + jj[0]]
        ch = [1]
        for j in range(1, m + 1):
            diag = prev[j - 1] + row[j - 1]
            up = prev[j] + GAP
            e = diag if diag <= up else up
            v = e - jj[j]
            if v < low:
                low = v
            t = low + jj[j]
            cur.append(t)
            ch.append(2 if t < e - 1e-9 else (0 if diag <= up else 1))
        choice.append(ch)
        prev = cur
    return _trace_back(choice, masked, len(C), m)


def _trace_back(choice: Any, C: Any, n: int, m: int) -> list[tuple[int, int, float]]:
    """The paired cells of a DP's ``(n + 1, m + 1)`` choice table (0 pair, 1 skip a row, 2 skip
    a column) and their costs in ``C``: arrays or lists of rows."""
    pairs: list[tuple[int, int, float]] = []
    i, j = n, m
    while i > 0 and j > 0:
        c = choice[i][j]
        if c == 0:
            pairs.append((i - 1, j - 1, float(C[i - 1][j - 1])))
            i -= 1
            j -= 1
        elif c == 1:
            i -= 1
        else:
            j -= 1
    pairs.reverse()
    return pairs


class _Aligner:
    def __init__(self, A: Feats, B: Feats, modules: bool, diag_method: str,
                 dist: _Dist | None = None):
        self.A, self.B, self.modules, self.diag_method = A, B, modules, diag_method
        self.dist = dist if dist is not None else _Dist(A, B, modules)
        self.out: list[Pair] = []
        self.keys_a = _anchor_keys(A)
        self.keys_b = _anchor_keys(B)

    # -- dynamic programming -----------------------------------------------------------------
    def dp(self, sa: np.ndarray, sb: np.ndarray) -> list[tuple[int, int, float]]:
        """Global alignment of ``A[sa]`` and ``B[sb]``; returns (i, j, cost) of paired positions."""
        if len(sa) * len(sb) <= SMALL_CELLS:
            return _dp_small(self.dist.cost_rows(sa.tolist(), sb.tolist()))
        return _dp_rows(self.dist.cost(sa, sb))

    def _emit_dp(self, sa: np.ndarray, sb: np.ndarray) -> None:
        xa, xb = sa.tolist(), sb.tolist()
        for i, j, c in self.dp(sa, sb):
            self.out.append(Pair([xa[i]], [xb[j]], "dp", c))

    def _sliding(self, sa: np.ndarray, sb: np.ndarray) -> None:
        a, b = 0, 0
        half = WINDOW // 2
        while a < len(sa) and b < len(sb):
            ea, eb = min(a + WINDOW, len(sa)), min(b + WINDOW, len(sb))
            pairs = self.dp(sa[a:ea], sb[b:eb])
            last = ea == len(sa) and eb == len(sb)
            acc = pairs if last else [p for p in pairs if p[0] < half and p[1] < half]
            for i, j, c in acc:
                self.out.append(Pair([int(sa[a + i])], [int(sb[b + j])], "dp", c))
            if last:
                break
            if acc:
                a, b = a + acc[-1][0] + 1, b + acc[-1][1] + 1
            else:
                a, b = a + half, b + half

    # -- anchors ------------------------------------------------------------------------------
    def anchors(self, sa: np.ndarray, sb: np.ndarray) -> list[tuple[int, int, float]]:
        for ka_all, kb_all in zip(self.keys_a, self.keys_b):
            ka, kb = ka_all[sa], kb_all[sb]
            ua, ca = np.unique(ka, return_counts=True)
            ub, cb = np.unique(kb, return_counts=True)
            common = np.intersect1d(ua[ca == 1], ub[cb == 1], assume_unique=True)
            if not len(common):
                continue
            pa = np.nonzero(np.isin(ka, common, assume_unique=False))[0]
            pb = np.nonzero(np.isin(kb, common, assume_unique=False))[0]
            pa = pa[np.argsort(ka[pa], kind="stable")]
            pb = pb[np.argsort(kb[pb], kind="stable")]
            cost = _elementwise_cost(self.A, sa[pa], self.B, sb[pb], self.modules)
            ok = cost < ANCHOR_LIMIT
            pa, pb, cost = pa[ok], pb[ok], cost[ok]
            if not len(pa):
                continue
            order = np.argsort(pa, kind="stable")
            pa, pb, cost = pa[order], pb[order], cost[order]
            keep = _lis(pb.tolist())
            return [(int(pa[k]), int(pb[k]), float(cost[k])) for k in keep]
        return []

    def run(self, sa: np.ndarray, sb: np.ndarray) -> None:
        stack = [(sa, sb)]
        while stack:
            xa, xb = stack.pop()
            n, m = len(xa), len(xb)
            if n == 0 or m == 0:
                continue
            if n == m and n <= 256 and np.array_equal(self.A.sig[xa], self.B.sig[xb]):
                # the common case: the same ops with the same shapes in the same order
                cost = _elementwise_cost(self.A, xa, self.B, xb, self.modules)
                if bool((cost < ANCHOR_LIMIT).all()):
                    for i in range(n):
                        self.out.append(Pair([int(xa[i])], [int(xb[i])], self.diag_method, float(cost[i])))
                    continue
            if n * m <= DP_CELLS:
                self._emit_dp(xa, xb)
                continue
            anc = self.anchors(xa, xb)
            if not anc:
                if n * m <= DP_MAX:
                    self._emit_dp(xa, xb)
                else:
                    self._sliding(xa, xb)
                continue
            pi, pj = 0, 0
            for i, j, c in anc:
                self.out.append(Pair([int(xa[i])], [int(xb[j])], "anchor", c))
                stack.append((xa[pi:i], xb[pj:j]))
                pi, pj = i + 1, j + 1
            stack.append((xa[pi:], xb[pj:]))


def segments_all(flags: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Per consecutive segment of ``flags`` (lengths ``sizes``, all > 0): are all true?"""
    if not len(sizes):
        return np.zeros(0, dtype=bool)
    bad = np.concatenate(([0], np.cumsum(~flags)))
    ends = np.cumsum(sizes)
    return np.asarray(bad[ends] == bad[ends - sizes])


def _ops_of(F: Feats, i: int) -> tuple[str, str]:
    return F.names[i], F.natives[i]


def _find_runs(F: Feats, seq: list[int], pattern: tuple[str, ...]) -> list[list[int]]:
    """Non-overlapping runs of ``seq`` whose op names (canonical or native) spell ``pattern``."""
    out: list[list[int]] = []
    k = 0
    n = len(pattern)
    while k + n <= len(seq):
        if all(pattern[t] in _ops_of(F, seq[k + t]) for t in range(n)):
            out.append(seq[k : k + n])
            k += n
        else:
            k += 1
    return out


def _groups_in_region(A: Feats, ra: list[int], B: Feats, rb: list[int],
                      free_a: set[int], free_b: set[int], dist: _Dist) -> list[Pair]:
    """N:M groups among the calls of one region (see the module docstring, step 4)."""
    if not ra or not rb or len(ra) + len(rb) < 3:
        return []
    ra, rb = ra[:GROUP_REGION], rb[:GROUP_REGION]
    din, dout = dist.group_rows(ra, rb)
    # the search below looks at the cells of dout under the limit only
    near = [[f for f, v in enumerate(row) if v < GROUP_TENSOR_LIMIT] for row in dout]
    view_a, view_b = A.view, B.view
    found: list[Pair] = []
    t0 = 0
    s = 0
    while s < len(ra):
        hit = None
        for t in range(t0, len(rb)):
            if din[s][t] >= GROUP_TENSOR_LIMIT:
                continue
            best: tuple[float, int, int, int] | None = None
            for e in range(min(GROUP_RUN, len(ra) - s)):
                row = dout[s + e]
                for col in near[s + e]:
                    f = col - t
                    if f < 0 or f >= GROUP_RUN or (e == 0 and f == 0):
                        continue
                    members_a, members_b = ra[s : s + e + 1], rb[t : t + f + 1]
                    if not (any(x in free_a for x in members_a)
                            or any(x in free_b for x in members_b)):
                        continue
                    if all(view_a[x] for x in members_a) != all(view_b[x] for x in members_b):
                        continue  # rearranged data on one side, a computation on the other
                    key = (row[col], -(e + f), e, f)
                    if best is None or key < best:
                        best = key
            if best is not None:
                hit = (t, best[2], best[3], best[0])
                break
        if hit is None:
            s += 1
            continue
        t, e, f, d = hit
        found.append(Pair(ra[s : s + e + 1], rb[t : t + f + 1], "stats", STATS_WEIGHT * d,
                          "N:M: first inputs and last outputs agree"))
        s, t0 = s + e + 1, t + f + 1
    return found


def align_seq(
    A: Feats,
    ia: list[int],
    B: Feats,
    ib: list[int],
    *,
    op_groups: list[tuple[tuple[str, ...], tuple[str, ...]]] | None = None,
    diag_method: str = "anchor",
    block: Block | None = None,
) -> tuple[list[Pair], list[int], list[int]]:
    """Align the op calls ``A[ia]`` with ``B[ib]`` (index lists in execution order), N:M groups
    included (module calls: :func:`align_fixed`).

    Args:
        op_groups: op-name groups from a mapping (``(("linear",), ("matmul", "add"))``): runs
            spelling them are paired first, in order, and kept as given.
        diag_method: method recorded for the "same ops in the same order" fast path.
        block: the problem's costs and distances, made in advance by :func:`blocks` for
            exactly these ``ia`` and ``ib`` (the result is the same without it).

    Returns:
        (pairs sorted by first reference index, unmatched reference indices, unmatched candidate
        indices).
    """
    fixed: list[Pair] = []
    taken_a: set[int] = set()
    taken_b: set[int] = set()
    for ga, gb in op_groups or []:
        ra = _find_runs(A, [x for x in ia if x not in taken_a], ga)
        rb = _find_runs(B, [x for x in ib if x not in taken_b], gb)
        for xa, xb in zip(ra, rb):
            fixed.append(Pair(list(xa), list(xb), "mapping", 0.0, "op group from mapping"))
            taken_a.update(xa)
            taken_b.update(xb)
    pos_a = {x: k for k, x in enumerate(ia)}
    pos_b = {x: k for k, x in enumerate(ib)}
    # fixed pairs that keep execution order split the problem into independent gaps
    fixed.sort(key=lambda p: pos_a[p.a[0]])
    chain = [fixed[k] for k in _lis([pos_b[p.b[0]] for p in fixed])] if fixed else []
    if block is None and len(ia) * len(ib) <= SMALL_CELLS:
        block = blocks(A, B, [(np.array(ia, dtype=np.int64), np.array(ib, dtype=np.int64))])[0]
    dist = _Dist(A, B, False, block, pos_a, pos_b)
    al = _Aligner(A, B, False, diag_method, dist)
    pa, pb = 0, 0
    arr_a, arr_b = np.array(ia, dtype=np.int64), np.array(ib, dtype=np.int64)
    for p in [*chain, None]:
        ea = pos_a[p.a[0]] if p else len(ia)
        eb = pos_b[p.b[0]] if p else len(ib)
        sa, sb = arr_a[pa:ea], arr_b[pb:eb]
        if taken_a or taken_b:
            sa = np.array([x for x in sa.tolist() if x not in taken_a], dtype=np.int64)
            sb = np.array([x for x in sb.tolist() if x not in taken_b], dtype=np.int64)
        al.run(sa, sb)
        if p:
            pa = max(pos_a[x] for x in p.a) + 1
            pb = max(pos_b[x] for x in p.b) + 1
    pairs = al.out + fixed
    pairs.sort(key=lambda p: pos_a[p.a[0]])
    matched_a = {x for p in pairs for x in p.a}
    matched_b = {x for p in pairs for x in p.b}
    if len(matched_a) < len(ia) or len(matched_b) < len(ib):
        pairs = _grow_pairs(A, ia, B, ib, pairs, pos_a, pos_b, matched_a, matched_b, dist)
        matched_a = {x for p in pairs for x in p.a}
        matched_b = {x for p in pairs for x in p.b}
        pairs = _add_groups(A, ia, B, ib, pairs, pos_a, pos_b, matched_a, matched_b, dist)
        matched_a = {x for p in pairs for x in p.a}
        matched_b = {x for p in pairs for x in p.b}
    un_a = [x for x in ia if x not in matched_a]
    un_b = [x for x in ib if x not in matched_b]
    if un_a and un_b:
        ends = sorted((pos_a[p.a[-1]], pos_b[p.b[-1]]) for p in pairs)
        extra = _cross(un_a, [pos_a[x] for x in un_a], un_b, [pos_b[x] for x in un_b],
                       [e[0] for e in ends], [e[1] for e in ends], dist)
        if extra:
            pairs.extend(extra)
            pairs.sort(key=lambda p: pos_a[p.a[0]])
            got_a = {x for p in extra for x in p.a}
            got_b = {x for p in extra for x in p.b}
            un_a = [x for x in un_a if x not in got_a]
            un_b = [x for x in un_b if x not in got_b]
    return pairs, un_a, un_b


def align_fixed(
    A: Feats, B: Feats, fa: np.ndarray, fb: np.ndarray, *, modules: bool,
) -> tuple[list[Pair], list[Pair], np.ndarray, np.ndarray]:
    """Align all of ``A`` with all of ``B`` around 1:1 fixed pairs ``fa[k] <-> fb[k]`` given as
    arrays: the calls between the fixed pairs that keep execution order go through the sequence
    aligner gap by gap, the rest through the out-of-order pass; no N:M groups.

    The module pass fixes tens of thousands of pairs by path and leaves a few calls to align;
    building a :class:`Pair` per fixed pair and walking every (empty) gap between them would cost
    more than the alignment itself.

    Returns:
        (pairs the aligner made in the gaps, pairs made out of execution order, unmatched
        reference indices, unmatched candidate indices); the fixed pairs are not repeated.
    """
    n, m = len(A), len(B)
    order = np.argsort(fa, kind="stable")
    fa, fb = fa[order], fb[order]
    keep = increasing_chain(fb)
    ca, cb = fa[keep], fb[keep]
    free_a = np.ones(n, dtype=bool)
    free_a[fa] = False
    free_b = np.ones(m, dtype=bool)
    free_b[fb] = False
    # gap k lies between chain pairs k-1 and k; only gaps with free calls on both sides align
    lo_a, hi_a = np.concatenate(([0], ca + 1)), np.concatenate((ca, [n]))
    lo_b, hi_b = np.concatenate(([0], cb + 1)), np.concatenate((cb, [m]))
    cs_a = np.concatenate(([0], np.cumsum(free_a)))
    cs_b = np.concatenate(([0], np.cumsum(free_b)))
    na, nb = cs_a[hi_a] - cs_a[lo_a], cs_b[hi_b] - cs_b[lo_b]
    busy = (na > 0) & (nb > 0)
    # the free calls of the busy gaps, gap after gap (a free call's gap: chain pairs before it)
    ga, gb = np.nonzero(free_a)[0], np.nonzero(free_b)[0]
    ga, gb = ga[busy[np.searchsorted(ca, ga)]], gb[busy[np.searchsorted(cb, gb)]]
    na, nb = na[busy], nb[busy]
    # gaps holding the same ops in the same order at a low cost pair by position (as
    # _Aligner.run would pair each): one vectorised check for all of them
    even = (na == nb) & (na <= 256)
    ea, eb, sizes = ga[np.repeat(even, na)], gb[np.repeat(even, nb)], na[even]
    cost = _elementwise_cost(A, ea, B, eb, modules)
    diag = np.zeros(len(na), dtype=bool)
    diag[even] = segments_all(A.sig[ea] == B.sig[eb], sizes) & segments_all(
        cost < ANCHOR_LIMIT, sizes)
    al = _Aligner(A, B, modules, "anchor")
    out = al.out
    at_a, at_b, at_c = 0, 0, 0
    for n_k, m_k, ev, dg in zip(na.tolist(), nb.tolist(), even.tolist(), diag.tolist()):
        sa, sb = ga[at_a : at_a + n_k], gb[at_b : at_b + m_k]
        if dg:
            for x, y, c in zip(sa.tolist(), sb.tolist(), cost[at_c : at_c + n_k].tolist()):
                out.append(Pair([x], [y], "anchor", c))
        else:
            al.run(sa, sb)
        at_a, at_b, at_c = at_a + n_k, at_b + m_k, at_c + (n_k if ev else 0)
    for p in al.out:
        free_a[p.a] = False
        free_b[p.b] = False
    un_a, un_b = np.nonzero(free_a)[0], np.nonzero(free_b)[0]
    extra: list[Pair] = []
    if len(un_a) and len(un_b):
        ends_a = np.concatenate((fa, [p.a[-1] for p in al.out])).astype(np.int64)
        ends_b = np.concatenate((fb, [p.b[-1] for p in al.out])).astype(np.int64)
        o = np.lexsort((ends_b, ends_a))
        ua, ub = un_a.tolist(), un_b.tolist()
        extra = _cross(ua, ua, ub, ub, ends_a[o].tolist(), ends_b[o].tolist(), al.dist)
        for p in extra:
            free_a[p.a] = False
            free_b[p.b] = False
        un_a, un_b = np.nonzero(free_a)[0], np.nonzero(free_b)[0]
    return al.out, extra, un_a, un_b


def _grow_pairs(A: Feats, ia: list[int], B: Feats, ib: list[int], pairs: list[Pair],
                pos_a: dict[int, int], pos_b: dict[int, int],
                matched_a: set[int], matched_b: set[int], dist: _Dist) -> list[Pair]:
    """Extend a 1:1 pair over the unmatched calls that follow it on one side (N:1 groups).

    ``aten.convolution(x, w, b)`` against MindSpore's ``Conv2D(x, w)`` + ``BiasAdd``: the two
    convolutions share their first input and almost their output (the bias is small), so they
    pair 1:1 as identical ops and become a region border that :func:`_add_groups` never looks
    across -- the ``BiasAdd`` stays unmatched and the convolution is compared without its bias.
    A pair grows into ``[a] <-> [b, b+1, ...]`` (or the mirror) when the calls after ``b`` are
    free, contiguous in execution order, and the last one's output matches ``a``'s output
    clearly better than ``b``'s own (at most half the statistics distance, below the group
    limit); a pair whose outputs already agree (distance < ``GROW_MIN``) is left alone, unless
    their shapes differ: ``addmm`` on the flattened activation against ``Dense`` on the 3-D
    one grows over the ``view`` after ``addmm``, so the two outputs compared have one shape.
    """
    free_a = set(ia) - matched_a
    free_b = set(ib) - matched_b
    out: list[Pair] = []
    grow = [p for p in pairs if len(p.a) == 1 and len(p.b) == 1 and p.method != "mapping"]
    d_now = dist.out_pairs([p.a[0] for p in grow], [p.b[0] for p in grow])
    cur = dict(zip(map(id, grow), d_now))
    for p in pairs:
        d_cur = cur.get(id(p))
        if d_cur is None:
            out.append(p)
            continue
        a, b = p.a[0], p.b[0]
        best: tuple[float, list[int], list[int]] | None = None
        # outputs of different shapes (addmm's [32, 64] against Dense's [2, 16, 64]): the
        # view after the shorter side's call completes the computation whatever the gain
        reshaped = A.out_shape[a] != B.out_shape[b]
        if d_cur >= GROW_MIN or reshaped:
            for side in ("b", "a"):
                seq, pos, free = (ib, pos_b, free_b) if side == "b" else (ia, pos_a, free_a)
                start = pos[b if side == "b" else a]
                run: list[int] = []
                for x in seq[start + 1 : start + GROUP_RUN]:
                    if x not in free:
                        break
                    run.append(x)
                if not run:
                    continue
                if side == "b":
                    same = [B.out_shape[x] == A.out_shape[a] for x in run]
                    ds = dist.out_rows([a], run)[0]
                else:
                    same = [A.out_shape[x] == B.out_shape[b] for x in run]
                    ds = [r[0] for r in dist.out_rows(run, [b])]
                for k, (sm, d) in enumerate(zip(same, ds)):
                    if (sm and d < GROUP_TENSOR_LIMIT and (reshaped or d <= GROW_GAIN * d_cur)
                            and (best is None or d < best[0])):
                        members = run[: k + 1]
                        best = (d, [a, *members] if side == "a" else [a],
                                [b, *members] if side == "b" else [b])
        if best is None:
            out.append(p)
            continue
        d, ga, gb = best
        free_a.difference_update(ga)
        free_b.difference_update(gb)
        out.append(Pair(ga, gb, "stats", STATS_WEIGHT * d,
                        "N:M: a pair extended over the next calls, whose output matches better"))
    return out


def _add_groups(A: Feats, ia: list[int], B: Feats, ib: list[int], pairs: list[Pair],
                pos_a: dict[int, int], pos_b: dict[int, int],
                matched_a: set[int], matched_b: set[int], dist: _Dist) -> list[Pair]:
    """Regions between identical-op pairs that hold unmatched calls: look for N:M groups."""
    # hard: 1:1 pairs of identical ops (region borders); soft: other 1:1 pairs, which an N:M
    # group may dissolve; kept: hard pairs, mapping pairs and groups
    hard: list[Pair] = []
    hard_keep: list[Pair] = []
    soft: dict[int, Pair] = {}
    name_a, name_b = A.name, B.name
    for p in pairs:
        if len(p.a) != 1 or len(p.b) != 1 or p.method == "mapping":
            hard_keep.append(p)
        elif name_a[p.a[0]] == name_b[p.b[0]]:
            hard.append(p)
            hard_keep.append(p)
        else:
            soft[id(p)] = p
    # monotone chain of hard pairs as region borders
    hb = [pos_b[p.b[0]] for p in hard]
    chain = [hard[k] for k in _lis(hb)] if hard else []
    borders = [(-1, -1)] + [(pos_a[p.a[0]], pos_b[p.b[0]]) for p in chain] + [(len(ia), len(ib))]
    soft_at_a = {p.a[0]: p for p in soft.values()}
    dissolved: set[int] = set()
    new: list[Pair] = []
    free_a = set(ia) - matched_a
    free_b = set(ib) - matched_b
    hard_a = {x for p in hard_keep for x in p.a}
    hard_b = {x for p in hard_keep for x in p.b}
    for (a0, b0), (a1, b1) in zip(borders, borders[1:]):
        ra = [x for x in ia[a0 + 1 : a1] if x not in hard_a]
        rb = [x for x in ib[b0 + 1 : b1] if x not in hard_b]
        if not (any(x in free_a for x in ra) or any(x in free_b for x in rb)):
            continue
        groups = _groups_in_region(A, ra, B, rb, free_a, free_b, dist)
        for g in groups:
            new.append(g)
            for x in g.a:
                sp = soft_at_a.get(x)
                if sp is not None:
                    dissolved.add(id(sp))
            gb = set(g.b)
            for sp in soft.values():
                if sp.b[0] in gb:
                    dissolved.add(id(sp))
    if not new:
        return pairs
    out = [p for p in pairs if id(p) not in dissolved] + new
    # a dissolved soft pair whose calls did not all go into groups leaves them unmatched, which
    # is reported; keep its other half paired only when neither call was consumed
    in_groups_a = {x for g in new for x in g.a}
    in_groups_b = {x for g in new for x in g.b}
    for p in pairs:
        if id(p) in dissolved and not (set(p.a) & in_groups_a) and not (set(p.b) & in_groups_b):
            out.append(p)
    out.sort(key=lambda p: pos_a[p.a[0]])
    return out


def _cross(un_a: list[int], upos_a: list[int], un_b: list[int], upos_b: list[int],
           anchors_a: list[int], anchors_b: list[int], dist: _Dist) -> list[Pair]:
    """Pair leftovers out of order when the evidence is strong (step 5).

    ``upos_*`` are the leftovers' positions in their sequences (increasing); ``anchors_*`` the
    positions of the last calls of the pairs made, sorted, which give each reference position
    its expected candidate position.
    """
    if len(un_a) * len(un_b) > 4_000_000:
        return []
    ub_pos = upos_b
    cand: list[tuple[float, int, int]] = []
    for x, p in zip(un_a, upos_a):
        k = bisect.bisect_right(anchors_a, p) - 1
        exp = anchors_b[k] + (p - anchors_a[k]) if k >= 0 else p
        lo = bisect.bisect_left(ub_pos, exp - CROSS_WINDOW)
        hi = bisect.bisect_right(ub_pos, exp + CROSS_WINDOW)
        if lo >= hi:
            continue
        js = un_b[lo:hi]
        for j, cj in zip(js, dist.cost_rows([x], js)[0]):
            if cj < CROSS_LIMIT:
                cand.append((cj, x, j))
    cand.sort()
    used_a: set[int] = set()
    used_b: set[int] = set()
    out: list[Pair] = []
    for c, x, j in cand:
        if x in used_a or j in used_b:
            continue
        used_a.add(x)
        used_b.add(j)
        out.append(Pair([x], [j], "stats", c, "paired out of execution order"))
    return out
