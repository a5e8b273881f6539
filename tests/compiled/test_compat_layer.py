"""Models of a compatibility layer over MindSpore (torch-like ``Module``, not ``nn.Cell``) are
captured like native ones (issue 30, item 5). Before: "capture needs a model of an imported
framework"."""

from __future__ import annotations

import pytest

ms = pytest.importorskip("mindspore")

import numpy as np  # noqa: E402

import netparity  # noqa: E402
from netparity.frameworks.registry import framework_of  # noqa: E402
from netparity.trace import open_trace  # noqa: E402

from .compat_layer import MLP  # noqa: E402


def test_detected_as_mindspore_model() -> None:
    import torch

    assert framework_of(MLP()) == "mindspore"
    assert framework_of(torch.nn.Linear(2, 2)) == "torch"  # the same protocol over torch


@pytest.mark.parametrize("level", ["module", "both"])
def test_captured_like_a_native_network(tmp_path, level) -> None:
    net = MLP()
    params = net.parameters()
    opt = ms.nn.SGD(params, learning_rate=0.1)

    def loss_fn(x: ms.Tensor) -> ms.Tensor:
        return (net(x) ** 2).mean()

    grad_fn = ms.value_and_grad(loss_fn, None, opt.parameters)
    x = ms.Tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    with netparity.capture(net, str(tmp_path / "t"), level=level, optimizer=opt) as cap:
        for _ in range(2):
            loss, grads = grad_fn(x)
            cap.record_loss(loss)
            opt(grads)
            cap.step()
    recs = list(open_trace(str(tmp_path / "t")).records())
    mods = {(r.module, r.role) for r in recs if r.kind == "module" and r.direction == "forward"}
    assert {("", "input"), ("", "output"), ("fc1", "output"), ("fc2", "output")} <= mods, mods
    grads_seen = {r.module for r in recs if r.kind == "grad"}
    assert grads_seen == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}, grads_seen
    params_seen = {r.module for r in recs if r.kind == "param"}
    assert params_seen == grads_seen
    out = [r for r in recs if r.kind == "module" and r.module == "" and r.role == "output"
           and r.step == 0][0]
    expect = net(x)  # (after two updates: compare shapes; values of step 0 are gone)
    assert tuple(out.shape) == tuple(expect.shape)
    if level == "both":
        assert any(r.kind == "op" and r.module == "fc1" for r in recs)
