"""Light timing of a MindSpore PyNative run, and its side by side with a PyTorch reference."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
torch = pytest.importorskip("torch")

import netparity  # noqa: E402
from netparity.analyzers.perf import analyze, compare  # noqa: E402
from netparity.trace import open_trace  # noqa: E402

SLEEP = 0.06


def _pynative_sgd(net: Any, out: int) -> tuple[Any, Any, Any, Any]:
    """PyNative mode, an SGD optimizer, a value-and-grad function and a (4x16 -> 4xout) batch."""
    from mindspore import nn

    ms.set_context(mode=ms.PYNATIVE_MODE)
    loss_fn = nn.MSELoss()
    opt = nn.SGD(net.trainable_params(), 0.01)
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, opt.parameters)
    return (opt, grad_fn, ms.Tensor(np.ones((4, 16), np.float32)),
            ms.Tensor(np.zeros((4, out), np.float32)))


def _sleepy_net() -> Any:
    from mindspore import nn

    class Sleepy(nn.Cell):  # type: ignore[misc]
        def construct(self, x: Any) -> Any:
            time.sleep(SLEEP)
            return x

    class Net(nn.Cell):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Dense(16, 32)
            self.act = nn.ReLU()
            self.extra = Sleepy()  # what the PyTorch reference does not have
            self.head = nn.Dense(32, 4)  # PyTorch's fc2: paired by the parameters it owns

        def construct(self, x: Any) -> Any:
            return self.head(self.extra(self.act(self.fc1(x))))

    return Net()


def _ms_run(path: Path) -> None:
    net = _sleepy_net()
    opt, grad_fn, x, y = _pynative_sgd(net, 4)
    with netparity.profile(net, str(path), optimizer=opt) as prof:
        for _ in range(4):
            _, grads = grad_fn(x, y)
            opt(grads)
    assert prof.steps == 4
    assert not net.extra._forward_pre_hook and not net._forward_hook  # hooks removed


def _torch_run(path: Path) -> None:
    model = torch.nn.Sequential()
    model.add_module("fc1", torch.nn.Linear(16, 32))
    model.add_module("act", torch.nn.ReLU())
    model.add_module("fc2", torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with netparity.profile(model, str(path), optimizer=opt):
        for _ in range(4):
            model(torch.ones(4, 16)).square().mean().backward()
            opt.step()
            opt.zero_grad()


def test_mindspore_pynative_timing_and_side_by_side_with_torch(tmp_path: Path) -> None:
    _ms_run(tmp_path / "ms")
    tr = open_trace(tmp_path / "ms")
    assert tr.manifest["framework"] == "mindspore" and tr.manifest["mode"] == "pynative"
    r = analyze(tr)
    assert r.modules[0].module == "extra" and r.modules[0].cls == "Sleepy"
    assert all(s["forward"] > 0 and s["optimizer"] > 0 for s in r.steps)
    _torch_run(tmp_path / "pt")
    c = compare(tmp_path / "pt", tmp_path / "ms")
    worst = [m for m in c.slower if m["what"] == "module"][0]
    assert worst["name"] == "extra" and worst["only"] == "cand"
    paired = {m["name"]: m["cand_name"] for m in c.modules if not m["only"]}
    assert paired["fc1"] == "fc1" and paired["fc2"] == "head"  # Linear <-> Dense


_BACKWARD_SCRIPT = """
import sys
import numpy as np
import mindspore as ms
from mindspore import nn
import netparity

# synchronous PyNative (set before any op runs: later it does not take effect): each Cell's
# time is its kernels', not their dispatch
ms.set_context(mode=ms.PYNATIVE_MODE, pynative_synchronize=True)

class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(16, 2048)
        # its gradient: two 512x2048x2048 matmuls, ~0.1 s on 2 cores: far above what a loaded
        # machine's scheduling adds to the small Cells' (1024 wide failed once under load)
        self.big = nn.Dense(2048, 2048)
        self.head = nn.Dense(2048, 4)

    def construct(self, x):
        return self.head(self.big(self.fc1(x)))

net, loss_fn = Net(), nn.MSELoss()
opt = nn.SGD(net.trainable_params(), 0.01)
grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, opt.parameters)
x, y = ms.Tensor(np.ones((512, 16), np.float32)), ms.Tensor(np.zeros((512, 4), np.float32))
with netparity.profile(net, sys.argv[1], optimizer=opt, module_backward=True):
    for _ in range(4):
        _, grads = grad_fn(x, y)
        opt(grads)
assert not net.big._backward_hook and not net.big._backward_pre_hook  # removed
"""


def test_mindspore_per_cell_backward_names_the_cell_with_the_costliest_gradient(
        tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    script = tmp_path / "bwd.py"
    script.write_text(_BACKWARD_SCRIPT)
    src = str(Path(netparity.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
    subprocess.run([sys.executable, str(script), str(tmp_path / "t")], check=True, env=env)
    tr = open_trace(tmp_path / "t")
    assert tr.manifest["pynative_synchronize"] is True
    r = analyze(tr)
    by = {m.module: m for m in r.modules}
    big, small = by["big"].backward_self, [by[k].backward_self for k in ("fc1", "head")]
    assert big is not None and all(b is not None and big > 2 * b for b in small), by
    # the root's backward spans its Cells' (the big one's included)
    assert by[""].backward is not None and by[""].backward >= by["big"].backward
    f = next(f for f in r.findings if f.kind == "hot-module-backward")
    assert f.where == "big"


def test_mindspore_graph_mode_compile_time_is_separated_from_the_steps(tmp_path: Path) -> None:
    from mindspore import nn

    mode = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        net = nn.SequentialCell(nn.Dense(16, 32), nn.ReLU(), nn.Dense(32, 4))
        opt = nn.SGD(net.trainable_params(), 0.01)
        train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt)
        x = ms.Tensor(np.ones((4, 16), np.float32))
        y = ms.Tensor(np.zeros((4, 4), np.float32))
        # no hook may reach the graph (MindSpore would compile it, and fail on the clock)
        with netparity.profile(train, str(tmp_path / "g"), optimizer=opt) as prof:
            for _ in range(4):
                train(x, y)  # each call of the root is one step: no prof.step() needed
        assert prof.steps == 4
        assert "compile" not in train.__dict__ and "compile_and_run" not in train.__dict__
        losses = [float(train(x, y).asnumpy()) for _ in range(2)]  # unwrapped, still trains
        assert losses[1] < losses[0]
    finally:
        ms.set_context(mode=mode)
    r = analyze(tmp_path / "g")
    assert open_trace(tmp_path / "g").manifest["mode"] == "graph"
    first, rest = r.steps[0], r.steps[1:]
    # the graph is built in the first step only; later calls find it in the cache
    assert first["compile"] > 0.5 * first["seconds"]
    assert all(s["compile"] < 0.1 * first["compile"] for s in rest)
    assert all(s["forward"] > 0 for s in r.steps)  # the compiled step's execution
    for s in r.steps:
        assert s["compile"] + s["forward"] + s["data"] <= s["seconds"] * 1.001
    f = next(f for f in r.findings if f.kind == "first-step")
    assert "graph compilation" in f.evidence and "GRAPH_MODE" in f.advice
    assert r.first_step["compile"] == first["compile"]


def test_mindspore_profiler_output_is_read_ops_and_casts(tmp_path: Path) -> None:
    from mindspore import Profiler, nn, ops

    class Net(nn.Cell):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Dense(16, 8)

        def construct(self, x: Any) -> Any:  # a cast on every forward, as mixed precision does
            return ops.cast(self.fc(ops.cast(x, ms.float16).astype(ms.float32)), ms.float32)

    net = Net()
    opt, grad_fn, x, y = _pynative_sgd(net, 8)
    prof = Profiler(output_path=str(tmp_path / "msprof"))
    for _ in range(3):
        _, grads = grad_fn(x, y)
        opt(grads)
    prof.analyse()
    r = analyze(tmp_path / "msprof")  # the output_path: its trace_view.json is found
    assert r.framework == "mindspore" and r.source == "kineto"
    names = {o.op for o in r.ops}
    assert {"MatMul", "Cast"} <= names
    casts = r.conversions["per_step"]["cast"]
    assert casts["count"] >= 3 and casts["seconds"] > 0  # (no step markers: the whole run)
    assert not [f for f in r.findings if f.kind in ("host-overhead", "first-step")]
    # side by side with a torch.profiler trace of the same layer in fp32 (neither has step
    # markers: each whole run is one step): op classes from both vocabularies
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    fc = torch.nn.Linear(16, 8)
    topt = torch.optim.SGD(fc.parameters(), lr=0.01)
    with torch_profile(activities=[ProfilerActivity.CPU]) as tp:
        for _ in range(3):
            torch.nn.functional.mse_loss(fc(torch.ones(4, 16)), torch.zeros(4, 8)).backward()
            topt.step()
            topt.zero_grad()
    tp.export_chrome_trace(str(tmp_path / "torch.json"))
    c = compare(tmp_path / "torch.json", r)
    rows = {x["name"]: x for x in c.classes}
    assert rows["matmul-linear"]["ref_calls"] >= 3 and rows["matmul-linear"]["cand_calls"] >= 3
    assert rows["optimizer"]["ref"] > 0 and rows["optimizer"]["cand"] > 0  # SGD both sides
    assert rows["reduction"]["cand_calls"] >= 3  # ReduceMean of the loss
    conv = rows["data movement & conversion"]
    assert conv["cand_calls"] >= 6 + sum(o.calls for o in r.ops if o.op == "Tile")  # casts
    assert [x["extra"] for x in c.classes] == sorted((x["extra"] for x in c.classes),
                                                     reverse=True)


def test_mindspore_capture_with_timing_records_both_into_one_trace(tmp_path: Path) -> None:
    net = _sleepy_net()
    opt, grad_fn, x, y = _pynative_sgd(net, 4)
    with netparity.capture(net, str(tmp_path / "t"), timing=True, optimizer=opt) as cap:
        for _ in range(3):
            _, grads = grad_fn(x, y)
            opt(grads)
            cap.step()
    assert not net.extra._forward_pre_hook and not net._forward_hook  # hooks removed
    tr = open_trace(tmp_path / "t")
    assert tr.count(kind="module") > 0 and tr.count(kind="timing") > 0  # accuracy and timing
    assert tr.manifest["timing"] == "light" and tr.manifest["mode"] == "pynative"
    cap_steps = sorted(set(tr.scan(["step"], kind="module")["step"].tolist()))
    r = analyze(tr)
    assert [s["step"] for s in r.steps] == cap_steps == [0, 1, 2]  # the capture's steps
    # the sleeping Cell leads its siblings (the root's self time holds the capture's own work
    # on the root's inputs and outputs, tens of ms on a loaded machine)
    inner = [m for m in r.modules if m.module]
    assert inner[0].module == "extra" and inner[0].self_time >= SLEEP
    assert all(s["forward"] >= SLEEP and s["optimizer"] > 0 for s in r.steps)
    # GRAPH_MODE would compile the hooks: refused with one line, nothing written
    from mindspore import nn

    mode = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        with pytest.raises(netparity.UsageError, match="PyNative"):
            netparity.capture(nn.Dense(2, 2), str(tmp_path / "g"), timing=True)
    finally:
        ms.set_context(mode=mode)
    assert not (tmp_path / "g").exists()


@pytest.mark.slow
def test_side_by_side_of_the_demo_resnet50_torch_vs_mindspore(tmp_path: Path) -> None:
    """The demo's two ResNet-50s (netparity.examples.resnet), 3 steps each at batch 2, 32x32:
    every module with parameters pairs across the frameworks, and a delay put into the
    candidate's ``layer3.1`` tops the module side by side."""
    from mindspore import nn

    from netparity.examples.resnet import ms_resnet, torch_resnet

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        m = torch_resnet.resnet50(num_classes=10)
        opt = torch.optim.SGD(m.parameters(), lr=0.01)
        x, y = torch.randn(2, 3, 32, 32), torch.tensor([1, 2])
        with netparity.profile(m, str(tmp_path / "pt"), optimizer=opt):
            for _ in range(3):
                torch.nn.functional.cross_entropy(m(x), y).backward()
                opt.step()
                opt.zero_grad()
    finally:
        torch.set_num_threads(threads)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    net = ms_resnet.resnet50(num_classes=10)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    mopt = nn.SGD(net.trainable_params(), 0.01)
    grad_fn = ms.value_and_grad(lambda a, b: loss_fn(net(a), b), None, mopt.parameters)
    xa = ms.Tensor(np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32))
    ya = ms.Tensor(np.array([1, 2], np.int32))
    delay = 0.5
    with netparity.profile(net, str(tmp_path / "ms"), optimizer=mopt):
        # registered after the profile's own pre-hook: the delay is inside layer3.1's time
        h = net.layer3[1].register_forward_pre_hook(lambda *_: time.sleep(delay))
        for _ in range(3):
            _, grads = grad_fn(xa, ya)
            mopt(grads)
        h.remove()
    c = compare(tmp_path / "pt", tmp_path / "ms")
    paired = {r["name"]: r["cand_name"] for r in c.modules if not r["only"]}
    assert len(paired) == 149
    # only parameterless modules stay unpaired (PyTorch's ReLU/pooling, MindSpore's flatten)
    assert {r["name"] for r in c.modules if r["only"] == "ref"} == {"relu", "avgpool"}
    assert {r["name"] for r in c.modules if r["only"] == "cand"} == {"flatten"}
    assert paired["fc"] == "end_point" and paired["layer3.1.conv2"] == "layer3.1.conv2"
    top = [r for r in c.slower if r["what"] == "module"][0]
    assert top["name"] == "layer3.1" and top["extra"] > 0.8 * delay
    # PyTorch's modules carry their backward time; MindSpore's Cells have none to compare
    assert all(r["ref_bwd"] is not None and r["extra_bwd"] is None
               for r in c.modules if not r["only"] and r["name"])


_ZERO_CODE_SCRIPT = '''
import sys, time
import numpy as np
import mindspore as ms
from mindspore import nn
import mindspore.dataset as ds

style = sys.argv[1]
ms.set_context(mode=ms.GRAPH_MODE if style == "graph" else ms.PYNATIVE_MODE)

class Sleepy(nn.Cell):
    def construct(self, x):
        time.sleep(SLEEP)
        return x

class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(16, 32)
        self.extra = nn.Identity() if style == "graph" else Sleepy()
        self.head = nn.Dense(32, 4)
    def construct(self, x):
        return self.head(self.extra(self.fc1(x)))

def batches():
    for _ in range(4):
        time.sleep(SLEEP)
        yield np.ones(16, np.float32), np.zeros(4, np.float32)

data = ds.GeneratorDataset(batches, ["x", "y"], shuffle=False)
net, loss_fn = Net(), nn.MSELoss()
opt = nn.SGD(net.trainable_params(), 0.01)
if style == "pynative":
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, opt.parameters)
    for x, y in data:
        loss, grads = grad_fn(x, y)
        opt(grads)
else:  # a training-step Cell: PyNative or GRAPH_MODE
    train = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), opt)
    for x, y in data:
        train(x, y)
'''


@pytest.mark.parametrize("style", ["pynative", pytest.param("graph", marks=pytest.mark.slow)])
def test_zero_code_profile_of_an_unmodified_mindspore_script(tmp_path: Path, style: str
                                                             ) -> None:
    import sys

    from netparity.cli import main

    script = tmp_path / "train_ms.py"
    script.write_text(_ZERO_CODE_SCRIPT.replace("SLEEP", repr(SLEEP)))
    out = tmp_path / "prof"
    assert main(["run", "--profile", "-o", str(out), "--", sys.executable, str(script),
                 style]) == 0
    tr = open_trace(out)
    assert tr.manifest["framework"] == "mindspore"
    assert tr.manifest["mode"] == ("graph" if style == "graph" else "pynative")
    r = analyze(tr)
    assert len(r.steps) == 4  # one per optimizer call (PyNative) / per graph call
    # the dataset's waits are the data phase, the first step's too (its clock starts at the
    # wait that fetched its batch, not at the first Cell call); later batches are prefetched
    # by the dataset's own thread while the step runs
    assert r.steps[0]["data"] >= SLEEP * 0.9, r.steps[0]
    if style == "pynative":
        # the sleeping Cell's time is its own (on a loaded machine a Dense's first PyNative
        # calls may take longer still: its rank among the top two, not first)
        extra = next(m for m in r.modules if m.module == "extra")
        assert extra.self_time >= SLEEP * 0.9 and extra in r.modules[:2], r.modules[:3]
        assert all(s["optimizer"] > 0 and s["backward"] > 0 for s in r.steps)
    else:  # compile time apart from the steps: the first step's graph build, measured
        assert r.steps[0]["compile"] > 0.1 and r.steps[0]["compile"] > r.steps[0]["forward"]
        assert all(s["compile"] < r.steps[0]["compile"] / 10 for s in r.steps[1:])
        assert all(s["forward"] > 0 for s in r.steps)
