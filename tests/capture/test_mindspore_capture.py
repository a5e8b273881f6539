"""MindSpore capture (PyNative): Cells forward/backward, primitives, params, grads, restoration."""

from __future__ import annotations

import numpy as np
import pytest

ms = pytest.importorskip("mindspore", reason="MindSpore is not installed")

from mindspore import nn  # noqa: E402

from netparity.frameworks.mindspore.capture import capture  # noqa: E402
from netparity.trace import open_trace  # noqa: E402


class SmallCNN(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, pad_mode="pad", padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2, 2)
        self.fc = nn.Dense(16, 3)

    def construct(self, x):
        x = self.pool(self.relu(self.bn(self.conv(x))))
        return self.fc(x.reshape(x.shape[0], -1))


class Twice(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(3, 3)

    def construct(self, x, scale=None):
        y = self.fc(self.fc(x))
        return y if scale is None else y * scale


class Boom(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(3, 3)

    def construct(self, x):
        self.fc(x)
        raise RuntimeError("boom")


def _data():
    rng = np.random.default_rng(0)
    x = ms.Tensor(rng.random((2, 1, 4, 4), dtype=np.float32))
    y = ms.Tensor(np.array([0, 2], np.int32))
    return x, y


def _train(steps, path=None, **kw):
    """Two SGD steps of the small CNN, optionally under capture; returns losses and params."""
    ms.set_seed(1)
    net = SmallCNN()
    loss_fn = nn.CrossEntropyLoss()
    opt = nn.Momentum(net.trainable_params(), 0.1, 0.9)
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, opt.parameters)
    x, y = _data()
    losses = []
    cap = capture(net, path, optimizer=opt, **kw) if path else None
    if cap:
        cap.__enter__()
    try:
        for _ in range(steps):
            loss, grads = grad_fn(x, y)
            opt(grads)
            losses.append(loss.asnumpy().copy())
            if cap:
                cap.record_loss(loss)
                cap.record_grads(grads, opt.parameters)
                cap.step()
    finally:
        if cap:
            cap.__exit__(None, None, None)
    params = {p.name: p.asnumpy().copy() for p in net.get_parameters()}
    return net, losses, params, cap


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One uninstrumented run and one captured run (level both, tensors) shared by the tests."""
    base = _train(2)
    path = tmp_path_factory.mktemp("ms") / "both"
    cap_run = _train(2, str(path), level="both", payload="tensors")
    return base, cap_run, open_trace(path)


def test_capture_does_not_change_numbers(runs):
    (_, l0, p0, _), (_, l1, p1, cap), _ = runs
    assert not cap.errors
    for a, b in zip(l0, l1):
        assert a.tobytes() == b.tobytes()
    assert p0.keys() == p1.keys()
    for k in p0:
        assert p0[k].tobytes() == p1[k].tobytes(), k


def test_cell_forward_backward_params_grads(runs):
    _, (net, _, params, _), tr = runs
    fwd = tr.records(step=0, kind="module", direction="forward")
    paths = {r.module for r in fwd}
    assert paths == {"", "conv", "bn", "relu", "pool", "fc"}
    conv_out = [r for r in fwd if r.module == "conv" and r.role == "output"]
    assert conv_out[0].native == "mindspore.nn.Conv2d" and conv_out[0].op == "conv"
    assert conv_out[0].shape == (2, 4, 4, 4)
    # inputs and outputs of one call share an event
    conv_in = [r for r in fwd if r.module == "conv" and r.role == "input"]
    assert conv_in[0].event == conv_out[0].event
    bwd = tr.records(step=0, kind="module", direction="backward")
    fc_b = {r.role: r for r in bwd if r.module == "fc"}
    assert fc_b["input"].shape == (2, 3) and fc_b["output"].shape == (2, 16)
    assert {r.module for r in bwd} >= {"fc", "pool", "relu", "bn"}
    # params after the last update equal the live network's values (payload round trip)
    last = {r.module: r for r in tr.records(step=1, kind="param")}
    assert set(last) == set(params)
    for name, val in params.items():
        np.testing.assert_array_equal(tr.tensor(last[name]), val)
    grads = {r.module for r in tr.records(step=0, kind="grad")}
    assert grads == {p.name for p in net.trainable_params()}
    assert len(tr.records(kind="loss")) == 2 and tr.steps() == [0, 1]


def test_ops_attributed_to_cells(runs):
    _, _, tr = runs
    ops = tr.records(step=0, kind="op", direction="forward")
    by_mod = {}
    for r in ops:
        by_mod.setdefault(r.module, []).append(r.native)
    assert "Conv2D" in by_mod["conv"] and "BatchNorm" in by_mod["bn"]
    assert "ReLU" in by_mod["relu"] and "MaxPool" in by_mod["pool"]
    assert by_mod["fc"][:2] == ["MatMul", "MatMul"] and "BiasAdd" in by_mod["fc"]
    fc_ops = sorted({(r.native, r.call) for r in ops if r.module == "fc"}, key=lambda t: t[1])
    assert [c for _, c in fc_ops] == [0, 1]  # op order inside the Dense call
    conv_out = [r for r in ops if r.native == "Conv2D" and r.role == "output"][0]
    mod_out = [r for r in tr.records(step=0, kind="module") if r.module == "conv"
               and r.role == "output" and r.direction == "forward"][0]
    np.testing.assert_array_equal(tr.tensor(conv_out), tr.tensor(mod_out))


def test_call_index_kwargs_and_restoration(tmp_path):
    from mindspore.graph import jit_context as jc

    net = Twice()
    x = ms.Tensor(np.ones((1, 3), np.float32))
    with capture(net, tmp_path / "t", level="both", payload="tensors") as cap:
        out = net(x, scale=ms.Tensor(np.float32(2.0)))
        cap.step()
    tr = open_trace(tmp_path / "t")
    fc = [r for r in tr.records(kind="module", module="fc") if r.role == "output"]
    assert [r.call for r in fc] == [0, 1]
    assert not np.array_equal(tr.tensor(fc[0]), tr.tensor(fc[1]))
    root_in = {r.arg for r in tr.records(kind="module", module="") if r.role == "input"}
    assert root_in == {"0", "kw.scale"}
    root_out = [r for r in tr.records(kind="module", module="") if r.role == "output"][0]
    np.testing.assert_array_equal(tr.tensor(root_out), out.asnumpy())
    assert jc.jit_context() is None

    boom = Boom()
    with pytest.raises(RuntimeError, match="boom"), capture(boom, tmp_path / "b", level="both"):
        boom(x)
    for cell in (boom, boom.fc, net, net.fc):
        assert not cell._forward_hook and not cell._forward_pre_hook
        assert not cell._backward_hook and cell._cell_backward_hook is None
    for p in boom.get_parameters():
        assert not p.hooks()
    assert jc.jit_context() is None


def test_statistics_agree_with_stored_tensors(runs):
    """Every stored tensor's statistics (one-pass host path) equal the reference statistics of
    its stored payload, for every kind of record."""
    from netparity.stats import compute_stats

    _, _, tr = runs
    recs = [r for r in tr.records() if r.shard is not None]
    assert len(recs) > 50 and {r.kind for r in recs} >= {"module", "op", "param", "grad"}
    for r in recs:
        want = compute_stats(tr.raw_tensor(r), r.dtype)
        for k, v in want.items():
            got = r.stats[k]
            if v is None or isinstance(v, int):
                assert got == v, (r.kind, r.module, r.op, k)
            else:
                assert got == pytest.approx(v, rel=1e-6, abs=1e-6 * (1 + abs(want["std"] or 0))), \
                    (r.kind, r.module, r.op, k)



_BLOCKING_RUN = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from mindspore._c_expression import RuntimeConf
from test_mindspore_capture import _train
from netparity.trace import open_trace
_, l0, p0, _ = _train(2)                       # asynchronous executor, no capture
before = RuntimeConf.get_instance().is_launch_blocking()
_, l1, p1, cap = _train(2, sys.argv[2], level="both", launch_blocking=True)
same = all(a.tobytes() == b.tobytes() for a, b in zip(l0, l1)) and all(
    p0[k].tobytes() == p1[k].tobytes() for k in p0)
print(json.dumps({"before": before, "after": RuntimeConf.get_instance().is_launch_blocking(),
                  "same": same, "notes": cap.notes, "errors": cap.errors,
                  "manifest": open_trace(sys.argv[2]).manifest.get("launch_blocking"),
                  "records": len(open_trace(sys.argv[2]).records())}))
"""


def test_launch_blocking_option(tmp_path):
    """`launch_blocking=True` switches MindSpore to synchronous launches (one way, so in a
    subprocess), says so in the manifest and notes, and changes no number."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    out = subprocess.run([sys.executable, "-c", _BLOCKING_RUN, str(Path(__file__).parent),
                          str(tmp_path / "t")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert (r["before"], r["after"], r["same"], r["manifest"]) == (False, True, True, True)
    assert r["errors"] == [] and r["records"] > 50
    assert any("launch_blocking" in n for n in r["notes"])
