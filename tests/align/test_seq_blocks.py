"""The sequence aligner's batched path gives exactly what computing problem by problem gives.

The op pass hands thousands of small partition pairs to ``align_seq`` with their costs and
distances made in one batch (``seq.blocks``), and small problems run the dynamic programming in
plain Python (``_dp_small``). Both are speed-ups only: every cost, distance, pair and
unmatched call must be the same as the NumPy code computes without them.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from netparity.align import align_traces, seq
from netparity.align.features import Feats, Interner, build_feats, cost_matrix, stats_distance
from netparity.align.model import Call
from netparity.align.seq import _Dist, _dp_rows, _dp_small, align_seq, blocks
from netparity.trace import Record, open_trace

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from align_speed import Gen  # noqa: E402

# costs around the thresholds, repeated so that ties between paths are common
_LEVELS = [0.0, 0.02, 0.5, 0.98, 1.0, 1.02, 1.5, 1.999, 2.0, 2.5, math.inf]


def test_small_dp_is_the_vectorised_dp() -> None:
    rng = np.random.default_rng(7)
    paired = 0
    for _ in range(3000):
        n, m = int(rng.integers(1, 11)), int(rng.integers(1, 11))
        if rng.random() < 0.5:
            C = rng.choice(_LEVELS, size=(n, m))
        else:
            C = rng.random((n, m)) * 3.0
            C[rng.random((n, m)) < 0.2] = math.inf
        got = _dp_small(C.tolist())
        assert got == _dp_rows(C), C
        paired += len(got)
    assert paired > 3000  # the matrices do pair calls, not only gaps


_OPS = ["conv", "add", "mul", "view", "cast", "matmul", "layer_norm", "mean"]
_SHAPES = [(4,), (2, 4), (8,), (2, 2)]


def _random_calls(rng: np.random.Generator, n: int) -> list[Call]:
    calls = []
    for k in range(n):
        op = _OPS[int(rng.integers(len(_OPS)))]
        c = Call(k, "op", "", op, op, 0, 0, "forward", 0, 0, "")

        def rec(k: int = k) -> Record:
            shape = _SHAPES[int(rng.integers(len(_SHAPES)))]
            kind = rng.integers(4)
            if kind == 0:  # no statistics at all
                return Record(kind="op", shape=shape, seq=k)
            mean = float(rng.choice([0.0, 1.0, 1.0001, 2.0, -3.0]))
            if kind == 1:  # a single value: min == max
                st = {"mean": mean, "std": 0.0, "min": mean, "max": mean, "norm": abs(mean) * 2}
            else:
                std = float(rng.choice([0.5, 0.5005, 1.0, 4.0]))
                st = {"mean": mean, "std": std, "min": mean - 2 * std, "max": mean + 2 * std,
                      "norm": math.sqrt(mean * mean + std * std) * 2}
            return Record(kind="op", shape=shape, seq=k, stats=st)

        c.inputs = [rec() for _ in range(int(rng.integers(0, 3)))]
        c.outputs = [rec()]
        calls.append(c)
    return calls


def _feats(seed: int, n: int) -> tuple[np.random.Generator, Feats, Feats]:
    """Two feature sets of ``n`` random calls each, and the generator for what follows."""
    rng = np.random.default_rng(seed)
    ids = Interner()
    return rng, build_feats(_random_calls(rng, n), ids), build_feats(_random_calls(rng, n), ids)


def test_blocks_hold_what_the_distance_functions_compute() -> None:
    rng, A, B = _feats(3, 300)
    problems = []
    for _ in range(200):
        n, m = int(rng.integers(1, 17)), int(rng.integers(1, 17))
        problems.append((rng.choice(300, n, replace=False).astype(np.int64),
                         rng.choice(300, m, replace=False).astype(np.int64)))
    problems.append((np.arange(40, dtype=np.int64), np.arange(40, dtype=np.int64)))  # too big
    got = blocks(A, B, problems)
    assert got[-1] is None
    vetoed = grouped = 0
    for (ia, ib), blk in zip(problems[:-1], got[:-1]):
        assert blk is not None
        xa, xb = ia.tolist(), ib.tolist()
        pos_a = {x: k for k, x in enumerate(xa)}
        pos_b = {x: k for k, x in enumerate(xb)}
        fast = _Dist(A, B, False, blk, pos_a, pos_b)
        slow = _Dist(A, B, False)
        cost = cost_matrix(A, ia, B, ib)
        assert np.array_equal(fast.cost(ia, ib), cost)
        assert fast.cost_rows(xa, xb) == cost.tolist()
        assert fast.out_rows(xa, xb) == stats_distance(A.stats[ia], B.stats[ib]).tolist()
        k = min(len(xa), len(xb))
        assert fast.out_pairs(xa[:k], xb[:k]) == slow.out_pairs(xa[:k], xb[:k])
        sub_a, sub_b = xa[::2], xb[1::2] or xb
        assert fast.cost_rows(sub_a, sub_b) == slow.cost_rows(sub_a, sub_b)
        assert fast.group_rows(xa, xb) == slow.group_rows(xa, xb)
        vetoed += int(np.isinf(cost).sum())
        grouped += sum(v < seq.GROUP_TENSOR_LIMIT for r in fast.group_rows(xa, xb)[1] for v in r)
    assert vetoed and grouped  # the data reach the vetoes and the group limit


def _alignment(ref: Path, cand: Path) -> list[tuple[object, ...]]:
    al = align_traces(open_trace(ref), open_trace(cand), level="op")
    out: list[tuple[object, ...]] = [
        (tuple(c.seq for c in m.ref), tuple(c.seq for c in m.cand), m.method, m.confidence, m.note)
        for m in al.matches]
    out.append(tuple(c.seq for c in al.unmatched_ref))
    out.append(tuple(c.seq for c in al.unmatched_cand))
    return out


def test_op_alignment_is_the_same_without_blocks(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The benchmark's PyTorch-vs-MindSpore pair: layer norms against their decomposition,
    linear against matmul + bias_add, inserted casts and clones -- with the batched blocks and
    the Python DP, and with neither (every problem computed by NumPy as it comes)."""
    ref, cand = tmp_path / "ref", tmp_path / "cand"
    Gen(ref, "torch", 2000, flat=False).run()
    Gen(cand, "mindspore", 2000, flat=False).run()
    fast = _alignment(ref, cand)
    monkeypatch.setattr(seq, "SMALL_CELLS", 0)
    assert blocks(*[build_feats([], Interner())] * 2, [(np.arange(1), np.arange(1))]) == [None]
    assert _alignment(ref, cand) == fast
    assert sum(len(p[0]) != len(p[1]) for p in fast[:-2]) > 10  # N:M groups were found


def test_align_seq_same_with_and_without_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """Random small problems (views, scalars, missing statistics, renamed ops): the pairs and
    leftovers of ``align_seq`` with a block are those made without one."""
    rng, A, B = _feats(11, 400)
    problems = []
    for _ in range(300):
        a0, b0 = int(rng.integers(0, 380)), int(rng.integers(0, 380))
        problems.append((list(range(a0, a0 + int(rng.integers(1, 14)))),
                         list(range(b0, b0 + int(rng.integers(1, 14))))))
    with_block = [align_seq(A, ia, B, ib) for ia, ib in problems]
    monkeypatch.setattr(seq, "SMALL_CELLS", 0)

    def flat(res: tuple[list[seq.Pair], list[int], list[int]]) -> tuple[object, ...]:
        pairs, ua, ub = res
        return tuple((p.a, p.b, p.method, p.cost, p.note) for p in pairs), tuple(ua), tuple(ub)

    without = [align_seq(A, ia, B, ib) for ia, ib in problems]
    assert [flat(r) for r in with_block] == [flat(r) for r in without]
    methods = {p.method for pairs, _, _ in with_block for p in pairs}
    assert {"dp", "stats"} <= methods  # DP pairs and N:M / out-of-order pairs both occur


@pytest.mark.parametrize("modules", [True, False])
def test_align_fixed_pairs_each_gap_as_the_aligner_does(modules: bool) -> None:
    """``align_fixed`` checks all gaps for "same ops in the same order" at once; each gap's
    pairs must be those of running the aligner on that gap alone, in gap order."""
    rng, A, _ = _feats(5, 200)
    # the candidate: the reference less ten calls, ten other calls renamed
    kept = np.sort(rng.choice(200, 190, replace=False))
    B = A.take(kept)
    B.sig[rng.choice(190, 10, replace=False)] = -1
    fa = np.sort(rng.choice(kept, 50, replace=False)).astype(np.int64)
    fb = np.searchsorted(kept, fa).astype(np.int64)
    fb[[3, 30]] = fb[[30, 3]]  # two fixed pairs out of order
    new, _, _, _ = seq.align_fixed(A, B, fa, fb, modules=modules)
    # the same, gap by gap through the aligner (what align_fixed did before the batch check)
    order = np.argsort(fa, kind="stable")
    ca, cb = fa[order], fb[order]
    keep = seq.increasing_chain(cb)
    ca, cb = ca[keep], cb[keep]
    free_a, free_b = np.ones(200, bool), np.ones(190, bool)
    free_a[fa], free_b[fb] = False, False
    al = seq._Aligner(A, B, modules, "anchor")
    for lo_a, hi_a, lo_b, hi_b in zip([0, *(ca + 1)], [*ca, 200], [0, *(cb + 1)], [*cb, 190]):
        sa = np.arange(lo_a, hi_a)[free_a[lo_a:hi_a]]
        sb = np.arange(lo_b, hi_b)[free_b[lo_b:hi_b]]
        if len(sa) and len(sb):
            al.run(sa, sb)
    assert [(p.a, p.b, p.method, p.cost) for p in new] == [
        (p.a, p.b, p.method, p.cost) for p in al.out]
    methods = [p.method for p in new]
    assert "anchor" in methods and "dp" in methods  # by position, and aligned
