"""Ops of different sizes are never paired (issue #28, item 8): a tanh GELU written out as its
formula has ``add``\\ s of the hidden width; a linear layer's bias ``add`` of another width next
to them looks alike (same op, related statistics) but is another computation. One op whose
output alone changed size from the same input (a padding bug) is still paired, to be reported."""

from __future__ import annotations

import numpy as np
from test_align_ops import flat

import netparity
from netparity.align import align_traces


def _gelu_tanh_parts(u):
    inner = np.float32(0.7978845608028654) * (u + np.float32(0.044715) * u * u * u)
    return inner, np.float32(1.0) + np.tanh(inner)


def test_a_gelu_add_never_pairs_with_a_bias_add_of_another_width(builder):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 8)).astype(np.float32)
    b = (0.1 * rng.standard_normal(8)).astype(np.float32)
    u = rng.standard_normal((2, 4, 32)).astype(np.float32)
    inner, one_plus = _gelu_tanh_parts(u)
    # the bias add's output drawn like the GELU add's (the same statistics, a quarter the size)
    h = one_plus.reshape(-1)[::4].reshape(8, 8)
    ref = flat(builder, "a", "torch", [("aten.tanh.default", [x], np.tanh(x)),
                                       ("aten.add.Tensor", [h - b, b], h)])
    cand = flat(builder, "b", "mindspore", [("Tanh", [x], np.tanh(x)),
                                            ("Add", [inner, np.float32(1.0)], one_plus)])
    al = align_traces(ref, cand, level="op")
    assert [(m.ref[0].op, m.cand[0].op) for m in al.matches] == [("tanh", "tanh")]
    assert [c.op for c in al.unmatched_ref] == ["add"]
    assert [c.op for c in al.unmatched_cand] == ["add"]
    r = netparity.compare(ref, cand, level="op")
    assert not [p for p in r.pairs if list(p.ref_shape) != list(p.cand_shape)]
    assert r.counts()["fail"] == 0


def test_one_op_whose_output_changed_size_from_the_same_input_is_still_paired(builder):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    k = rng.standard_normal((3, 3)).astype(np.float32)

    def conv(img, pad):
        p = np.pad(img, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        n = p.shape[-1] - 2
        return np.stack([[[[(p[0, c, i:i + 3, j:j + 3] * k).sum() for j in range(n)]
                           for i in range(n)] for c in range(2)]]).astype(np.float32)

    ref = flat(builder, "a", "torch", [("aten.relu.default", [x], np.maximum(x, 0)),
                                       ("aten.convolution.default", [x], conv(x, 1))])
    cand = flat(builder, "b", "mindspore", [("ReLU", [x], np.maximum(x, 0)),
                                            ("Conv2D", [x], conv(x, 0))])
    al = align_traces(ref, cand, level="op")
    assert [(m.ref[0].op, m.cand[0].op) for m in al.matches] == [("relu", "relu"),
                                                                  ("conv", "conv")]
    r = netparity.compare(ref, cand, level="op")
    bad = [p for p in r.pairs if p.status == "fail"]
    assert bad and "shape mismatch" in bad[0].reason
