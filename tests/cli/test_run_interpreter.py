"""``netparity run`` launches netparity's own interpreter, never another ``python`` on PATH
(issue 30 item 6): ``.venv/bin/netparity run -- python x.py`` with no venv activated, and the
launchers that start ``python`` by name (``torchrun``, ``msrun``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from netparity.trace import open_trace  # noqa: E402

SRC = str(Path(__file__).resolve().parents[2] / "src")

TRAIN = textwrap.dedent(
    """
    import os, torch, torch.distributed as dist
    from torch import nn
    ddp = "WORLD_SIZE" in os.environ
    if ddp:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    if ddp:
        m = nn.parallel.DistributedDataParallel(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for i in range(2):
        loss = nn.MSELoss()(m(torch.randn(3, 4)), torch.zeros(3, 4))
        opt.zero_grad(); loss.backward(); opt.step()
    if ddp:
        dist.destroy_process_group()
    """
)


def _foreign_path(tmp_path: Path) -> str:
    """A PATH whose ``python``/``python3`` is an interpreter without torch (or none at all),
    and which does not hold netparity's venv."""
    fake = tmp_path / "fakebin"
    fake.mkdir()
    for name in ("python", "python3"):
        p = fake / name
        p.write_text("#!/bin/sh\necho 'not the venv python' >&2\nexit 42\n")
        p.chmod(0o755)
    return os.pathsep.join([str(fake), "/usr/bin", "/bin"])


def _netparity(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PATH=_foreign_path(tmp_path), PYTHONPATH=SRC, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "netparity", *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("launcher", [
    pytest.param(["python"], id="python"),
    pytest.param(["python3"], id="python3"),
    pytest.param(["torchrun", "--nproc_per_node", "2", "--master-port", "29561"], id="torchrun",
                 marks=pytest.mark.slow),
])
def test_run_uses_its_own_interpreter(tmp_path, launcher) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "x.py").write_text(TRAIN)
    res = _netparity(tmp_path, "run", "-o", "trace", "--", *launcher, "x.py")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "not the venv python" not in res.stderr
    tr = open_trace(tmp_path / "trace")
    ranks = [0, 1] if launcher[0] == "torchrun" else [0]
    assert tr.ranks == ranks
    for r in ranks:  # every rank captured, without code changes
        assert [x.step for x in tr.records(rank=r, kind="loss")] == [0, 1]


def test_scan_run_uses_its_own_interpreter(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "x.py").write_text(TRAIN)
    res = _netparity(tmp_path, "scan", "--no-verify", "--run", "--", "python", "x.py")
    assert "not the venv python" not in res.stderr
    assert "exited with status" not in res.stderr, res.stderr[-2000:]
    assert res.returncode in (0, 1), res.stderr[-2000:]


MS_DDP = textwrap.dedent(
    """
    import mindspore as ms
    from mindspore import nn, ops
    from mindspore.communication import init
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    init()
    net = nn.Dense(4, 4)
    opt = nn.SGD(net.trainable_params(), learning_rate=0.1)
    loss_fn = nn.MSELoss()
    def fwd(x, y):
        return loss_fn(net(x), y)
    grad_fn = ms.value_and_grad(fwd, None, opt.parameters)
    for i in range(2):
        loss, grads = grad_fn(ops.ones((3, 4)), ops.zeros((3, 4)))
        opt(grads)
    """
)


@pytest.mark.slow
def test_msrun_captures_every_rank(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``-- msrun`` (which starts each worker as a bare ``python``) on CPU: every rank is
    captured zero-code, under netparity's interpreter."""
    pytest.importorskip("mindspore")
    (tmp_path / "x.py").write_text(MS_DDP)
    res = _netparity(tmp_path, "run", "-o", "trace", "--", "msrun", "--worker_num", "2",
                     "--local_worker_num", "2", "--master_port", "8163", "--log_dir",
                     str(tmp_path / "log"), "--join", "True", "x.py")
    assert res.returncode == 0, res.stderr[-2000:]
    tr = open_trace(tmp_path / "trace")
    assert tr.ranks == [0, 1] and tr.manifest["world_size"] == 2
    for r in (0, 1):
        assert [x.step for x in tr.records(rank=r, kind="loss")] == [0, 1]
