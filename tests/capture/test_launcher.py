"""Zero-code capture: ``netparity run -- python script.py`` on unmodified scripts."""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from netparity.cli import main  # noqa: E402
from netparity.frameworks.torch.launcher import capture_env  # noqa: E402
from netparity.trace import open_trace  # noqa: E402

SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    from torch import nn

    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(inplace=True),
                      nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    for i in range(int(sys.argv[1])):
        x = torch.randn(2, 3, 8, 8)
        y = torch.randint(0, 3, (2,))
        loss = crit(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("loss", repr(loss.item()))
    sys.exit(int(sys.argv[2]))
    """
)


def _script(tmp_path: Path) -> Path:
    p = tmp_path / "train.py"
    p.write_text(SCRIPT)
    return p


def test_run_captures_unmodified_script(tmp_path, capfd) -> None:  # type: ignore[no-untyped-def]
    script = _script(tmp_path)
    out = tmp_path / "trace"
    rc = main(["run", "-o", str(out), "--level", "both", "--", sys.executable, str(script),
               "3", "5"])
    assert rc == 5  # the script's own exit status
    printed = [float(line.split()[1]) for line in capfd.readouterr().out.splitlines()
               if line.startswith("loss")]
    tr = open_trace(out)
    assert tr.framework == "torch" and tr.manifest["launcher"] == "netparity run"
    assert tr.steps()[:3] == [0, 1, 2]
    losses = tr.records(kind="loss")
    assert [r.step for r in losses] == [0, 1, 2]
    assert [r.stats["mean"] for r in losses] == pytest.approx(printed, rel=1e-6)
    mods = {r.module for r in tr.records(step=0, kind="module", direction="forward")}
    assert {"", "0", "1", "2", "3", "4", "CrossEntropyLoss"} <= mods
    assert tr.records(step=1, kind="module", direction="backward", module="0")
    assert {r.module for r in tr.records(step=0, kind="param")} == {
        "0.weight", "0.bias", "1.weight", "1.bias", "4.weight", "4.bias"}
    assert tr.records(step=0, kind="op", direction="update")
    conv_b = tr.records(step=0, kind="op", direction="backward", op="conv_backward")
    assert conv_b and {r.module for r in conv_b} == {"0"}


def test_run_policy_flags_and_refuses_existing_trace(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    script = _script(tmp_path)
    out = tmp_path / "trace"
    rc = main(["run", "-o", str(out), "--steps", "1", "--include", "0", "--include", "4",
               "--directions", "forward", "--", sys.executable, str(script), "2", "0"])
    assert rc == 0
    tr = open_trace(out)
    assert tr.steps() == [1]
    assert {r.module for r in tr.records(kind="module")} == {"0", "4"}
    assert not tr.records(direction="backward")
    tr.close()
    rc = main(["run", "-o", str(out), "--", sys.executable, str(script), "1", "0"])
    assert rc == 2 and "already holds a trace" in capsys.readouterr().err
    rc = main(["run", "-o", str(out), "--overwrite", "--", sys.executable, str(script), "1", "0"])
    assert rc == 0 and open_trace(out).steps() == [0]
    assert main(["run", "-o", str(out)]) == 2


def test_bootstrap_does_not_import_torch_eagerly(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess

    env = capture_env(tmp_path / "t", {"level": "module"})
    code = "import sys; print('torch' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    assert res.stdout.strip() == "False"
    assert not (tmp_path / "t").exists()  # no model ran: nothing written


DDP = textwrap.dedent(
    """
    import torch, torch.distributed as dist
    from torch import nn
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    m = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for i in range(2):
        loss = nn.MSELoss()(m(torch.randn(3, 4) + dist.get_rank()), torch.zeros(3, 4))
        opt.zero_grad(); loss.backward(); opt.step()
    dist.destroy_process_group()
    """
)


@pytest.mark.slow
def test_torchrun_two_ranks(tmp_path) -> None:  # type: ignore[no-untyped-def]
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if torchrun is None:
        pytest.skip("torchrun not found next to the Python interpreter")
    (tmp_path / "ddp.py").write_text(DDP)
    out = tmp_path / "trace"
    rc = main(["run", "-o", str(out), "--", torchrun, "--nproc-per-node", "2",
               "--master-port", "29547", str(tmp_path / "ddp.py")])
    assert rc == 0
    tr = open_trace(out)
    assert tr.ranks == [0, 1] and tr.manifest["world_size"] == 2
    for r in (0, 1):
        assert [x.step for x in tr.records(rank=r, kind="loss")] == [0, 1]
        assert tr.records(rank=r, kind="module", module="module.0")
