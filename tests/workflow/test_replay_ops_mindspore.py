"""Op-level replay of MindSpore primitives: what the op capture records is enough to make each
call again (``MindSporeAdapter.run_op``), and a candidate's MindSpore primitive is re-called on a
PyTorch reference's captured inputs (arguments paired by meaning, not position).

Real MindSpore (PyNative, CPU) and PyTorch throughout."""

from __future__ import annotations

import numpy as np
import pytest

ms = pytest.importorskip("mindspore", reason="MindSpore is not installed")

import netparity  # noqa: E402
from netparity.errors import FrameworkError  # noqa: E402
from netparity.frameworks.registry import adapter_for  # noqa: E402
from netparity.trace import open_trace  # noqa: E402


def _net():
    from mindspore import nn, ops

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, pad_mode="pad", padding=1, has_bias=True)
            self.bn = nn.BatchNorm2d(4)
            self.relu = nn.ReLU()
            self.dense = nn.Dense(4 * 36, 8)
            self.ln = nn.LayerNorm((8,), epsilon=1e-6)
            self.act = nn.GELU()  # the tanh approximation: one primitive
            self.exact = nn.GELU(approximate=False)  # erf: several

        def construct(self, x):
            h = self.relu(self.bn(self.conv(x)))
            h = self.exact(self.act(self.ln(self.dense(h.reshape(h.shape[0], -1)))))
            a = ops.softmax(ops.matmul(h, h.swapaxes(-1, -2)), -1)
            return ops.mean(a, 1, keep_dims=True)

    return Net()


def _calls(path):
    tr = open_trace(path)
    by: dict = {}
    for r in tr.records(step=0, kind="op"):
        by.setdefault((r.module, r.call, r.event), []).append(r)
    return tr, by


def test_every_captured_primitive_is_made_again_bit_for_bit(tmp_path):
    ms.set_context(mode=ms.PYNATIVE_MODE)
    net = _net()
    net.set_train(True)
    x = ms.Tensor(np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(np.float32))
    with netparity.capture(net, tmp_path / "t", level="op", payload="tensors") as cap:
        net(x)
        cap.step()
    tr, by = _calls(tmp_path / "t")
    a = adapter_for(net)
    natives = set()
    for recs in by.values():
        ins = [(r.arg, np.asarray(tr.tensor(r)), r.dtype) for r in recs if r.role == "input"]
        want = [np.asarray(tr.tensor(r)) for r in recs if r.role == "output"]
        extra = next(r.extra for r in recs if r.extra)
        got = a.run_op(recs[0].native, ins, extra.get("scalars", {}), extra["prim"])
        assert len(got) == len(want), recs[0].native
        # MindSpore's CPU BatchNorm leaves its outputs 1-2 unwritten: only the normalised
        # output (and the saved statistics, 3-4) are values
        for k, ((_, g), w) in enumerate(zip(got, want)):
            if recs[0].native != "BatchNorm" or k in (0, 3, 4):
                np.testing.assert_array_equal(g, w, err_msg=f"{recs[0].native} output {k}")
        natives.add(recs[0].native)
    # generated primitives (constructor arguments after the call's), legacy ones (Conv2D) and
    # one that appends its constructor arguments itself (BatchNorm, training mode)
    assert {"Conv2D", "BiasAdd", "BatchNorm", "ReLU", "MatMul", "LayerNorm", "GeLU", "Erf",
            "MatMulExt"} <= natives


def test_a_primitive_changed_in_its_constructor_gives_another_result(tmp_path):
    from mindspore import nn

    ms.set_context(mode=ms.PYNATIVE_MODE)
    ln = nn.LayerNorm((8,), epsilon=1e-7)
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32) * 1e-3
    with netparity.capture(ln, tmp_path / "t", level="op", payload="tensors") as cap:
        ln(ms.Tensor(x))
        cap.step()
    tr, by = _calls(tmp_path / "t")
    (recs,) = by.values()
    extra = next(r.extra for r in recs if r.extra)
    assert extra["prim"]["init"]["epsilon"] == pytest.approx(1e-7)
    ins = [(r.arg, np.asarray(tr.tensor(r)), r.dtype) for r in recs if r.role == "input"]
    a = adapter_for(ln)
    same = a.run_op("LayerNorm", ins, extra["scalars"], extra["prim"])[0][1]
    other = dict(extra["prim"], init={**extra["prim"]["init"], "epsilon": 1e-3})
    changed = a.run_op("LayerNorm", ins, extra["scalars"], other)[0][1]
    np.testing.assert_array_equal(same, np.asarray(tr.tensor(
        next(r for r in recs if r.role == "output" and r.arg == "0"))))
    assert np.abs(changed - same).max() > 0.1  # a 1e-3-scale input: eps decides


def test_a_call_the_trace_cannot_rebuild_says_why():
    a = adapter_for(ms.Tensor(np.zeros(1, np.float32)))
    x = np.ones((2, 3), np.float32)
    with pytest.raises(FrameworkError, match="does not say which primitive"):
        a.run_op("ReLU", [("0", x, "float32")], {})  # a trace from before primitives were kept
    with pytest.raises(FrameworkError, match="not a MindSpore primitive"):
        a.run_op("ReLU", [("0", x, "float32")], {}, {"class": "os.system", "init": {}})
    with pytest.raises(FrameworkError, match="not recorded"):
        a.run_op("ReLU", [("0", x, "float32")], {},
                 {"class": "mindspore.ops.auto_generate.gen_ops_prim.ReLU", "init": {},
                  "unrecorded": ["1 (Cell)"]})


def test_the_candidates_arguments_are_paired_with_the_references_by_meaning():
    from netparity.workflow.replay import _as_candidate_inputs, _NotReplayable

    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    w = rng.standard_normal((8, 8)).astype(np.float32)  # square: shape alone cannot tell
    g, b = np.ones(8, np.float32), np.zeros(8, np.float32)
    # native_layer_norm(x, [8], w, b) against LayerNorm(x, gamma, beta): by value
    ref = [("0", x, "float32"), ("2", g, "float32"), ("3", b, "float32")]
    cand = [("0", x + 1e-6, "float32"), ("1", g, "float32"), ("2", b, "float32")]
    got = _as_candidate_inputs(ref, cand)
    assert [a for a, _, _ in got] == ["0", "1", "2"]
    assert got[1][1] is g and got[2][1] is b and got[0][1] is x
    # mm(x, w.T) against MatMul(x, w, transpose_b=True): the weight in the other layout
    got = _as_candidate_inputs([("0", x, "float32"), ("1", w.T, "float32")],
                               [("0", x, "float32"), ("1", w, "float32")])
    np.testing.assert_array_equal(got[1][1], w)
    # a value made outside the call (1 - y*y fed to the rest of a hand-written tanh backward)
    # is not the reference's y because it has y's shape
    y = np.tanh(x)
    with pytest.raises(_NotReplayable, match="no counterpart"):
        _as_candidate_inputs([("0", x, "float32"), ("1", y, "float32")],
                             [("0:0", x, "float32"), ("0:1", 1 - y * y, "float32")])
    # a reference input the candidate's op does not take (a bias added by another op)
    with pytest.raises(_NotReplayable, match="no counterpart"):
        _as_candidate_inputs([("0", x, "float32"), ("1", w, "float32"), ("2", b + 1, "float32")],
                             [("0", x, "float32"), ("1", w, "float32")])


@pytest.mark.slow
@pytest.mark.parametrize("bug", [None, "gelu-tanh", "ln-eps"], ids=["faithful", "gelu-tanh",
                                                                     "ln-eps"])
def test_timm_vit_to_mindspore_port_op_level_replay(tmp_path, bug):
    """timm's ViT against an independent MindSpore port at op level: the MindSpore primitive
    that differs (``GeLU``: tanh approximation; ``LayerNorm``: eps 1e-7) is re-called on the
    PyTorch reference's captured inputs and named by replay; the faithful port passes clean."""
    pytest.importorskip("torch", reason="PyTorch is not installed")
    import importlib.util
    from pathlib import Path

    if importlib.util.find_spec("timm") is None:
        pytest.skip("timm is not installed")
    from tests.corpus import ms_vit_spec, vit_spec

    from netparity.workflow.step import run_step_parity

    r = run_step_parity(str(Path(vit_spec.__file__)), str(Path(ms_vit_spec.__file__)),
                        tmp_path / "run", steps=1, options={"steps": 1},
                        cand_options={"bug": bug, "steps": 1}, level="op", run_eval=False,
                        free_running=False)
    if bug is None:
        assert r.first_phase is None, [(p.name, p.status, p.summary) for p in r.phases]
        assert not [p for p in r.phases if p.status == "warn"]
        return
    fwd = r.phase("forward")
    assert (r.first_phase, r.where) == ms_vit_spec.FOUND_AT[bug][:2], fwd.summary
    assert fwd.evidence["verdict"] == "introduced (replay)"
    culprit = fwd.evidence["replay"][-1]
    assert culprit["op"] == {"gelu-tanh": "gelu", "ln-eps": "layer_norm"}[bug]
    assert culprit["local"] > 10 * culprit["bound"]
    assert "operator" in fwd.summary


@pytest.mark.parametrize("case", ["carried", "bias"])
def test_a_linear_against_matmul_and_bias_add_is_replayed_as_a_group(tmp_path, case):
    """PyTorch's ``addmm(b, x, Wᵀ)`` against MindSpore's ``MatMul(x, W) + BiasAdd(., b)``: an
    N:M group, replayed as the candidate's two primitives in order on the reference's inputs,
    weights included (``W`` in MatMul's layout, ``b`` into BiasAdd). A difference carried in by
    the input reproduces; so does one made by the candidate holding another bias: replay judges
    the operators, fed the reference's weights (weights are the setup phase's business)."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    from mindspore import nn

    from netparity.workflow.replay import replay_ops_step0

    ms.set_context(mode=ms.PYNATIVE_MODE)
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4)
    dense = nn.Dense(8, 4)
    dense.weight.set_data(ms.Tensor(lin.weight.detach().numpy()))
    bias = lin.bias.detach().numpy() + (0.05 if case == "bias" else 0.0)
    dense.bias.set_data(ms.Tensor(bias))
    x = np.random.default_rng(2).standard_normal((3, 8)).astype(np.float32)
    xc = x + (0.02 * np.abs(x) if case == "carried" else 0.0)
    with netparity.capture(lin, tmp_path / "ref", level="op", payload="tensors",
                           directions=("forward",)) as cap:
        with torch.no_grad():
            lin(torch.from_numpy(x))
        cap.step()
    with netparity.capture(dense, tmp_path / "cand", level="op", payload="tensors",
                           directions=("forward",)) as cap:
        dense(ms.Tensor(xc.astype(np.float32)))
        cap.step()
    r0 = netparity.compare(tmp_path / "ref", tmp_path / "cand", level="op")
    group = [c for c in r0.calls if "+" in c.cand_op]
    assert group and group[0].status == "fail", [(c.op, c.cand_op, c.status) for c in r0.calls]
    out = replay_ops_step0(r0, str(tmp_path / "ref"), str(tmp_path / "cand"), lin, dense)
    row = next(o for o in out if o.key == group[0].key)
    assert row.verdict == "reproduces", row
    assert row.local is not None and row.local < 1e-6 and row.accumulated > 1e-3


def test_tensor_operators_are_recorded_once_and_made_again(tmp_path):
    # x * y, x - y, x / 2, x ** 2, x.exp() run in TensorPy's C++ code, which MindSpore's JIT
    # context never reports: the op capture wraps them while it runs, records each as the
    # primitive computing the same (once: ops.mul, a primitive, is not recorded twice), and
    # op replay makes every such call again from the trace
    import mindspore._c_expression as c
    from mindspore import nn, ops

    class Scaled(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = ms.Parameter(ms.Tensor(np.linspace(0.5, 2.0, 8, dtype=np.float32)),
                                  name="w")

        def construct(self, x):
            h = self.w * x - 1.0      # Parameter * Tensor, Tensor - float
            h = 2.0 * h / 3.0         # reflected, then division by a scalar
            h = (h ** 2).exp().rsqrt()
            return ops.mul(h, x)      # a primitive: reported by MindSpore itself

    net = Scaled()
    x = ms.Tensor(np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32))
    with netparity.capture(net, tmp_path / "t", level="op", payload="tensors") as cap:
        want_out = net(x).asnumpy()
        cap.step()
    # the classes' operators are TensorPy's again
    assert ms.Tensor.__mul__ is c.TensorPy.__mul__ and "__mul__" not in ms.Parameter.__dict__
    assert "exp" not in ms.Tensor.__dict__
    tr, by = _calls(tmp_path / "t")
    order = [recs[0].native.removesuffix("Ext")  # x - 1.0 runs Python's SubExt primitive
             for _, recs in sorted(by.items(), key=lambda kv: kv[0][2])]
    assert order == ["Mul", "Sub", "Mul", "Div", "Pow", "Exp", "Rsqrt", "Mul"], order
    a = adapter_for(net)
    for recs in by.values():
        ins = [(r.arg, np.asarray(tr.tensor(r)), r.dtype) for r in recs if r.role == "input"]
        (want,) = [np.asarray(tr.tensor(r)) for r in recs if r.role == "output"]
        extra = next(r.extra for r in recs if r.extra)
        (_, got), = a.run_op(recs[0].native, ins, extra.get("scalars", {}), extra["prim"])
        np.testing.assert_array_equal(got, want, err_msg=recs[0].native)
    np.testing.assert_array_equal(want, want_out)  # the last one is the network's output
