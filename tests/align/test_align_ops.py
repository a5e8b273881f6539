"""Op-level alignment: renamed ops, unrelated statistics, reordering, N:M groups."""

from __future__ import annotations

import numpy as np
from align_helpers import MS, TORCH, run_net

from netparity.align import align_traces


def op_pairs(al):
    return [([c.op for c in m.ref], [c.op for c in m.cand], m.method) for m in al.matches
            if m.ref[0].kind == "op"]


def flat(builder, name, fw, ops):
    """Write a flat op sequence: ops = [(native, inputs, output)], no module records."""
    tb = builder(name, fw)
    for native, ins, out in ops:
        tb.op(native, ins, out)
    return tb.close()


def test_ops_across_frameworks_in_module_calls(builder):
    a, b = builder("torch", "torch"), builder("ms", "mindspore")
    run_net(a, TORCH)
    run_net(b, MS, noise=1e-3)
    al = align_traces(a.close(), b.close(), level="op")
    assert not al.unmatched_ref and not al.unmatched_cand
    ops = op_pairs(al)
    # addmm(bias, x, w^T) <-> Dense(x, w, b): the arguments differ in order, the call pairs
    assert [m for m in ops if m[:2] == (["linear"], ["linear"])]
    assert all(m.ref[0].kind == "op" for m in al.matches)


def test_op_renamed_matched_unrelated_not(builder):
    r = np.random.default_rng(0)
    x = r.standard_normal((4, 16)).astype(np.float32)
    y = np.tanh(x)
    # reference: tanh; candidate: a fused kernel with an unknown name, same data
    a = flat(builder, "a", "torch", [("aten.exp.default", [x], np.exp(x)),
                                     ("aten.tanh.default", [x], y)])
    b = flat(builder, "b", "mindspore", [("Exp", [x], np.exp(x)),
                                         ("CustomTanhKernel", [x], y * (1 + 1e-4))])
    al = align_traces(a, b, level="op")
    assert [p[:2] for p in op_pairs(al)] == [(["exp"], ["exp"]), (["tanh"], ["custom_tanh_kernel"])]
    # same shapes, different name, unrelated statistics: not paired, both reported
    z = (r.standard_normal((4, 16)) * 5 + 3).astype(np.float32)
    c = flat(builder, "c", "mindspore", [("Exp", [x], np.exp(x)), ("Other", [x], z)])
    al = align_traces(a, c, level="op")
    assert [p[:2] for p in op_pairs(al)] == [(["exp"], ["exp"])]
    assert [u.op for u in al.unmatched_ref] == ["tanh"]
    assert [u.op for u in al.unmatched_cand] == ["other"]


def test_same_name_same_shape_unrelated_stats_not_matched(builder):
    r = np.random.default_rng(1)
    x = r.standard_normal((8, 8)).astype(np.float32)
    a = flat(builder, "a", "torch", [("aten.relu.default", [x], np.maximum(x, 0))])
    w = (r.standard_normal((8, 8)) * 10 - 20).astype(np.float32)
    b = flat(builder, "b", "torch", [("aten.relu.default", [w], np.abs(w) * 3 + 50)])
    al = align_traces(a, b, level="op")
    assert not al.matches
    assert len(al.unmatched_ref) == 1 and len(al.unmatched_cand) == 1


def test_reordered_independent_ops(builder):
    r = np.random.default_rng(2)
    x = r.standard_normal((4, 4)).astype(np.float32)
    y = (r.standard_normal((3, 5)) + 2).astype(np.float32)
    a = flat(builder, "a", "torch", [("aten.mul.Tensor", [x, x], x * x), ("aten.add.Tensor", [y, y], y + y),
                                     ("aten.exp.default", [x], np.exp(x))])
    b = flat(builder, "b", "torch", [("aten.add.Tensor", [y, y], y + y), ("aten.mul.Tensor", [x, x], x * x),
                                     ("aten.exp.default", [x], np.exp(x))])
    al = align_traces(a, b, level="op")
    assert sorted(p[:2] for p in op_pairs(al)) == [(["add"], ["add"]), (["exp"], ["exp"]), (["mul"], ["mul"])]
    assert not al.unmatched_ref and not al.unmatched_cand


def test_insertions_and_deletions_reported(builder):
    r = np.random.default_rng(3)
    xs = [(r.standard_normal((4, 4)) * (k + 1)).astype(np.float32) for k in range(6)]
    ref = [("aten.relu.default", [x], np.maximum(x, 0)) for x in xs]
    cand = list(ref)
    extra = (r.standard_normal((7,)) + 9).astype(np.float32)
    cand.insert(2, ("aten.sigmoid.default", [extra], 1 / (1 + np.exp(-extra))))
    del cand[5]  # drops ref op 4
    al = align_traces(flat(builder, "a", "torch", ref), flat(builder, "b", "torch", cand), level="op")
    assert len(al.matches) == 5
    assert [u.inputs[0].stats["max"] for u in al.unmatched_ref] == [float(xs[4].max())]
    assert [u.op for u in al.unmatched_cand] == ["sigmoid"]


def test_linear_vs_matmul_add_group(builder):
    a, b = builder("torch", "torch"), builder("ms", "mindspore")
    run_net(a, TORCH)
    run_net(b, MS, linear_as_matmul_add=True)
    al = align_traces(a.close(), b.close(), level="op")
    groups = [m for m in al.matches if m.is_group]
    assert [([c.op for c in g.ref], [c.op for c in g.cand]) for g in groups] == [
        (["linear"], ["matmul", "add"])]
    assert not al.unmatched_ref and not al.unmatched_cand
    assert al.to_mapping()["ops"] == [{"ref": ["linear"], "cand": ["matmul", "add"]}]


def _layer_norm_traces(builder):
    r = np.random.default_rng(4)
    x = (r.standard_normal((4, 32)) * 2 + 1).astype(np.float32)
    g = (r.standard_normal(32) * 0.1 + 1).astype(np.float32)
    be = (r.standard_normal(32) * 0.5 + 0.3).astype(np.float32)
    mu = x.mean(-1, keepdims=True)
    xc = x - mu
    sq = xc**2
    var = sq.mean(-1, keepdims=True)
    ve = var + 1e-5
    rs = 1 / np.sqrt(ve)
    xh = xc * rs
    xg = xh * g
    y = xg + be
    pre = ("aten.gelu.default", [x], x * 0.5 * (1 + np.tanh(x)))
    post = ("aten.relu.default", [y], np.maximum(y, 0))
    a = flat(builder, "a", "torch", [pre, ("aten.native_layer_norm.default", [x, g, be], y), post])
    b = flat(builder, "b", "mindspore", [
        ("GeLU", [x], x * 0.5 * (1 + np.tanh(x))),
        ("ReduceMean", [x], mu), ("Sub", [x, mu], xc), ("Pow", [xc], sq), ("ReduceMean", [sq], var),
        ("Add", [var], ve), ("Rsqrt", [ve], rs), ("Mul", [xc, rs], xh), ("Mul", [xh, g], xg),
        ("Add", [xg, be], y), ("ReLU", [y], np.maximum(y, 0))])
    return a, b


def test_layer_norm_decomposition_group(builder):
    a, b = _layer_norm_traces(builder)
    al = align_traces(a, b, level="op")
    groups = [m for m in al.matches if m.is_group]
    assert len(groups) == 1
    g = groups[0]
    assert [c.op for c in g.ref] == ["layer_norm"]
    assert [c.op for c in g.cand] == ["mean", "sub", "pow", "mean", "add", "rsqrt", "mul", "mul", "add"]
    assert not al.unmatched_ref and not al.unmatched_cand
