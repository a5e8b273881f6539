"""Zero-code ``netparity run`` sees what the in-code ``netparity.capture`` sees (issue 30 items 1,
2): each failing script runs both ways and the analyses give the same answer.

Each script trains unchanged when run plainly (the zero-code way: ``netparity run -- python
script.py``) and wraps its loop in ``netparity.capture(model, DIR, optimizer=opt)`` when given
``DIR`` (the in-code way).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from netparity.analyzers.health import weight_updates  # noqa: E402

SRC = str(Path(__file__).resolve().parents[2] / "src")

#: the loop both ways; the script defines model, opt, loss_fn, batch(step), STEPS, KW
LOOP = textwrap.dedent(
    """
    import contextlib
    cap = None
    if len(sys.argv) > 1:
        import netparity
        cap = netparity.capture(model, sys.argv[1], optimizer=opt, **KW)
    with (cap if cap is not None else contextlib.nullcontext()):
        for step in range(STEPS):
            x, y = batch(step)
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            if cap is not None:
                cap.record_loss(loss)
            loss.backward()
            opt.step()
            if cap is not None:
                cap.step()
    """
)

HEAD_FROZEN = textwrap.dedent(
    """
    import sys, torch
    from torch import nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                          nn.Linear(16, 4))
    for p in model[2].parameters():          # a frozen layer
        p.requires_grad = False
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    model[4] = nn.Linear(16, 4)              # a new head, after the optimizer was built
    loss_fn = nn.CrossEntropyLoss()
    X, Y = torch.randn(32, 8), torch.randint(0, 4, (32,))
    def batch(step):
        return X, Y
    STEPS, KW = 4, {}
    """
)


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([SRC, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def capture_both_ways(tmp_path: Path, body: str, way: str, *run_args: str) -> Path:
    """Run the script ``body`` + :data:`LOOP` captured ``way`` (``in-code`` or ``zero-code``
    with ``run_args``); the trace directory."""
    script = tmp_path / "train.py"
    script.write_text(body + LOOP)
    out = tmp_path / way
    if way == "in-code":
        cmd = [sys.executable, str(script), str(out)]
    else:
        cmd = [sys.executable, "-m", "netparity", "run", "-o", str(out), *run_args, "--",
               "python", str(script)]
    res = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert (out / "manifest.json").exists(), res.stderr[-3000:]
    return out


def numerics(out: Path) -> tuple[int, dict[str, Any]]:
    """``netparity numerics OUT --json -``: exit status and report."""
    res = subprocess.run([sys.executable, "-m", "netparity", "numerics", str(out), "--json", "-"],
                         env=_env(), capture_output=True, text=True, timeout=120)
    return res.returncode, json.loads(res.stdout)


WAYS = ("in-code", "zero-code")


def assert_head_left_out_and_frozen(out: Path) -> None:
    """The answer for the head-replaced-after-the-optimizer script with a frozen layer (each
    framework's version, either way of capturing): the head named as left out of every
    optimizer (fail), the frozen layer warned about."""
    _, stuck = weight_updates(out)
    assert {p.name: p.severity for p in stuck} == {
        "4.weight": "fail", "4.bias": "fail",   # named as missing from every optimizer
        "2.weight": "warn", "2.bias": "warn",   # frozen: warned about
    }
    assert all("left out of the optimizer" in p.reason for p in stuck if p.severity == "fail")
    assert all("frozen" in p.reason for p in stuck if p.severity == "warn")
    rc, report = numerics(out)
    assert rc == 1 and sorted(p.split(" (")[0] for p in report["problems"]) == [
        "parameter 4.bias is not updating", "parameter 4.weight is not updating"]


@pytest.mark.parametrize("way", WAYS)
def test_head_left_out_and_frozen_layer(tmp_path, way) -> None:  # type: ignore[no-untyped-def]
    out = capture_both_ways(tmp_path, HEAD_FROZEN, way)
    assert_head_left_out_and_frozen(out)


WARMUP = textwrap.dedent(
    """
    import sys, torch
    from torch import nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.002)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.45 ** s)  # a warm-up gone wrong
    _step = opt.step
    def _stepped(*a, **k):  # the schedule advances after each update
        out = _step(*a, **k)
        sched.step()
        return out
    opt.step = _stepped
    loss_fn = nn.MSELoss()
    X = torch.randn(64, 16)
    Y = X[:, :1] * 2 + 0.1
    def batch(step):
        return X, Y
    STEPS, KW = 22, {}
    """
)


@pytest.mark.parametrize("way", WAYS)
def test_warmup_explosion_names_the_learning_rate(tmp_path, way) -> None:  # type: ignore[no-untyped-def]
    out = capture_both_ways(tmp_path, WARMUP, way)
    rc, report = numerics(out)
    e = report["explosion"]
    assert rc == 1 and e["found"] and e["step"] == 19
    # the learning rate per step, from the optimizer
    lr = dict((int(s), v) for s, v in e["lr"])
    assert sorted(lr) == list(range(22)) and lr[0] == pytest.approx(0.002)
    assert lr[18] == pytest.approx(0.002 * 1.45 ** 18, rel=1e-5)
    assert e["lr_cause"].startswith("the learning rate rose from 0.002 at step 0 to 1.61 at "
                                    "step 18") and "likely cause" in e["lr_cause"]
    assert any("learning rate rose" in p for p in report["problems"])
    # update ratios judged against the run's own early steps: a 10x jump is a finding
    assert "x the run's early steps" in e["update_cause"]
    jumped = {p["name"] for p in report["not_updating"] if p["severity"] == "warn"}
    assert jumped == {"0.weight", "0.bias", "2.weight", "2.bias"}


SQRT = textwrap.dedent(
    """
    import sys, torch
    from torch import nn
    class Norm(nn.Module):
        def forward(self, x):
            mu = x.mean(0, keepdim=True)
            var = (x - mu).pow(2).mean(0, keepdim=True)
            return (x - mu) / (var.sqrt() + 1e-5)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), Norm(), nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.MSELoss()
    def batch(step):
        if step == 2:  # every sample equal: variance 0, the gradient of its sqrt infinite
            return torch.ones(8, 4), torch.zeros(8, 2)
        return torch.randn(8, 4), torch.zeros(8, 2)
    STEPS = 4
    import os  # the folder of the script says which capture: stop/ or op/
    MODE = os.path.basename(os.path.dirname(os.path.abspath(sys.argv[0])))
    KW = {"stop_on_nonfinite": True} if MODE == "stop" else {"level": "op"}
    """
)
SQRT_LINE = next(i for i, ln in enumerate(SQRT.splitlines(), 1) if ".sqrt()" in ln)


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("mode", ["stop", "op"])
def test_backward_nan_names_the_sqrt(tmp_path, way, mode) -> None:  # type: ignore[no-untyped-def]
    """``sqrt`` of a zero variance: the backward NaN origin is ``SqrtBackward0`` at the sqrt's
    line (not the ``pow`` before it), live (light stop) and from an op-level trace."""
    tmp_path = tmp_path / mode  # the script's folder tells it which
    tmp_path.mkdir()
    args = ("--stop-on-nonfinite",) if mode == "stop" else ("--level", "op")
    out = capture_both_ways(tmp_path, SQRT, way, *args)
    rc, report = numerics(out)
    assert rc == 1
    o = report["live_stop"] if mode == "stop" else report["first_nonfinite"]
    assert (o["direction"], o["step"], o["module"]) == ("backward", 2, "1")
    assert o["source"] == f"train.py:{SQRT_LINE}"
    assert "SqrtBackward0" in o["cause"]
    if mode == "op":
        assert o["node"] == "SqrtBackward0"
        assert o["forward_op"] == f"1 / sqrt at train.py:{SQRT_LINE}"


LOADER = textwrap.dedent(
    """
    import sys, torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    data = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 2, (32,))),
                      batch_size=8, num_workers=0, pin_memory=False)
    prof = None
    if len(sys.argv) > 1:
        import netparity
        prof = netparity.profile(model, sys.argv[1], optimizer=opt, loader=data)
    for x, y in data:
        opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    if prof is not None:
        prof.close()
    """
)


@pytest.mark.parametrize("way", WAYS)
def test_profile_quotes_the_loader(tmp_path, way) -> None:  # type: ignore[no-untyped-def]
    """``run --profile`` finds the data loader and its settings as ``netparity.profile(...,
    loader=)`` takes them: the data-starvation advice quotes them."""
    script = tmp_path / "train.py"
    script.write_text(LOADER)
    out = tmp_path / way
    cmd = ([sys.executable, str(script), str(out)] if way == "in-code" else
           [sys.executable, "-m", "netparity", "run", "--profile", "-o", str(out), "--",
            "python", str(script)])
    subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300, check=True)
    res = subprocess.run([sys.executable, "-m", "netparity", "perf", str(out), "--json", "-"],
                         env=_env(), capture_output=True, text=True, timeout=120)
    assert json.loads(res.stdout)["loader"] == {
        "class": "DataLoader", "num_workers": 0, "pin_memory": False,
        "persistent_workers": False, "batch_size": 8}


MS_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np, mindspore as ms
    from mindspore import nn
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)
    net = nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 4))
    opt = nn.SGD(net.trainable_params(), learning_rate=0.1)
    loss_fn = nn.MSELoss()
    def fwd(x, y):
        return loss_fn(net(x), y)
    grad_fn = ms.value_and_grad(fwd, None, opt.parameters)
    x = ms.Tensor(np.random.RandomState(0).randn(16, 8).astype(np.float32))
    y = ms.Tensor(np.zeros((16, 4), np.float32))
    cap = None
    if len(sys.argv) > 1:
        import netparity
        cap = netparity.capture(net, sys.argv[1], optimizer=opt)
        cap.install()
    for step in range(3):
        loss, grads = grad_fn(x, y)
        if cap is not None:
            cap.record_loss(loss)
        opt(grads)
        if cap is not None:
            cap.step()
    if cap is not None:
        cap.close()
    """
)


@pytest.mark.parametrize("way", WAYS)
def test_mindspore_pynative_captured_zero_code(tmp_path, way) -> None:  # type: ignore[no-untyped-def]
    """MindSpore PyNative, unchanged script: the root Cell, the loss Cell's output, the
    optimizer Cell's call as the step end, gradients and parameters -- as in-code."""
    pytest.importorskip("mindspore")
    from collections import Counter

    from netparity.trace import open_trace

    script = tmp_path / "train.py"
    script.write_text(MS_SCRIPT)
    out = tmp_path / way
    cmd = ([sys.executable, str(script), str(out)] if way == "in-code" else
           [sys.executable, "-m", "netparity", "run", "-o", str(out), "--", "python",
            str(script)])
    res = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    tr = open_trace(out)
    got = Counter((r.kind, r.step) for r in tr.load_records())
    assert got == Counter({**{("module", s): 14 for s in range(3)},
                           **{(k, s): 4 for k in ("grad", "param") for s in range(3)},
                           **{("loss", s): 1 for s in range(3)}})
    losses = [r.stats["mean"] for r in tr.load_records(kind="loss")]
    assert losses[0] > losses[1] > losses[2]  # the same three updates both ways
