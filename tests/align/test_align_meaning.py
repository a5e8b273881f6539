"""Ops paired by what they compute, not by name, argument position or look-alike statistics:
a view never pairs with a computing op, ``addmm`` pairs with ``MatMul + BiasAdd`` through its
data input (not its bias, which comes first), and a norm computed as one op on one side and as
square, sum, square root on the other pairs as one computation."""

from __future__ import annotations

import numpy as np
import pytest
from test_align_ops import flat

from netparity.align import align_traces


def _rows_normalised(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    x = rng.standard_normal(shape).astype(np.float32)
    return (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)


def test_view_of_the_input_never_pairs_with_a_layer_norm(builder):
    # the input is already normalised row by row, so the layer norm's output has the very
    # statistics of an alias of its input: only the op's meaning tells them apart
    rng = np.random.default_rng(0)
    x = _rows_normalised(rng, (8, 32))
    g, b = np.ones(32, np.float32), np.zeros(32, np.float32)
    y = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    ref = flat(builder, "a", "torch", [("aten.alias.default", [x], x),
                                       ("aten.tanh.default", [x], np.tanh(x))])
    cand = flat(builder, "b", "mindspore", [("LayerNorm", [x, g, b], y),
                                            ("Tanh", [x], np.tanh(x))])
    al = align_traces(ref, cand, level="op")
    pairs = [([c.op for c in m.ref], [c.op for c in m.cand]) for m in al.matches]
    assert pairs == [(["tanh"], ["tanh"])]
    assert [c.op for c in al.unmatched_ref] == ["identity"]
    assert [c.op for c in al.unmatched_cand] == ["layer_norm"]


def test_views_still_pair_with_views(builder):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 16, 8)).astype(np.float32)
    x2 = x.reshape(32, 8)
    ref = flat(builder, "a", "torch", [("aten.view.default", [x], x2),
                                       ("aten.relu.default", [x2], np.maximum(x2, 0))])
    cand = flat(builder, "b", "mindspore", [("Reshape", [x], x2),
                                            ("ReLU", [x2], np.maximum(x2, 0))])
    al = align_traces(ref, cand, level="op")
    assert [(m.ref[0].op, m.cand[0].op) for m in al.matches] == [("reshape", "reshape"),
                                                                  ("relu", "relu")]


def test_addmm_pairs_with_matmul_bias_add_through_its_data_input(builder):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 16, 8)).astype(np.float32)
    w = rng.standard_normal((4, 8)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    x2 = x.reshape(32, 8)
    mm = x2 @ w.T
    out = mm + bias
    ref = flat(builder, "a", "torch", [
        ("aten.view.default", [x], x2), ("aten.t.default", [w], w.T),
        ("aten.addmm.default", [bias, x2, w.T], out),
        ("aten.view.default", [out], out.reshape(2, 16, 4))])
    cand = flat(builder, "b", "mindspore", [
        ("Reshape", [x], x2), ("MatMul", [x2, w], mm), ("BiasAdd", [mm, bias], out),
        ("Reshape", [out], out.reshape(2, 16, 4))])
    al = align_traces(ref, cand, level="op")
    pairs = [([c.native for c in m.ref], [c.native for c in m.cand]) for m in al.matches]
    assert (["aten.addmm.default"], ["MatMul", "BiasAdd"]) in pairs
    assert [c.native for c in al.unmatched_ref] == ["aten.t.default"]
    assert not al.unmatched_cand


def test_norm_pairs_with_its_decomposition(builder):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64,)).astype(np.float32)
    sq = x * x
    s = sq.sum(keepdims=True).reshape(())
    n = np.sqrt(s)
    pre = rng.standard_normal((64,)).astype(np.float32)
    ref = flat(builder, "a", "torch", [
        ("aten.mul.Tensor", [pre, pre * 0 + 2], pre * 2),
        ("aten.linalg_vector_norm.default", [x], n),
        ("aten.div.Tensor", [x, n], x / n)])
    cand = flat(builder, "b", "mindspore", [
        ("Mul", [pre, pre * 0 + 2], pre * 2),
        ("Square", [x], sq), ("ReduceSum", [sq], s), ("Sqrt", [s], n),
        ("Div", [x, n], x / n)])
    al = align_traces(ref, cand, level="op")
    groups = [([c.op for c in m.ref], [c.op for c in m.cand]) for m in al.matches if m.is_group]
    assert groups == [(["linalg_vector_norm"], ["square", "sum", "sqrt"])]
    assert not al.unmatched_ref and not al.unmatched_cand


def _linear_pair(builder, cand_ops: str, *, bias_shift: float = 0.0):
    """A BERT-style projection of a 3-D activation: PyTorch flattens it to 2-D and runs
    ``addmm(bias, x2d, w.t())``; the port runs ``Dense`` on the 3-D tensor, either as one
    primitive or as ``Reshape, MatMul, BiasAdd, Reshape``. Statistics only, as by default."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 16, 8)).astype(np.float32)
    w = rng.standard_normal((4, 8)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    x2 = x.reshape(32, 8)
    out = x2 @ w.T + bias
    ref = builder("ref", "torch")
    h = ref.enter("proj", "torch.nn.Linear", [x])
    ref.op("aten.view.default", [x], x2)
    ref.op("aten.t.default", [w], w.T)
    ref.op("aten.addmm.default", [bias, x2, w.T], out)
    ref.op("aten.view.default", [out], out.reshape(2, 16, 4))
    ref.exit(h, [out.reshape(2, 16, 4)])
    cb = bias + bias_shift
    cout = (x2 @ w.T + cb).reshape(2, 16, 4)
    cand = builder("cand", "mindspore")
    h = cand.enter("proj", "mindspore.nn.Dense", [x])
    if cand_ops == "primitive":
        cand.op("Dense", [x, w, cb], cout)
    else:
        mm = x2 @ w.T
        cand.op("Reshape", [x], x2)
        cand.op("MatMul", [x2, w], mm)
        cand.op("BiasAdd", [mm, cb], mm + cb)
        cand.op("Reshape", [mm + cb], cout)
    cand.exit(h, [cout])
    return ref.close(), cand.close()


def _compare_ops(ref, cand):
    import netparity

    return netparity.compare(ref, cand, level="op")


@pytest.mark.parametrize("ops", ["primitive", "decomposed"])
def test_dense_on_3d_input_is_not_compared_argument_by_argument(builder, ops):
    r = _compare_ops(*_linear_pair(builder, ops))
    bad = [(p.key, p.reason) for p in r.pairs if p.status != "pass"]
    assert r and not bad, bad
    # what is compared has the same shape on both sides (up to size-1 dims)
    for p in r.pairs:
        assert [d for d in p.ref_shape if d != 1] == [d for d in p.cand_shape if d != 1]
    # the projection's output is compared, at op level too
    assert any(p.role == "output" and p.ref_shape == [2, 16, 4] for p in r.pairs)


def test_a_wrong_bias_is_still_named_at_the_projection(builder):
    r = _compare_ops(*_linear_pair(builder, "decomposed", bias_shift=0.5))
    assert not r
    fails = [p for p in r.pairs if p.status == "fail"]
    assert fails and all(p.module == "proj" for p in fails)
    assert any(p.role == "output" for p in fails)
