"""Single values (scalars) carry one number each, no distribution: two different ops whose
outputs are scalars pair only when the numbers agree as a computation's do, never because they
happen to fall within the statistics limit. From the LLaMA corpus pair: the reference's
gradient-clipping norm (``linalg_vector_norm``, 2.80) was paired with the port's first squared
gradient norm (``ReduceSum``, 2.51) and failed a faithful port at op level."""

from __future__ import annotations

import numpy as np
from test_align_ops import flat

from netparity.align import align_traces


def test_unrelated_scalars_of_different_ops_do_not_pair(builder):
    rng = np.random.default_rng(0)
    norms = rng.uniform(0.1, 1.0, 21).astype(np.float32)
    g = rng.standard_normal((16, 4)).astype(np.float32)
    g *= np.float32(np.sqrt(2.5068 / float(np.sum(g * g))))
    ref = flat(builder, "a", "torch", [
        ("aten.linalg_vector_norm.default", [norms], np.asarray(np.float32(2.8046)))])
    cand = flat(builder, "b", "mindspore", [
        ("ReduceSum", [g * g], np.asarray(np.float32(np.sum(g * g))))])  # 2.5068
    al = align_traces(ref, cand, level="op")
    assert not al.matches


def test_a_scalar_computed_another_way_still_pairs(builder):
    # the same value from another op (a norm as Sqrt of a sum of squares): one computation
    rng = np.random.default_rng(1)
    norms = rng.uniform(0.1, 1.0, 21).astype(np.float32)
    total = np.float32(np.linalg.norm(norms))
    ref = flat(builder, "a", "torch", [
        ("aten.linalg_vector_norm.default", [norms], np.asarray(total))])
    cand = flat(builder, "b", "mindspore", [
        ("Sqrt", [np.asarray(total * total)], np.asarray(total * np.float32(1 + 1e-6)))])
    al = align_traces(ref, cand, level="op")
    assert [(m.ref[0].op, m.cand[0].op) for m in al.matches] == [("linalg_vector_norm", "sqrt")]


def test_the_same_op_on_scalars_still_pairs_when_the_values_differ(builder):
    # a bug in a scalar computation is still reported, not hidden as unmatched
    ref = flat(builder, "a", "torch", [("aten.sum.default", [np.arange(4.0)], np.asarray(6.0))])
    cand = flat(builder, "b", "mindspore", [("ReduceSum", [np.arange(4.0)], np.asarray(6.6))])
    al = align_traces(ref, cand, level="op")
    assert [(m.ref[0].op, m.cand[0].op) for m in al.matches] == [("sum", "sum")]
