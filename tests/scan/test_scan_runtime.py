"""``netparity scan --run``: the aten ops a tiny captured step executes, with their primitives."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from netparity.cli import main
from netparity.scan.analyze import load_table, map_aten

TINY = """\
import torch
from torch import nn

net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
loss = nn.CrossEntropyLoss()(net(torch.randn(5, 4)), torch.tensor([0, 1, 0, 1, 1]))
loss.backward()
opt.step()
"""


def test_run_lists_executed_aten_ops(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "tiny.py"
    script.write_text(TINY)
    out = tmp_path / "scan.json"
    rc = main(["scan", "--no-verify", "--json", str(out), "--run", "--", sys.executable, str(script)])
    assert rc == 0
    report = json.loads(out.read_text())
    ops = {op["name"]: op for op in report["runtime"]}
    # the Linear layers and the loss really ran, and map to MindSpore primitives
    assert ops["aten.addmm"]["target"] == "mindspore.ops.MatMul + mindspore.ops.BiasAdd"
    assert ops["aten.relu"]["status"] == "mapped"
    assert any(n.startswith("aten.nll_loss") for n in ops)
    assert report["summary"]["runtime_missing"] == 0
    # the script named in the command was scanned statically too
    assert {a["name"] for a in report["apis"]} >= {"torch.nn.Linear", "torch.optim.SGD"}


def test_aten_overloads_merge_and_unknown_ops_are_unlisted() -> None:
    ops = map_aten({"aten.add.Tensor": 2, "aten.add.Scalar": 1, "aten.weird_op.default": 1},
                   load_table(), {"aten.mm": ["x"]})
    assert [(o.name, o.count, o.status) for o in ops] == [("aten.add", 3, "mapped"),
                                                          ("aten.weird_op", 1, "unlisted")]


def test_run_failure_is_exit_2(tmp_path: Path) -> None:
    script = tmp_path / "boom.py"
    script.write_text("raise SystemExit(3)\n")
    assert main(["scan", "--no-verify", "--run", "--", sys.executable, str(script)]) == 2
