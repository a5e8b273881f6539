"""The numerics and training-health analyzers on real PyTorch runs (CPU).

Each scenario trains a tiny network with one known numerical fault under capture, then checks
that ``netparity.analyzers.numerics`` names the fault at the right place, direction and step.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import netparity  # noqa: E402
from netparity.analyzers.health import find_explosion, read_losses  # noqa: E402
from netparity.analyzers.numerics import analyze  # noqa: E402
from netparity.cli import main  # noqa: E402


class LogBlock(torch.nn.Module):
    """log(relu(x)): -inf wherever the linear output is <= 0."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(torch.relu(self.lin(x)))


class SqrtBlock(torch.nn.Module):
    """sqrt(relu(x)): finite forward, but d sqrt/dx = inf at the zeros relu makes."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(torch.relu(self.lin(x)))


def _net(block: torch.nn.Module | None = None) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), block or torch.nn.Tanh(),
                               torch.nn.Linear(8, 1))


def _train(model: torch.nn.Module, path: Path, *, steps: int = 1, level: str = "both",
           opt: torch.optim.Optimizer | None = None, lr: dict[int, float] | None = None,
           nan_batch: int | None = None) -> None:
    opt = opt or torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    # batches made before capture starts: the NaN of the faulty batch comes from the data
    batches = [(torch.randn(16, 8, generator=g), torch.randn(16, 1, generator=g))
               for _ in range(steps)]
    if nan_batch is not None:
        batches[nan_batch][0][3, 2] = math.nan
    with netparity.capture(model, path, level=level, optimizer=opt) as cap:
        for s, (x, y) in enumerate(batches):
            if lr and s in lr:
                for grp in opt.param_groups:
                    grp["lr"] = lr[s]
            cap.record("batch", x, kind="data")
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            cap.record_loss(loss)
            loss.backward()
            opt.step()
            cap.step()


def test_log_of_zero_named_forward(tmp_path: Path) -> None:
    _train(_net(LogBlock()), tmp_path / "t")
    r = analyze(tmp_path / "t")
    o = r.first_nonfinite
    assert not r and o is not None
    assert (o.module, o.op, o.direction, o.verdict, o.step) == ("1", "log", "forward",
                                                                "introduced", 0)
    assert "log of zero" in o.cause
    assert o.source.startswith("test_numerics.py:")
    assert o.chain and o.chain[0].endswith("(forward)")


def test_log_of_zero_module_level(tmp_path: Path) -> None:
    # without op records the origin is the innermost module whose own code made the value
    _train(_net(LogBlock()), tmp_path / "t", level="module")
    o = analyze(tmp_path / "t").first_nonfinite
    assert o is not None and (o.module, o.kind, o.verdict) == ("1", "module", "introduced")


def test_backward_only_nan_sqrt_at_zero(tmp_path: Path) -> None:
    _train(_net(SqrtBlock()), tmp_path / "t")
    r = analyze(tmp_path / "t")
    o = r.first_nonfinite
    assert o is not None and o.direction == "backward" and o.verdict == "introduced"
    assert o.module == "1" and o.step == 0
    assert "sqrt" in o.forward_op and "zero" in o.cause
    # the forward pass itself stayed finite
    assert r.first_backward is None


def test_nan_in_one_data_batch(tmp_path: Path) -> None:
    _train(_net(), tmp_path / "t", steps=3, nan_batch=1)
    o = analyze(tmp_path / "t").first_nonfinite
    assert o is not None
    assert (o.verdict, o.step, o.kind, o.module) == ("entered", 1, "data", "batch")
    assert "data batch" in o.cause


def test_healthy_run_exit_0_and_json(tmp_path: Path) -> None:
    _train(_net(), tmp_path / "t", steps=3)
    out = tmp_path / "n.json"
    assert main(["numerics", str(tmp_path / "t"), "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["first_nonfinite"] is None and d["not_updating"] == []
    assert d["explosion"]["found"] is False
    assert {"overflow", "loss_scale"} <= set(d)


def test_cli_origin_exit_1(tmp_path: Path) -> None:
    _train(_net(LogBlock()), tmp_path / "t")
    out = tmp_path / "n.json"
    html = tmp_path / "n.html"
    assert main(["numerics", str(tmp_path / "t"), "--json", str(out), "--html", str(html)]) == 1
    fn = json.loads(out.read_text())["first_nonfinite"]
    assert {k: fn[k] for k in ("module", "op", "direction", "step", "verdict")} == {
        "module": "1", "op": "log", "direction": "forward", "step": 0, "verdict": "introduced"}
    assert fn["source"].startswith("test_numerics.py:")
    assert "log" in html.read_text()


def test_cli_bad_input_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["numerics", str(tmp_path / "nothing")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_parameter_left_out_of_optimizer(tmp_path: Path) -> None:
    model = _net()
    opt = torch.optim.SGD(list(model[0].parameters()) + list(model[2].parameters())[:1], lr=0.05)
    _train(model, tmp_path / "t", steps=3, level="module", opt=opt)
    r = analyze(tmp_path / "t")
    assert [p.name for p in r.not_updating] == ["2.bias"]
    assert r.not_updating[0].severity == "fail" and "optimizer" in r.not_updating[0].reason
    moving = {p.name: p for p in r.updates if not p.severity}
    assert set(moving) == {"0.weight", "0.bias", "2.weight"}
    assert all(p.ratio and p.ratio > 0 and p.changed == 2 for p in moving.values())
    assert not r


def test_frozen_parameter_warns_only(tmp_path: Path) -> None:
    model = _net()
    model[0].bias.requires_grad_(False)
    _train(model, tmp_path / "t", steps=3, level="module")
    r = analyze(tmp_path / "t")
    assert [(p.name, p.severity) for p in r.not_updating] == [("0.bias", "warn")]
    assert r  # a frozen parameter may be intended: reported, not a failure


def test_exact_update_ratio_from_payloads(tmp_path: Path) -> None:
    model = _net()
    w0 = model[2].weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    with netparity.capture(model, tmp_path / "t", payload="tensors", optimizer=opt) as cap:
        ws = []
        for _ in range(2):
            x, y = torch.randn(16, 8, generator=g), torch.randn(16, 1, generator=g)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            ws.append(model[2].weight.detach().clone())
            cap.step()
    assert not torch.equal(w0, ws[0])
    want = float((ws[1] - ws[0]).norm() / ws[0].norm())
    row = {p.name: p for p in analyze(tmp_path / "t").updates}["2.weight"]
    assert row.exact and row.ratio == pytest.approx(want, rel=1e-5)


def test_learning_rate_explosion_at_known_step(tmp_path: Path) -> None:
    # the update of step 3 uses lr=50: the loss of step 4 explodes, and the weights entering
    # step 4 already show it (the checklist's "weights before that step" check)
    _train(_net(), tmp_path / "t", steps=6, level="module", lr={3: 50.0})
    r = analyze(tmp_path / "t")
    e = r.explosion
    assert e is not None and e.found and e.step == 4 and e.kind in ("jump", "nonfinite")
    assert e.weights_normal is False and "step 3" in e.weights_before
    assert e.layer == "0" and e.layer_ratio is not None and e.layer_ratio > 10
    assert not r


def test_explosion_from_a_log_file(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("".join(f"epoch 0 step {i} loss: {v}\n"
                           for i, v in enumerate([2.3, 2.0, 1.8, 1.7, 1.9e3, "nan"])))
    assert read_losses(log)[4] == (4, 1900.0)
    assert find_explosion(read_losses(log)) == (4, "jump")
    csvf = tmp_path / "loss.csv"
    csvf.write_text("step,loss\n0,1.0\n1,0.8\n2,0.7\n3,0.75\n4,1.6\n5,2.2\n")
    assert find_explosion(read_losses(csvf)) == (3, "rising")  # the first step up


def test_fp16_range_risk_of_a_float32_run(tmp_path: Path) -> None:
    class Big(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 1e5

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), Big(), torch.nn.Linear(8, 1))
    _train(model, tmp_path / "t", level="module")
    ov = analyze(tmp_path / "t").overflow
    first = ov.first_fp16_overflow
    assert first is not None and first.module == "1" and first.direction == "forward"
    assert first.fp16_overflow > 0 and first.of_fp16_max > 1
    assert ov.top[0].amax >= first.amax


def test_fp16_overflow_of_a_finite_float32_value(tmp_path: Path) -> None:
    class Half(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x * 1e5).half().float()

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), Half(), torch.nn.Linear(8, 1))
    _train(model, tmp_path / "t", level="op")
    r = analyze(tmp_path / "t")
    o = r.first_nonfinite
    assert o is not None and o.module == "1" and o.op == "cast" and o.direction == "forward"
    assert "float16 overflow of a finite float32" in o.cause
    assert r.overflow.first_overflow is not None and r.overflow.first_overflow.op == "cast"
