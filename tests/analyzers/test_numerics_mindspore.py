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


class CpuLossScaleCell(nn.TrainOneStepWithLossScaleCell):
    """MindSpore 2.10's overflow check takes the Ascend (NPUGetFloatStatusV2) or GPU
    (FloatStatus) path, neither of which has a CPU kernel: on CPU, check the gradients with
    IsFinite (what its Ascend "infnan" mode does). Everything else -- scaling, the update cell,
    skipping the optimizer on overflow -- is MindSpore's own."""

    def get_overflow_status(self, status, compute_output):  # type: ignore[no-untyped-def]
        finite = [ops.isfinite(g).all() for g in compute_output]
        return ops.logical_not(ops.stack(finite).all())


def _loss_scale_run(path: Path, init: float, steps: int, *, pass_scaler: bool,
                    target: float = 1.0) -> None:
    ms.set_seed(1)
    net = Net()
    loss_net = nn.WithLossCell(net, nn.MSELoss())
    opt = nn.SGD(net.trainable_params(), 0.01)
    upd = nn.DynamicLossScaleUpdateCell(loss_scale_value=init, scale_factor=2, scale_window=1)
    train = CpuLossScaleCell(loss_net, opt, scale_sense=upd)
    rng = np.random.default_rng(0)
    # (capturing the train cell itself fails in MindSpore 2.10: the capture's Cell hooks on
    # DynamicLossScaleUpdateCell make its Assign refuse the scale Parameter as a view input)
    model, kw = (net, {"scaler": train}) if pass_scaler else (train, {})
    with capture(model, str(path), **kw) as cap:
        for _ in range(steps):
            x = ms.Tensor(rng.standard_normal((16, 8), dtype=np.float32))
            y = ms.Tensor(rng.standard_normal((16, 1), dtype=np.float32) * target)
            loss, _overflow, _scale = train(x, y)
            cap.record_loss(loss)
            cap.step()


def test_train_one_step_with_loss_scale_cell_persistent_overflow(tmp_path: Path) -> None:
    from netparity.cli import main

    # gradients ~1e3 times a scale of 2^126: beyond float32, step after step
    _loss_scale_run(tmp_path / "t", 2.0 ** 126, 5, pass_scaler=True, target=1e3)
    r = analyze(tmp_path / "t")
    ls = r.loss_scale
    assert ls is not None and ls["overflow_steps"] == 5 and ls["persistent"]
    # the update cell halves the scale after each overflowing step
    assert [x["scale"] for x in ls["steps"]] == [2.0 ** (125 - i) for i in range(5)]
    assert all(x["source"] == "scaler" and x["skipped"] for x in ls["steps"])
    assert any("persistent overflow" in p for p in r.problems)
    assert main(["numerics", str(tmp_path / "t")]) == 1


def test_loss_scale_cell_healthy(tmp_path: Path) -> None:
    """A scale float32 holds: no overflow, the scale doubles each step (scale_window 1)."""
    _loss_scale_run(tmp_path / "t", 2.0 ** 10, 3, pass_scaler=True)
    ls = analyze(tmp_path / "t").loss_scale
    assert ls is not None and ls["overflow_steps"] == 0 and not ls["warnings"]
    assert [x["scale"] for x in ls["steps"]] == [2.0 ** 11, 2.0 ** 12, 2.0 ** 13]
