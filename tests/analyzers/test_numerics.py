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


class Scratch(torch.nn.Module):
    """Writes into a fresh uninitialised buffer, as autograd's backward of strided ops does
    (timm ConvNeXt's downsampling conv: ``new_empty_strided``, NaN garbage in both runs), and
    into a preallocated one that holds NaN until ``copy_`` overwrites it."""

    def __init__(self) -> None:
        super().__init__()
        self.out = torch.full((8, 8), math.nan)  # a plain attribute: allocated before capture

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        buf = x.new_empty((64,))
        buf.copy_(x.reshape(-1))
        self.out.copy_(x)
        torch.mul(x, 2.0, out=self.out)
        return buf.reshape(x.shape) * 2 + self.out


def test_memory_about_to_be_overwritten_is_not_taken_for_a_nan(tmp_path: Path) -> None:
    x = torch.randn(8, 8)
    model = Scratch()
    with netparity.capture(model, tmp_path / "u", level="op") as cap:
        model(x)
        cap.step()
    recs = netparity.open_trace(tmp_path / "u").load_records(kind="op")
    ops = {r.op for r in recs}
    assert "mul" in ops and ops & {"copy", "copy_"}
    assert not ops & {"new_empty", "empty", "empty_like", "new_empty_strided"}
    # the destinations held NaN before they were overwritten (the trace says so) ...
    assert any(r.role == "input" and r.stats.get("nan") for r in recs)
    # ... which is no NaN of the computation
    assert analyze(tmp_path / "u").first_nonfinite is None


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


def test_bfloat16_weights_that_round_their_updates_away(tmp_path: Path) -> None:
    """Pure bf16 training: a LayerNorm weight of 1.0 moves in steps of 2^-7, so an SGD update
    of ~1e-4 is rounded away every step. The finding names the dtype, not a missing optimizer."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8),
                                torch.nn.Linear(8, 1)).to(torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1)
    with netparity.capture(model, tmp_path / "t", level="module", optimizer=opt) as cap:
        for _ in range(3):
            x = torch.randn(16, 8, generator=g).to(torch.bfloat16)
            opt.zero_grad()
            model(x).float().pow(2).mean().backward()
            opt.step()
            cap.step()
    assert model[1].weight.grad.abs().max() > 0 and torch.all(model[1].weight == 1)
    stuck = {p.name: p for p in analyze(tmp_path / "t").not_updating}
    assert "1.weight" in stuck
    reason = stuck["1.weight"].reason
    assert "bfloat16" in reason and "master weights" in reason and "optimizer" not in reason


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


# ---- live stop: capture(..., stop_on_nonfinite=True) -------------------------------------------
def _stopped(model: torch.nn.Module, path: Path, level: str, x: torch.Tensor) -> Exception:
    from netparity.capture.nonfinite import NonFiniteStop

    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with pytest.raises(NonFiniteStop) as ei, \
            netparity.capture(model, path, level=level, stop_on_nonfinite=True) as cap:
        loss = model(x).pow(2).mean()
        cap.record_loss(loss)
        loss.backward()
        opt.step()
        cap.step()
    # the capture took its dispatch modes away and closed the trace
    assert torch._C._len_torch_dispatch_stack() == 0
    return ei.value


@pytest.mark.parametrize("level", ["module", "op"])
def test_stop_at_forward_log_of_zero(tmp_path: Path, level: str) -> None:
    from netparity.capture.nonfinite import load_origin
    from netparity.frameworks.torch.nonfinite import replay

    e = _stopped(_net(LogBlock()), tmp_path / "t", level, torch.randn(16, 8))
    msg = str(e)
    assert "\n" not in msg
    assert msg.startswith("NaN/Inf introduced by log in 1 (forward, step 0, rank 0) at "
                          "test_numerics.py:")
    assert "log of zero or negative input" in msg
    info, arrays = load_origin(tmp_path / "t")
    assert info["native"] == "aten.log.default" and list(arrays) == ["0"]
    assert arrays["0"].min() == 0.0  # relu's zeros, saved as the op saw them
    assert not bool(torch.isfinite(replay(tmp_path / "t")).all())
    r = analyze(tmp_path / "t")
    assert not r and r.live_stop is not None and r.live_stop["op"] == "log"
    if level == "op":  # the trace up to the stop holds the origin op, outputs included
        o = r.first_nonfinite
        assert o is not None and (o.module, o.op, o.verdict) == ("1", "log", "introduced")


def test_stop_at_backward_sqrt_at_zero(tmp_path: Path) -> None:
    e = _stopped(_net(SqrtBlock()), tmp_path / "t", "module", torch.randn(16, 8))
    assert "(backward, step 0" in str(e) and "SqrtBackward0" in str(e)
    assert "division by zero" in str(e)


def test_stop_on_nan_in_the_data(tmp_path: Path) -> None:
    x = torch.randn(16, 8)
    x[2, 1] = math.nan
    e = _stopped(_net(), tmp_path / "t", "module", x)
    assert "already in the inputs of" in str(e) and "(forward, step 0" in str(e)
    assert e.origin["verdict"] == "entered"  # type: ignore[attr-defined]


def test_no_stop_in_a_healthy_run_and_same_trace(tmp_path: Path) -> None:
    for name, stop in (("a", False), ("b", True)):
        model = _net()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        with netparity.capture(model, tmp_path / name, level="op",
                               stop_on_nonfinite=stop) as cap:
            loss = model(torch.ones(4, 8)).sum()
            loss.backward()
            opt.step()
            cap.step()
    from netparity.trace import open_trace

    a, b = open_trace(tmp_path / "a"), open_trace(tmp_path / "b")
    assert [(r.op, r.role, r.stats["norm"]) for r in a.records()] == \
        [(r.op, r.role, r.stats["norm"]) for r in b.records()]
    assert not (tmp_path / "b" / "nonfinite").exists()


def test_run_stop_on_nonfinite_unmodified_script(tmp_path: Path,
                                                 capfd: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "torch.manual_seed(0)\n"
        "class LogBlock(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = torch.nn.Linear(8, 8)\n"
        "    def forward(self, x):\n"
        "        return torch.log(torch.relu(self.lin(x)))\n"
        "m = torch.nn.Sequential(torch.nn.Linear(8, 8), LogBlock(), torch.nn.Linear(8, 1))\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for s in range(3):\n"
        "    loss = m(torch.randn(4, 8)).pow(2).mean()\n"
        "    loss.backward(); opt.step(); opt.zero_grad()\n"
        "print('finished')\n")
    out, stop, err = run_stopping(script, capfd)
    assert len(stop) == 1 and "introduced by log in 1 (forward, step 0" in stop[0]
    assert "train.py:8" in stop[0] and "Traceback" not in err and "Warning" not in err
    assert (out / "nonfinite" / "rank0.npz").exists()


def run_stopping(script: Path, capfd: pytest.CaptureFixture[str], *flags: str
                 ) -> tuple[Path, list[str], str]:
    """``netparity run --stop-on-nonfinite`` on a script that prints ``finished`` unless
    stopped: the trace directory, the ``netparity: stopped:`` lines and stderr."""
    import sys

    out = script.parent / "run"
    rc = main(["run", "-o", str(out), "--stop-on-nonfinite", *flags, "--", sys.executable,
               str(script)])
    err = capfd.readouterr()
    assert rc == 1 and "finished" not in err.out
    return out, [ln for ln in err.err.splitlines() if ln.startswith("netparity: stopped:")], \
        err.err


def test_fp16_autocast_overflow_in_one_layer(tmp_path: Path) -> None:
    model = _net()
    with torch.no_grad():
        model[0].weight.mul_(3e4)  # float16-representable weights, a float16-overflowing sum
    with netparity.capture(model, tmp_path / "t", level="op") as cap, \
            torch.autocast("cpu", dtype=torch.float16):
        model(torch.randn(16, 8) * 10)
        cap.step()
    r = analyze(tmp_path / "t")
    o = r.first_nonfinite
    assert o is not None and (o.module, o.direction, o.dtype) == ("0", "forward", "float16")
    assert o.cause == "float16 overflow: the result exceeds 65504"
    f = r.overflow.first_overflow
    assert f is not None and (f.module, f.op, f.seq) == ("0", o.op, o.seq)


@pytest.mark.parametrize("level", ["module", "op"])
def test_nan_in_a_parameter_after_an_update(tmp_path: Path, level: str) -> None:
    model = _net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    _train(model, tmp_path / "t", steps=3, level=level, opt=opt, lr={1: math.nan})
    o = analyze(tmp_path / "t").first_nonfinite
    assert o is not None and o.step == 1
    if level == "module":  # the first non-finite record is a parameter after step 1's update
        assert (o.verdict, o.kind, o.direction) == ("entered", "param", "update")
        assert "after the update of step 1" in o.cause
    else:  # the update op that made it
        assert (o.verdict, o.kind, o.direction) == ("introduced", "op", "update")
        assert "optimizer's update" in o.cause


# ---- loss scale: GradScaler under float16 autocast ----------------------------------------------
def _amp_run(path: Path, init_scale: float, steps: int, *, pass_scaler: bool = False,
             **kw: object) -> None:
    """float16 autocast + GradScaler; the capture reads the scaler itself (``scaler=`` or
    found while installed)."""
    model = _net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=1)
    g = torch.Generator().manual_seed(0)
    if pass_scaler:
        kw["scaler"] = scaler
    with netparity.capture(model, path, optimizer=opt, **kw) as cap:
        for _ in range(steps):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = torch.nn.functional.mse_loss(model(torch.randn(16, 8, generator=g)),
                                                    torch.randn(16, 1, generator=g))
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            cap.record_loss(loss)
            cap.step()


def test_grad_scaler_forced_persistent_overflow(tmp_path: Path) -> None:
    _amp_run(tmp_path / "t", 2.0 ** 24, 6, pass_scaler=True)  # a scale fp16 grads cannot hold
    r = analyze(tmp_path / "t")
    ls = r.loss_scale
    assert ls is not None and ls["persistent"] and ls["overflow_steps"] == 6
    assert all(x["source"] == "scaler" for x in ls["steps"])
    assert [x["scale"] for x in ls["steps"]] == [2.0 ** (23 - i) for i in range(6)]
    assert all(x["skipped"] for x in ls["steps"][1:])
    assert ls["steps"][0]["first_grad"] == "2.weight"  # backward reaches the head first
    assert any("persistent overflow" in p for p in r.problems)
    assert main(["numerics", str(tmp_path / "t"), "--json", str(tmp_path / "n.json")]) == 1


def test_grad_scaler_occasional_overflow_is_handled(tmp_path: Path) -> None:
    # the scale grows until it overflows, then halves; the capture finds the scaler itself
    _amp_run(tmp_path / "t", 2.0 ** 13, 10)
    r = analyze(tmp_path / "t")
    ls = r.loss_scale
    assert ls is not None and 0 < ls["overflow_steps"] < 10 and not ls["persistent"]
    over = [x for x in ls["steps"] if x["overflow"]]
    assert all(x["skipped"] for x in over) and ls["handled"]
    assert r.first_nonfinite is not None  # named, but expected under loss scaling
    assert r, r.problems
    assert all(x["source"] == "scaler" for x in ls["steps"])
    # the scaler's own verdict agrees with the gradients the capture recorded
    assert all(x["overflow"] == bool(x["first_grad"]) for x in ls["steps"])


def test_grad_scaler_under_the_light_stop(tmp_path: Path) -> None:
    """Loss scaling's overflow is not a stop; the scale and the overflow are still recorded."""
    _amp_run(tmp_path / "t", 2.0 ** 13, 10, stop_on_nonfinite=True)
    ls = analyze(tmp_path / "t").loss_scale
    assert ls is not None and 0 < ls["overflow_steps"] < 10 and ls["handled"]
    assert not (tmp_path / "t" / "nonfinite").exists()
    assert ls["steps"][1]["scale"] == 2.0 * ls["steps"][0]["scale"]  # grew after a good step


# ---- cross-rank consistency: two processes under torchrun (gloo) --------------------------------
RANKS = """
import sys, torch, torch.distributed as dist
from torch import nn
dist.init_process_group("gloo")
same = sys.argv[1] == "same"
torch.manual_seed(0 if same else dist.get_rank())   # "diff": each rank its own initial weights
m = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for i in range(2):
    loss = nn.MSELoss()(m(torch.randn(3, 4) + dist.get_rank()), torch.zeros(3, 1))
    opt.zero_grad(); loss.backward()
    for p in m.parameters():                       # data parallel by hand: average gradients
        dist.all_reduce(p.grad); p.grad /= dist.get_world_size()
    opt.step()
dist.destroy_process_group()
"""


def _free_port() -> str:
    """A TCP port nothing listens on now (other test runs share this machine)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


@pytest.mark.slow
@pytest.mark.parametrize("init", ["same", "diff"])
def test_two_ranks_initial_weights(tmp_path: Path, init: str) -> None:
    import shutil
    import sys

    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if torchrun is None:
        pytest.skip("torchrun not found next to the Python interpreter")
    (tmp_path / "ranks.py").write_text(RANKS)
    out = tmp_path / "trace"
    port = _free_port()
    assert main(["run", "-o", str(out), "--", torchrun, "--nproc-per-node", "2",
                 "--master-port", port, str(tmp_path / "ranks.py"), init]) == 0
    r = analyze(out)
    rc = r.ranks_consistent
    # 4 parameters x 2 steps: gradients after the all-reduce, and parameters after the update
    assert rc is not None and rc["ranks"] == [0, 1] and rc["compared"] == 16
    if init == "same":
        assert rc["first"] is None and r
    else:  # averaged gradients agree; the weights they update do not
        f = rc["first"]
        assert f is not None and (f["step"], f["name"], f["rank"], f["what"]) == \
            (0, "0.weight", 1, "parameter")
        assert not r and any("rank 1" in p for p in r.problems)


DDP = """
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
# a parameter left out of DDP's all-reduce: each rank keeps its own gradient for it
DDP._set_params_and_buffers_to_ignore_for_model(m, ["2.weight"])
ddp = DDP(m)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
torch.manual_seed(1 + dist.get_rank())              # each rank its own batch
for i in range(2):
    loss = nn.MSELoss()(ddp(torch.randn(3, 4)), torch.zeros(3, 1))
    opt.zero_grad(); loss.backward(); opt.step()
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_ddp_gradient_not_all_reduced(tmp_path: Path) -> None:
    """DDP on two CPU processes (gloo): the gradient the optimizer uses, after the all-reduce,
    differs on rank 1 first for the parameter DDP was told to ignore."""
    import shutil
    import sys

    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if torchrun is None:
        pytest.skip("torchrun not found next to the Python interpreter")
    (tmp_path / "ddp.py").write_text(DDP)
    out = tmp_path / "trace"
    assert main(["run", "-o", str(out), "--", torchrun, "--nproc-per-node", "2",
                 "--master-port", _free_port(), str(tmp_path / "ddp.py")]) == 0
    r = analyze(out)
    rc = r.ranks_consistent
    assert rc is not None and rc["ranks"] == [0, 1]
    f = rc["first"]
    # (named through DDP's wrapper: module.)
    assert f is not None and (f["step"], f["name"], f["rank"], f["what"]) == \
        (0, "module.2.weight", 1, "gradient")
    assert not r and any("gradient of module.2.weight after all-reduce" in p
                         for p in r.problems)
    assert main(["numerics", str(out)]) == 1


# ---- the numerics section of `netparity step`'s report -----------------------------------------
def test_step_report_shows_each_sides_numerics(tmp_path: Path) -> None:
    from netparity.analyzers.step import Phase, StepResult
    from netparity.report.sections import sections_for

    _train(_net(), tmp_path / "ok")
    _train(_net(LogBlock()), tmp_path / "bad")
    r = StepResult([Phase("setup")], {}, {}, {}, {}, "out")
    r.numerics = {"ref": analyze(tmp_path / "ok"), "cand": analyze(tmp_path / "bad")}
    sec = next(s for s in sections_for(r) if s.key == "numerics")
    assert sec.status == "warn" and sec.rows[0] == ("reference", "healthy")
    assert sec.rows[1][0] == "candidate" and "non-finite values from 1 / log" in sec.rows[1][1]
    lines = [ln for b in sec.blocks for ln in getattr(b, "lines", [])]
    assert any(ln.startswith("candidate: NaN/Inf introduced at 1 / log (forward, step 0) at "
                             "test_numerics.py:") for ln in lines)
    j = r.to_json()["numerics"]
    assert j["ref"]["healthy"] and not j["cand"]["healthy"]
    assert j["cand"]["first_nonfinite"]["op"] == "log"
    r.numerics = {"ref": r.numerics["ref"]}
    sec = next(s for s in sections_for(r) if s.key == "numerics")
    assert sec.status == "pass" and "healthy" in sec.headline
