"""Module-level alignment: same framework by path + call index, renamed trees across frameworks,
parameters by name rules, unmatched reporting."""

from __future__ import annotations

from align_helpers import MS, TORCH, run_net

from netparity.align import align_traces, calls_from_records


def pairs(al, kind="module"):
    return {(m.ref[0].module, m.ref[0].call): (m.cand[0].module, m.cand[0].call)
            for m in al.matches if m.ref[0].kind == kind and not m.is_group}


def test_calls_from_records_groups_by_event(builder):
    tb = builder("a")
    run_net(tb, TORCH)
    tr = tb.close()
    calls = calls_from_records(tr.records())
    mods = [c for c in calls if c.kind == "module"]
    assert [c.module for c in mods[:4]] == ["", "conv1", "bn1", "relu"]
    conv_op = next(c for c in calls if c.kind == "op" and c.module == "conv1")
    assert [r.arg for r in conv_op.inputs] == ["0", "1"]
    assert conv_op.outputs[0].shape == (2, 8, 6, 6)
    # execution order: a module call comes before the ops it runs
    assert calls.index(mods[1]) < calls.index(conv_op)


def test_same_framework_path_and_call_index(builder):
    a, b = builder("a"), builder("b")
    run_net(a, TORCH, calls=2)
    run_net(b, TORCH, calls=2, noise=1e-3)
    al = align_traces(a.close(), b.close())
    p = pairs(al)
    assert p[("conv1", 0)] == ("conv1", 0)
    assert p[("conv1", 1)] == ("conv1", 1)
    assert all(m.method == "path" for m in al.matches)
    assert not al.unmatched_ref and not al.unmatched_cand
    assert len(al.params) == 9 and all(pp.method == "name" for pp in al.params)
    assert bool(al)


def test_renamed_module_tree_across_frameworks(builder):
    a, b = builder("torch", "torch"), builder("ms", "mindspore")
    run_net(a, TORCH)
    run_net(b, MS, noise=1e-3)
    al = align_traces(a.close(), b.close())
    mm = al.module_map
    assert mm["fc"] == "classifier"
    assert mm["layer1.0.downsample"] == "layer1.0.down_sample"
    # different child names inside the Sequential: matched by class, shapes, statistics
    assert mm["layer1.0.downsample.0"] == "layer1.0.down_sample.conv"
    assert mm["layer1.0.downsample.1"] == "layer1.0.down_sample.bn"
    assert mm["layer1.0.conv1"] == "layer1.0.conv1"
    assert not al.unmatched_ref and not al.unmatched_cand
    # parameters follow the module map and the BatchNorm rules
    pp = {p.ref.module: p.cand.module for p in al.params}
    assert pp["bn1.weight"] == "bn1.gamma"
    assert pp["bn1.running_var"] == "bn1.moving_variance"
    assert pp["layer1.0.downsample.0.weight"] == "layer1.0.down_sample.conv.weight"
    assert pp["layer1.0.downsample.1.weight"] == "layer1.0.down_sample.bn.gamma"
    assert pp["fc.bias"] == "classifier.bias"
    assert not al.unmatched_params_ref and not al.unmatched_params_cand


def test_inserted_and_deleted_modules_are_reported(builder):
    a, b = builder("a"), builder("b")
    run_net(a, TORCH, calls=2)
    run_net(b, TORCH, calls=1)
    al = align_traces(a.close(), b.close())
    # the second call of the stem exists only in the reference
    assert {(c.module, c.call) for c in al.unmatched_ref} == {("conv1", 1), ("bn1", 1), ("relu", 1)}
    assert not al.unmatched_cand
    assert not bool(al)
