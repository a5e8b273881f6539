"""The module pass and the op pass of one (step, direction) bucket, on call tables.

Both passes see every call of a bucket, tens of thousands on a large trace, while the sequence
aligner (:mod:`netparity.align.seq`) only has work to do on the few calls that do not pair by
path or by position. So the bulk decisions -- equal paths and call indices, op partitions of
paired module calls that hold the same ops in the same order -- are made on whole arrays here,
and only what remains goes through the aligner, with the same result as deciding call by call.

Indices are positions in the bucket's own call lists (``ra``, ``cb``: rows of the two
:class:`~netparity.align.table.CallTable`s). Pairs come back as :class:`Chunk`s in the order
they were found: that order decides the module map's votes and is kept as the call-by-call
version had it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from netparity.align.features import Feats
from netparity.align.names import norm_path
from netparity.align.seq import (
    ANCHOR_LIMIT,
    Pair,
    _elementwise_cost,
    align_fixed,
    align_seq,
    blocks,
    increasing_chain,
    segments_all,
)
from netparity.align.table import CallTable, StringPool
from netparity.mapfile import Mapping


@dataclass
class Chunk:
    """Pairs found together: 1:1 pairs as arrays (``a[k] <-> b[k]``), or N:M-capable
    :class:`Pair` objects from the sequence aligner (``pairs``)."""

    a: np.ndarray
    b: np.ndarray
    cost: np.ndarray
    method: np.ndarray  # object array of method names
    note: np.ndarray  # object array of notes
    pairs: list[Pair] | None = None

    @classmethod
    def bulk(cls, a: np.ndarray, b: np.ndarray, cost: np.ndarray, method: str,
             note: str = "") -> Chunk:
        n = len(a)
        return cls(a, b, cost, filled(n, method), filled(n, note))

    @classmethod
    def of(cls, pairs: list[Pair]) -> Chunk:
        """Aligner pairs; ``a``/``b`` hold each pair's first index (execution-order anchors)."""
        a = np.array([p.a[0] for p in pairs], dtype=np.int64)
        b = np.array([p.b[0] for p in pairs], dtype=np.int64)
        cost = np.array([p.cost for p in pairs], dtype=np.float64)
        return cls(a, b, cost, np.array([p.method for p in pairs], dtype=object),
                   np.array([p.note for p in pairs], dtype=object), pairs)

    def one_to_one(self) -> np.ndarray:
        """Mask of the 1:1 pairs."""
        if self.pairs is None:
            return np.ones(len(self.a), dtype=bool)
        return np.array([len(p.a) == 1 and len(p.b) == 1 for p in self.pairs], dtype=bool)


def filled(n: int, value: str) -> np.ndarray:
    """An object array of ``n`` references to ``value``: ``np.full(n, value, dtype=object)``
    makes a new string per element (via a unicode array), ~30x slower on 100k pairs."""
    out = np.empty(n, dtype=object)
    out.fill(value)
    return out


def pair_codes(xa: np.ndarray, ya: np.ndarray, xb: np.ndarray,
               yb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One int64 code per ``(x, y)`` pair, equal codes for equal pairs across both sides."""
    x = np.concatenate((xa, xb))
    y = np.concatenate((ya, yb))
    if not len(x):
        return xa.astype(np.int64), xb.astype(np.int64)
    y0 = int(y.min())
    span = int(y.max()) - y0 + 1
    if int(x.min()) >= 0 and (int(x.max()) + 1) * span < 2**62:
        code = x * span + (y - y0)
    else:  # far outside what captures produce; still exact
        code = np.unique(np.stack((x, y), axis=1), axis=0, return_inverse=True)[1].reshape(-1)
    return code[: len(xa)], code[len(xa) :]


def lookup_last(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """For each query, the last index ``j`` with ``keys[j] == query`` (as a dict built by
    assigning ``keys`` in order would answer), or -1."""
    if not len(keys) or not len(queries):
        return np.full(len(queries), -1, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    pos = np.searchsorted(sk, queries, side="right") - 1
    hit = (pos >= 0) & (sk[np.maximum(pos, 0)] == queries)
    return np.where(hit, order[np.maximum(pos, 0)], -1)


def first_claims(idx: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Positions in ``idx`` (processed in order) that claim a target nobody claimed before."""
    if not len(idx):
        return idx
    _, first = np.unique(targets, return_index=True)
    return idx[np.sort(first)]


# ---- modules -------------------------------------------------------------------------------

@dataclass
class ModulePairs:
    """Module pairs of one bucket sorted by reference position, and the leftovers."""

    pairs: Chunk
    un_a: np.ndarray
    un_b: np.ndarray


def module_pass(A: Feats, ra: np.ndarray, B: Feats, cb: np.ndarray, rt: CallTable,
                ct: CallTable, mp: Mapping, paths: StringPool) -> ModulePairs:
    """Pair module calls: mapping, equal path and call index, unique normalised path, then
    the sequence aligner between those (see :mod:`netparity.align.core`, step 1)."""
    n, m = len(ra), len(cb)
    mod_a, call_a = rt.module[ra], rt.call[ra]
    mod_b, call_b = ct.module[cb], ct.call[cb]
    used_a = np.zeros(n, dtype=bool)
    used_b = np.zeros(m, dtype=bool)
    taken: list[tuple[np.ndarray, np.ndarray, str, str]] = []

    def take(ia: np.ndarray, jb: np.ndarray, method: str, note: str = "") -> None:
        used_a[ia] = True
        used_b[jb] = True
        taken.append((ia, jb, method, note))

    if mp.modules or mp.rules:
        take(*_mapping_pairs(mod_a, call_a, mod_b, call_b, mp, paths), "mapping")
    code_a, code_b = pair_codes(mod_a, call_a, mod_b, call_b)
    j = lookup_last(code_b, code_a)
    ok = (~used_a) & (j >= 0)
    ok[ok] = ~used_b[j[ok]]
    idx = first_claims(np.nonzero(ok)[0], j[ok])
    take(idx, j[idx], "path")
    if not used_a.all() and not used_b.all():
        take(*_structure_pairs(A, mod_a, call_a, used_a, B, mod_b, call_b, used_b, paths),
             "structure", "names normalised")
    fa = np.concatenate([t[0] for t in taken]).astype(np.int64)
    fb = np.concatenate([t[1] for t in taken]).astype(np.int64)
    meth = np.concatenate([filled(len(t[0]), t[2]) for t in taken])
    note = np.concatenate([filled(len(t[0]), t[3]) for t in taken])
    new, extra, un_a, un_b = align_fixed(A, B, fa, fb, modules=True)
    cost = np.zeros(len(fa))
    if new or extra:
        got = Chunk.of(new + extra)
        fa, fb = np.concatenate((fa, got.a)), np.concatenate((fb, got.b))
        meth, note = np.concatenate((meth, got.method)), np.concatenate((note, got.note))
        cost = np.concatenate((cost, got.cost))
    o = np.argsort(fa, kind="stable")
    return ModulePairs(Chunk(fa[o], fb[o], cost[o], meth[o], note[o]), un_a, un_b)


def _mapping_pairs(mod_a: np.ndarray, call_a: np.ndarray, mod_b: np.ndarray,
                   call_b: np.ndarray, mp: Mapping,
                   paths: StringPool) -> tuple[np.ndarray, np.ndarray]:
    """Module calls the mapping sends to a candidate path with the same call index."""
    index_b = {k: j for j, k in enumerate(zip(mod_b.tolist(), call_b.tolist()))}
    ia: list[int] = []
    jb: list[int] = []
    used: set[int] = set()
    targets: dict[int, int | None] = {}
    for i, (mod, call) in enumerate(zip(mod_a.tolist(), call_a.tolist())):
        if mod not in targets:
            t = mp.module_target(paths.strs[mod])
            targets[mod] = None if t is None else paths.ids.get(t)
        tm = targets[mod]
        j = index_b.get((tm, call)) if tm is not None else None
        if j is not None and j not in used:
            used.add(j)
            ia.append(i)
            jb.append(j)
    return np.array(ia, dtype=np.int64), np.array(jb, dtype=np.int64)


def _structure_pairs(A: Feats, mod_a: np.ndarray, call_a: np.ndarray, used_a: np.ndarray,
                     B: Feats, mod_b: np.ndarray, call_b: np.ndarray, used_b: np.ndarray,
                     paths: StringPool) -> tuple[np.ndarray, np.ndarray]:
    """Leftover module calls whose normalised path and call index are unique and equal on both
    sides, with the same class or first output shape."""
    strs = paths.strs
    free_a = np.nonzero(~used_a)[0].tolist()
    free_b = np.nonzero(~used_b)[0].tolist()
    norm_b: dict[tuple[str, int], list[int]] = defaultdict(list)
    for j in free_b:
        norm_b[(norm_path(strs[mod_b[j]]), int(call_b[j]))].append(j)
    keys_a = [(norm_path(strs[mod_a[i]]), int(call_a[i])) for i in free_a]
    norm_a = Counter(keys_a)
    ia: list[int] = []
    jb: list[int] = []
    for i, k in zip(free_a, keys_a):
        js = norm_b.get(k, [])
        if len(js) == 1 and norm_a[k] == 1:
            j = js[0]
            if A.name[i] == B.name[j] or A.out_shape[i] == B.out_shape[j]:
                ia.append(i)
                jb.append(j)
    return np.array(ia, dtype=np.int64), np.array(jb, dtype=np.int64)


# ---- ops -------------------------------------------------------------------------------------

@dataclass
class Partitions:
    """Ops grouped by the module call running them, in order of each group's first op."""

    code: np.ndarray  # (module, module_call) code per partition
    start: np.ndarray  # offsets into ``members``
    size: np.ndarray
    members: np.ndarray  # op positions, partition after partition, in execution order

    def each(self, ps: np.ndarray) -> list[np.ndarray]:
        """Members of each of partitions ``ps``, one array per partition."""
        m = self.members
        return [m[s : s + z] for s, z in zip(self.start[ps].tolist(), self.size[ps].tolist())]

    def gather(self, ps: np.ndarray) -> np.ndarray:
        """Members of partitions ``ps``, concatenated."""
        sizes = self.size[ps]
        offs = np.cumsum(sizes) - sizes
        total = int(sizes.sum())
        return self.members[np.repeat(self.start[ps] - offs, sizes) + np.arange(total)]


def partitions(code: np.ndarray) -> Partitions:
    uniq, first, inv = np.unique(code, return_index=True, return_inverse=True)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(uniq))
    part = rank[inv.reshape(-1)]
    members = np.argsort(part, kind="stable")
    size = np.bincount(part, minlength=len(uniq))
    start = np.cumsum(size) - size
    return Partitions(uniq[np.argsort(rank)], start, size, members)


@dataclass
class OpContext:
    """What the op pass takes from the module pass and the alignment so far."""

    call_mod: np.ndarray  # paired reference module calls: module id, call index ...
    call_idx: np.ndarray
    to_mod: np.ndarray  # ... and those of their candidate counterparts
    to_idx: np.ndarray
    path_map: np.ndarray  # reference module id -> most voted candidate module id, or -1
    mp: Mapping
    paths: StringPool
    cross_framework: bool


def op_pass(A: Feats, ra: np.ndarray, B: Feats, cb: np.ndarray, rt: CallTable,
            ct: CallTable, cx: OpContext) -> tuple[list[Chunk], np.ndarray, np.ndarray]:
    """Pair op calls partition by partition, then the leftovers gap by gap (core, step 2).

    Returns the pairs in the order they were made and the unmatched positions of both sides.
    """
    mod_a, mc_a = rt.module[ra], rt.module_call[ra]
    mod_b, mc_b = ct.module[cb], ct.module_call[cb]
    own_mod, own_call, trusted = _owners(mod_a, mc_a, cx)
    na = len(mod_a)
    # partition keys and owner keys in one code space: (module id, call index)
    c1, code_b = pair_codes(np.concatenate((mod_a, own_mod)), np.concatenate((mc_a, own_call)),
                            mod_b, mc_b)
    pa, pb = partitions(c1[:na]), partitions(code_b)
    first_of = pa.members[pa.start]
    target = lookup_last(pb.code, c1[na:][first_of])
    claim = first_claims(np.nonzero(target >= 0)[0], target[target >= 0])
    claimed = np.zeros(len(pa.size), dtype=bool)
    claimed[claim] = True
    used_b = np.zeros(len(pb.size), dtype=bool)
    used_b[target[claim]] = True
    diag = "anchor" if cx.cross_framework else "path"
    chunks, slow = _fast_partitions(A, B, pa, pb, claim, target[claim], trusted[first_of], diag)
    pool_a = [pa.gather(np.nonzero(~claimed)[0])]
    pool_b = [pb.gather(np.nonzero(~used_b)[0])]
    # only these calls can reach N:M detection, which needs first-input statistics
    A.warm_inputs(np.concatenate([*pool_a, *(x for x, _ in slow)]))
    B.warm_inputs(np.concatenate([*pool_b, *(y for _, y in slow)]))
    # thousands of small partition pairs: their costs and distances in one batch, their
    # pairs in one chunk (in the same order as one chunk per partition pair)
    made: list[Pair] = []
    for (ia, ib), blk in zip(slow, blocks(A, B, slow)):
        p, ua, ub = align_seq(A, ia.tolist(), B, ib.tolist(), op_groups=cx.mp.ops,
                              diag_method=diag, block=blk)
        made += p
        if ua:
            pool_a.append(np.array(ua, dtype=np.int64))
        if ub:
            pool_b.append(np.array(ub, dtype=np.int64))
    if made:
        chunks.append(Chunk.of(made))
    left_a = np.unique(np.concatenate(pool_a)).astype(np.int64)
    left_b = np.unique(np.concatenate(pool_b)).astype(np.int64)
    if len(left_a) and len(left_b):
        more, left_a, left_b = _align_leftovers(A, left_a, B, left_b, chunks, cx.mp)
        chunks.extend(more)
    return chunks, left_a, left_b


def _owners(mod_a: np.ndarray, mc_a: np.ndarray,
            cx: OpContext) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each reference op's module call went: the paired call, else the module's most
    voted counterpart (same call index), else the mapping's target, else the same key.

    Returns the owner (module id, call index) per op, and whether the op's own module call is
    a paired one (its ops then pair by position whatever their values)."""
    q, k = pair_codes(mod_a, mc_a, cx.call_mod, cx.call_idx)
    j = lookup_last(k, q)
    trusted = j >= 0
    own_mod, own_call = mod_a.copy(), mc_a.copy()
    own_mod[trusted] = cx.to_mod[j[trusted]]
    own_call[trusted] = cx.to_idx[j[trusted]]
    pm = cx.path_map[mod_a]
    by_votes = ~trusted & (pm >= 0)
    own_mod[by_votes] = pm[by_votes]
    rest = ~trusted & ~by_votes
    if (cx.mp.modules or cx.mp.rules) and rest.any():
        targets: dict[int, int] = {}
        for i in np.nonzero(rest)[0].tolist():
            mod = int(mod_a[i])
            if mod not in targets:
                t = cx.mp.module_target(cx.paths.strs[mod])
                targets[mod] = -1 if t is None else cx.paths(t)
            if targets[mod] >= 0:
                own_mod[i] = targets[mod]
    return own_mod, own_call, trusted


def _fast_partitions(
    A: Feats, B: Feats, pa: Partitions, pb: Partitions, claim: np.ndarray, tgt: np.ndarray,
    trusted: np.ndarray, diag: str,
) -> tuple[list[Chunk], list[tuple[np.ndarray, np.ndarray]]]:
    """Claimed partition pairs holding the same ops with the same shapes in the same order pair
    by position (one vectorised cost check for all of them); the rest go to the aligner.

    Inside a paired module call (``trusted``) they pair whatever their values: a diverging op
    must stay paired so the comparison can report it. Returns the pairs and the partition pairs
    left to align, sig mismatches first, then cost failures, each in partition order.
    """
    la, lb = pa.size[claim], pb.size[tgt]
    same = la == lb
    cl, tl = claim[same], tgt[same]
    ia, ib = pa.gather(cl), pb.gather(tl)
    alike = segments_all(A.sig[ia] == B.sig[ib], pa.size[cl])
    fast, tfast = cl[alike], tl[alike]
    sizes = pa.size[fast]
    ia, ib = pa.gather(fast), pb.gather(tfast)
    cost = _elementwise_cost(A, ia, B, ib, False)
    ok = trusted[fast] | segments_all(cost < ANCHOR_LIMIT, sizes)
    keep = np.repeat(ok, sizes)
    chunks = [Chunk.bulk(ia[keep], ib[keep], cost[keep], diag)] if keep.any() else []
    mismatch = np.ones(len(claim), dtype=bool)
    mismatch[np.nonzero(same)[0][alike]] = False
    slow = list(zip(pa.each(claim[mismatch]), pb.each(tgt[mismatch])))
    slow += list(zip(pa.each(fast[~ok]), pb.each(tfast[~ok])))
    return chunks, slow


def _align_leftovers(A: Feats, left_a: np.ndarray, B: Feats, left_b: np.ndarray,
                     chunks: list[Chunk], mp: Mapping) -> tuple[list[Chunk], np.ndarray, np.ndarray]:
    """Leftover ops pair only inside the same gap of what is already paired (in execution
    order): two stray ops far apart in the network are not the same op, however alike."""
    if chunks:
        a0 = np.concatenate([c.a for c in chunks])
        b0 = np.concatenate([c.b for c in chunks])
    else:
        a0 = b0 = np.zeros(0, dtype=np.int64)
    o = np.lexsort((b0, a0))
    keep = increasing_chain(b0[o])
    chain_a, chain_b = a0[o][keep], b0[o][keep]
    ga = np.searchsorted(chain_a, left_a, side="left")
    gb = np.searchsorted(chain_b, left_b, side="left")
    out: list[Chunk] = []
    un_a: list[np.ndarray] = []
    un_b: list[np.ndarray] = []
    gaps = np.union1d(ga, gb)
    lo_a, hi_a = np.searchsorted(ga, gaps, "left"), np.searchsorted(ga, gaps, "right")
    lo_b, hi_b = np.searchsorted(gb, gaps, "left"), np.searchsorted(gb, gaps, "right")
    gap_calls = [(left_a[a0:a1], left_b[b0:b1]) for a0, a1, b0, b1 in
                 zip(lo_a.tolist(), hi_a.tolist(), lo_b.tolist(), hi_b.tolist())]
    both = [k for k, (xa, xb) in enumerate(gap_calls) if len(xa) and len(xb)]
    blk = dict(zip(both, blocks(A, B, [gap_calls[k] for k in both])))
    for k, (xa, xb) in enumerate(gap_calls):
        if k in blk:
            p, ua, ub = align_seq(A, xa.tolist(), B, xb.tolist(), op_groups=mp.ops,
                                  diag_method="anchor", block=blk[k])
            if p:
                out.append(Chunk.of(p))
            un_a.append(np.array(ua, dtype=np.int64))
            un_b.append(np.array(ub, dtype=np.int64))
        else:
            un_a.append(xa)
            un_b.append(xb)
    return (out, np.concatenate(un_a).astype(np.int64) if un_a else left_a[:0],
            np.concatenate(un_b).astype(np.int64) if un_b else left_b[:0])
