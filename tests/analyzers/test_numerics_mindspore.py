"""The numerics analyzers on real MindSpore runs (PyNative, CPU): the trace contract makes them
framework-blind, these runs check it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ms = pytest.importorskip("mindspore", reason="MindSpore is not installed")

from mindspore import nn, ops  # noqa: E402

from netparity.analyzers.numerics import analyze  # noqa: E402
from netparity.frameworks.mindspore.capture import capture  # noqa: E402


class LogCell(nn.Cell):
    """log(relu(x)): -inf wherever the dense output is <= 0."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Dense(8, 8)

    def construct(self, x: ms.Tensor) -> ms.Tensor:
        return ops.log(ops.relu(self.fc(x)))


class Net(nn.Cell):
    def __init__(self, block: nn.Cell | None = None) -> None:
        super().__init__()
        self.fc1 = nn.Dense(8, 8)
        self.block = block or nn.Tanh()
        self.head = nn.Dense(8, 1)

    def construct(self, x: ms.Tensor) -> ms.Tensor:
        return self.head(self.block(self.fc1(x)))


def _train(net: Net, path: Path, *, steps: int, level: str, params: list | None = None) -> None:
    ms.set_seed(1)
    loss_fn = nn.MSELoss()
    opt = nn.SGD(params if params is not None else net.trainable_params(), 0.05)
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, opt.parameters)
    rng = np.random.default_rng(0)
    with capture(net, str(path), level=level, optimizer=opt) as cap:
        for _ in range(steps):
            x = ms.Tensor(rng.standard_normal((16, 8), dtype=np.float32))
            y = ms.Tensor(rng.standard_normal((16, 1), dtype=np.float32))
            loss, grads = grad_fn(x, y)
            opt(grads)
            cap.record_loss(loss)
            cap.record_grads(grads, opt.parameters)
            cap.step()


def test_log_of_zero_in_a_cell(tmp_path: Path) -> None:
    _train(Net(LogCell()), tmp_path / "t", steps=1, level="both")
    o = analyze(tmp_path / "t").first_nonfinite
    assert o is not None and o.direction == "forward" and o.verdict == "introduced"
    assert o.module == "block" and o.op == "log" and "log of zero" in o.cause


def test_healthy_mindspore_run(tmp_path: Path) -> None:
    _train(Net(), tmp_path / "t", steps=3, level="module")
    r = analyze(tmp_path / "t")
    assert r, r.problems
    assert {p.name for p in r.updates} >= {"fc1.weight", "head.bias"}
    assert all(p.ratio and p.ratio > 0 for p in r.updates)


def test_stop_on_nonfinite_at_a_mindspore_primitive(tmp_path: Path) -> None:
    from netparity.capture.nonfinite import NonFiniteStop, load_origin

    net = Net(LogCell())
    x = ms.Tensor(np.random.default_rng(0).standard_normal((16, 8), dtype=np.float32))
    with pytest.raises(NonFiniteStop) as ei, \
            capture(net, str(tmp_path / "t"), level="op", stop_on_nonfinite=True):
        net(x)
    msg = str(ei.value)
    assert msg.startswith("NaN/Inf introduced by log in block (forward, step 0, rank 0) at "
                          "test_numerics_mindspore.py:")
    assert "log of zero or negative input" in msg
    info, arrays = load_origin(tmp_path / "t")
    assert info["native"] == "Log" and arrays["0"].min() == 0.0
    r = analyze(tmp_path / "t")  # the trace up to the stop holds the origin primitive
    assert r.first_nonfinite is not None and r.first_nonfinite.op == "log"


def test_stop_on_nonfinite_needs_op_level(tmp_path: Path) -> None:
    from netparity.errors import UsageError

    with pytest.raises(UsageError, match="level='op'"):
        capture(Net(), str(tmp_path / "t"), stop_on_nonfinite=True)
