"""Tensors of a matched call paired by meaning (``netparity.compare.argpairs``)."""

from __future__ import annotations

import numpy as np

from netparity.align.model import Call
from netparity.compare.argpairs import group_inputs, pair_tensors
from netparity.stats import compute_stats
from netparity.trace import Record

_RNG = np.random.default_rng(0)


def rec(a: np.ndarray, *, payload: bool = False) -> Record:
    r = Record(kind="op", shape=tuple(a.shape), dtype="float32", stats=compute_stats(a))
    if payload:
        r.shard = "s"  # has_payload: only whether a payload is stored matters here
    return r


def arr(*shape: int, loc: float = 0.0) -> np.ndarray:
    return (_RNG.standard_normal(shape) + loc).astype(np.float32)


def call(native: str, ins: list[Record], outs: list[Record]) -> Call:
    c = Call(0, "op", "", native, native, 0, 0, "forward", 0, 0, "")
    c.inputs, c.outputs = ins, outs
    return c


def test_same_shapes_pair_by_position():
    a, b = rec(arr(4, 8)), rec(arr(4, 8))
    assert pair_tensors([a, b], [b, a]) == [(a, b), (b, a)]


def test_addmm_arguments_pair_with_matmul_bias_add_by_shape():
    bias, x, wt = rec(arr(64)), rec(arr(32, 64)), rec(arr(64, 16))
    cx, cw, cb = rec(arr(32, 64)), rec(arr(16, 64)), rec(arr(64))
    got = pair_tensors([bias, x, wt], [cx, cw, cb])
    assert got == [(bias, cb), (x, cx)]  # the transposed weight has no same-shape partner


def test_other_layouts_pair_only_with_both_payloads():
    wt, w = rec(arr(64, 16), payload=True), rec(arr(16, 64), payload=True)
    assert pair_tensors([wt], [w]) == [(wt, w)]
    assert pair_tensors([rec(arr(64, 16))], [rec(arr(16, 64))]) == []


def test_a_3d_input_never_pairs_with_a_2d_one_on_statistics():
    x2, x3 = rec(arr(32, 64)), rec(arr(2, 16, 64))
    assert pair_tensors([x2], [x3]) == []


def test_same_native_op_pairs_by_position_and_primary_output_always_pairs():
    a, b = rec(arr(4, 8)), rec(arr(4, 7))  # a padding bug: the shape difference is the finding
    assert pair_tensors([a], [b], positional=True) == [(a, b)]
    assert pair_tensors([a], [b]) == []
    assert pair_tensors([a], [b], primary=True) == [(a, b)]


def test_group_pairs_only_unambiguous_related_tensors():
    q, k, v = (rec(arr(2, 4, 8, 8, loc=m)) for m in (0.0, 0.5, 1.0))
    probs = rec(np.full((2, 4, 8, 8), 1 / 8, np.float32))
    # q, k, v against q, k transposed (same statistics), probabilities, v: nothing is certain
    assert pair_tensors([q, k, v], [q, k, probs, v], group=True) == []
    x, bias = rec(arr(32, 64)), rec(arr(64))
    other = rec(arr(64, loc=50.0))  # a [64] tensor of unrelated values
    assert pair_tensors([x, bias], [x, bias], group=True) == [(x, x), (bias, bias)]
    assert pair_tensors([x, bias], [x, other], group=True) == [(x, x)]


def test_group_inputs_leave_out_what_the_group_computes():
    x, w, b = arr(32, 64), arr(16, 64), arr(16)
    mm = x @ w.T
    rx, rw, rmm, rb = rec(x), rec(w), rec(mm), rec(b)
    matmul = call("MatMul", [rx, rw], [rmm])
    bias_add = call("BiasAdd", [rec(mm), rb], [rec(mm + b)])  # mm recorded again as an input
    assert group_inputs([matmul, bias_add]) == [rx, rw, rb]
    assert group_inputs([matmul]) == [rx, rw]


def test_outputs_beyond_the_primary_pair_only_by_position():
    out, mean, rstd = rec(arr(8, 4)), rec(arr(4)), rec(arr(4, loc=3.0))
    c_out, c_a, c_b, c_c = rec(arr(8, 4)), rec(arr(4)), rec(arr(4, loc=3.0)), rec(arr(4))
    assert pair_tensors([out, mean, rstd], [c_out, c_a, c_b, c_c], first_only=True) == [
        (out, c_out)]
    assert len(pair_tensors([out, mean, rstd], [c_out, c_a, c_b], first_only=True)) == 3


def test_distances_in_one_pass_equal_the_matrices():
    """The group row path computes every distance a group may ask for as one flat pass
    (``rowpairs.GroupRows``); each value is bit for bit the per-matrix one pair_tensors
    uses, NaN, infinities and zeros included."""
    from netparity.align.features import row_distance
    from netparity.compare.argpairs import distances

    rng = np.random.default_rng(1)
    for _ in range(300):
        n, m = (int(x) for x in rng.integers(1, 9, 2))
        a = rng.standard_normal((n, 5)) * 10.0 ** rng.integers(-8, 8, (n, 5))
        b = a[rng.integers(0, n, m)] * (1 + rng.standard_normal((m, 5))
                                        * 10.0 ** rng.integers(-9, 0))
        for x in (a, b):
            x[rng.random(x.shape) < 0.05] = np.nan
            x[rng.random(x.shape) < 0.02] = np.inf
            x[rng.random(x.shape) < 0.05] = 0.0
        flat = row_distance(a[np.repeat(np.arange(n), m)], b[np.tile(np.arange(m), n)])
        want = [v for row in distances(a, b) for v in row]
        assert np.where(np.isfinite(flat), flat, 1.0).tolist() == want
