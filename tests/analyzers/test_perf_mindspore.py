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


def _ms_run(path: Path) -> None:
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

    ms.set_context(mode=ms.PYNATIVE_MODE)
    net, loss_fn = Net(), nn.MSELoss()
    opt = nn.SGD(net.trainable_params(), 0.01)
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, opt.parameters)
    x = ms.Tensor(np.ones((4, 16), np.float32))
    y = ms.Tensor(np.zeros((4, 4), np.float32))
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
