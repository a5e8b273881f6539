"""The light ``stop_on_nonfinite`` (no ``level`` given) on real PyTorch runs (CPU).

Module outputs and gradients are checked; the module that made the first NaN/Inf is replayed
alone at op level to name the op. These tests check that the op, direction, cause and source
line come out as the op-level guard names them, and that neither the checks nor the replay
change the run.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import netparity  # noqa: E402
from netparity.capture.nonfinite import NonFiniteStop, load_origin  # noqa: E402
from netparity.trace import open_trace  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_numerics import LogBlock, _net, run_stopping  # noqa: E402

from netparity.cli import main as cli_main  # noqa: E402


class SqrtMin(torch.nn.Module):
    """sqrt(h - min(h)): finite forward; d sqrt/dx = inf at each row's minimum, and nothing
    masks it (unlike relu), so the NaN/Inf reaches the gradients of the layers below."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        return torch.sqrt(h - h.detach().amin(dim=1, keepdim=True))  # the sqrt line


class NoisyLog(torch.nn.Module):
    """Batch norm (running statistics), dropout (RNG) and then a log of relu's zeros."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.bn = torch.nn.BatchNorm1d(8)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(torch.relu(self.drop(self.bn(self.lin(x)))))


def _run(model: torch.nn.Module, path: Path, x: torch.Tensor, *, steps: int = 1,
         lr: float = 0.05, loss_fn: object = None, **kw: object) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    with netparity.capture(model, path, stop_on_nonfinite=True, **kw) as cap:
        for _ in range(steps):
            out = model(x)
            loss = loss_fn(out) if callable(loss_fn) else out.pow(2).mean()
            cap.record_loss(loss)
            losses.append(float(loss))
            loss.backward()
            opt.step()
            opt.zero_grad()
            cap.step()
    return losses


def _stop(model: torch.nn.Module, path: Path, x: torch.Tensor, **kw: object) -> NonFiniteStop:
    with pytest.raises(NonFiniteStop) as ei:
        _run(model, path, x, **kw)
    assert torch._C._len_torch_dispatch_stack() == 0  # the replay's mode is gone
    assert "\n" not in str(ei.value)
    return ei.value


def test_light_forward_log_names_op_source_and_saves_inputs(tmp_path: Path) -> None:
    from netparity.frameworks.torch.nonfinite import replay

    e = _stop(_net(LogBlock()), tmp_path / "t", torch.randn(16, 8))
    assert str(e).startswith("NaN/Inf introduced by log in 1 (forward, step 0, rank 0) at "
                             "test_numerics.py:")
    assert "log of zero or negative input" in str(e)
    info, arrays = load_origin(tmp_path / "t")
    assert info["native"] == "aten.log.default" and arrays["0"].min() == 0.0
    assert not bool(torch.isfinite(replay(tmp_path / "t")).all())
    # nothing recorded per module: the light stop writes losses (and data) only
    assert not list(open_trace(tmp_path / "t").records(kind="module"))


def test_light_replay_has_no_lasting_effect(tmp_path: Path) -> None:
    """The replayed block holds batch norm and dropout: after the stop, running statistics
    and the RNG are where an uninstrumented forward leaves them, and the replay met the
    same dropout mask (same count of log's zero inputs as the run itself)."""
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 8), NoisyLog())
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), NoisyLog())
    model.load_state_dict(ref.state_dict())
    x = torch.randn(16, 8)
    torch.manual_seed(5)
    h = ref[1].drop(ref[1].bn(ref[1].lin(ref[0](x))))
    zeros = int((torch.relu(h) == 0).sum())
    rng_ref = torch.get_rng_state()
    torch.manual_seed(5)
    e = _stop(model, tmp_path / "t", x)
    assert "log in 1 (forward" in str(e) and f"{zeros} zeros of 128" in str(e)
    assert torch.equal(torch.get_rng_state(), rng_ref)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        assert torch.equal(getattr(model[1].bn, name), getattr(ref[1].bn, name)), name


def test_light_backward_names_the_backward_op_and_forward_line(tmp_path: Path) -> None:
    e = _stop(_net(SqrtMin()), tmp_path / "t", torch.randn(16, 8))
    msg = str(e)
    assert "introduced by div in 1 (backward, step 0" in msg and "SqrtBackward0" in msg
    assert "division by zero" in msg
    line = next(i for i, ln in enumerate(Path(__file__).read_text().splitlines(), 1)
                if "# the sqrt line" in ln)
    assert f"test_numerics_light.py:{line}" in msg


def test_light_nan_in_the_data_batch(tmp_path: Path) -> None:
    x = torch.randn(16, 8)
    x[2, 1] = math.nan
    e = _stop(_net(), tmp_path / "t", x)
    assert e.origin["verdict"] == "entered" and "(forward, step 0" in str(e)
    assert "the data batch" in str(e)


def test_light_nan_in_a_parameter_after_an_update(tmp_path: Path) -> None:
    e = _stop(_net(), tmp_path / "t", torch.randn(16, 8), steps=3, lr=math.nan)
    assert "(forward, step 1" in str(e) and "NaN/Inf in parameter 0." in str(e)


def test_light_loss_computation(tmp_path: Path) -> None:
    e = _stop(_net(), tmp_path / "t", torch.randn(16, 8),
              loss_fn=lambda o: torch.log(o - 100.0).mean())
    assert "(loss, outside the model)" in str(e) and e.origin["op"] == "loss"


def test_light_healthy_run_is_unchanged(tmp_path: Path) -> None:
    """Same losses and weights, bit for bit, as the run without the stop (dropout included)."""
    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.3),
                                   torch.nn.BatchNorm1d(8), torch.nn.Tanh(),
                                   torch.nn.Linear(8, 1))

    x = torch.randn(16, 8)
    a, b = build(), build()
    torch.manual_seed(1)
    opt = torch.optim.SGD(a.parameters(), lr=0.05)
    plain = []
    for _ in range(3):
        loss = a(x).pow(2).mean()
        plain.append(float(loss))
        loss.backward()
        opt.step()
        opt.zero_grad()
    torch.manual_seed(1)
    assert _run(b, tmp_path / "t", x, steps=3) == plain
    for (n, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p, q), n
    assert not (tmp_path / "t" / "nonfinite").exists()
    assert len(list(open_trace(tmp_path / "t").records(kind="loss"))) == 3


def test_light_is_only_the_default(tmp_path: Path) -> None:
    """With a level the op-level guard runs (records and all); without one, the light stop."""
    m = _net()
    with netparity.capture(m, tmp_path / "a", level="module", stop_on_nonfinite=True) as cap:
        assert not cap.light
        m(torch.ones(2, 8))
        cap.step()
    assert list(open_trace(tmp_path / "a").records(kind="module"))
    with netparity.capture(m, tmp_path / "b", stop_on_nonfinite=True) as cap:
        assert cap.light


def test_light_run_stop_on_nonfinite(tmp_path: Path,
                                     capfd: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "torch.manual_seed(0)\n"
        "m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for s in range(3):\n"
        "    y = m(torch.randn(4, 8))\n"
        "    loss = torch.nn.MSELoss()(torch.sqrt(y - 1e3), torch.zeros(4, 1))\n"
        "    loss.backward(); opt.step(); opt.zero_grad()\n"
        "print('finished')\n")
    out, stop, err = run_stopping(script, capfd)
    # the sqrt sits between the model and the loss module, in no module: the loss module is
    # the first to see the NaN, in its input
    assert len(stop) == 1 and "already in the inputs of MSELoss" in stop[0], err
    assert "(forward, step 0" in stop[0] and "made outside any module" in stop[0]
    assert "Traceback" not in err
    manifest = (out / "manifest.json").read_text()
    assert '"stop_on_nonfinite": "light"' in manifest
    # the light stop records nothing but the stop: numerics reports it (it said "nothing to
    # judge", exit 2, on the trace of a run it had stopped)
    capfd.readouterr()
    rc = cli_main(["numerics", str(out)])
    text = capfd.readouterr().out
    assert rc == 1 and "stopped at a NaN/Inf" in text and "nothing to judge" not in text


class ZeroInPlace(torch.nn.Module):
    """Writes its input in place (so it cannot be replayed on it), then takes its log."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.mul_(0.0)
        return torch.log(x)


def test_light_input_written_in_place_replays_the_parent(tmp_path: Path) -> None:
    """The module that made the NaN overwrote its input: the replay goes one level up (the
    model, whose input is intact) and still names the op inside that module."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), ZeroInPlace(), torch.nn.Linear(8, 1))
    e = _stop(model, tmp_path / "t", torch.randn(16, 8))
    assert "introduced by log in 1 (forward, step 0" in str(e)
    assert "log of zero or negative input" in str(e) and "128 zeros of 128" in str(e)
