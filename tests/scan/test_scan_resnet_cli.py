"""netparity scan on the project's PyTorch ResNet example, through the CLI: findings, outputs,
exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import netparity.examples.resnet as resnet_pkg
from netparity.cli import main

RESNET = Path(resnet_pkg.__file__).parent
MODEL = RESNET / "torch_resnet.py"
TRAIN = RESNET / "torch_train.py"


def _lines(path: Path, needle: str) -> list[int]:
    return [i for i, text in enumerate(path.read_text().splitlines(), 1) if needle in text]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("scan") / "scan.json"
    assert main(["scan", str(MODEL), str(TRAIN), "--to", "mindspore", "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_every_api_has_a_counterpart_and_a_line(report: dict) -> None:
    apis = report["apis"]
    assert report["summary"]["missing"] == 0 and report["summary"]["unlisted"] == 0
    assert report["summary"]["uses"] == len(apis) > 40
    for a in apis:
        assert set(a) >= {"name", "file", "line", "status", "target", "note"}
        assert a["status"] in ("mapped", "trap") and a["target"] and a["line"] > 0
    names = {a["name"]: a["target"] for a in apis}
    assert names["torch.nn.Linear"].startswith("mindspore.nn.Dense")
    assert names["torch.nn.Sequential"] == "mindspore.nn.SequentialCell"
    # mindspore.mint.optim.SGD has an Ascend kernel only: on CPU the scan advises the one that runs
    assert names["torch.optim.SGD"] == "mindspore.experimental.optim.SGD"
    assert names["torch.nn.functional.cross_entropy"].startswith(
        ("mindspore.mint.nn.functional.cross_entropy", "mindspore.ops.cross_entropy"))


def test_batchnorm_momentum_trap_at_every_batchnorm_construction(report: dict) -> None:
    expected = [(str(MODEL), n) for n in _lines(MODEL, "nn.BatchNorm2d(")]
    got = [(a["file"], a["line"]) for a in report["apis"]
           if a["name"] == "torch.nn.BatchNorm2d" and a["status"] == "trap"]
    assert got == expected and len(got) >= 6
    assert all("set momentum=0.9" in a["note"] for a in report["apis"]
               if a["name"] == "torch.nn.BatchNorm2d" and a["status"] == "trap")


def test_conv_padding_trap_where_padding_is_set(report: dict) -> None:
    convs = {a["line"]: a["note"] for a in report["apis"]
             if a["name"] == "torch.nn.Conv2d" and a["file"] == str(MODEL) and a["status"] == "trap"}
    (conv3x3,) = [n for n in _lines(MODEL, "nn.Conv2d(") if "padding=1" in MODEL.read_text().splitlines()[n - 1]]
    assert "pad_mode='pad', padding=1" in convs[conv3x3]
    (stem,) = _lines(MODEL, "padding=3")
    assert "pad_mode='pad', padding=3" in convs[stem]


def test_html_is_self_contained_and_escaped(tmp_path: Path) -> None:
    src = tmp_path / "evil<b>.py"
    src.write_text("import torch\nfrom torch import nn\nnn.Conv2d(1, 2, 3)\n")
    page = tmp_path / "r.html"
    assert main(["scan", str(src), "--no-verify", "--html", str(page)]) == 0
    text = page.read_text()
    assert "evil&lt;b&gt;.py" in text and "evil<b>" not in text
    assert "<script" not in text and "http" not in text
    assert not list(tmp_path.glob(".*.tmp"))  # the temporary file was renamed away


def test_exit_1_only_when_something_blocks(tmp_path: Path) -> None:
    src = tmp_path / "t.py"
    # missing with a composition to write: reported, not blocking (exit 0)
    src.write_text("import torch\nimport torch.nn.functional as F\n"
                   "y = F.scaled_dot_product_attention(q, k, v)\nok = torch.cuda.is_available()\n")
    out = tmp_path / "o.json"
    assert main(["scan", str(src), "--no-verify", "--json", str(out)]) == 0
    a = json.loads(out.read_text())["apis"][0]
    assert a["status"] == "missing" and a["line"] == 3 and "softmax" in a["note"]
    assert not a["blocking"]
    # no counterpart and nothing to compose: blocks the port (exit 1)
    src.write_text("import torch\nbag = torch.nn.EmbeddingBag(10, 4)\n")
    assert main(["scan", str(src), "--no-verify", "--json", str(out)]) == 1
    (a,) = json.loads(out.read_text())["apis"]
    assert a["blocking"] and json.loads(out.read_text())["summary"]["blocking"] == 1


def test_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nx = (\n")
    proc = subprocess.run([sys.executable, "-m", "netparity", "scan", str(bad), "--no-verify"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and f"{bad}:2: syntax error" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_output_path_that_is_an_input_is_refused(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "t.py"
    src.write_text("import torch\n")
    assert main(["scan", str(src), "--json", str(src)]) == 2
    assert "would overwrite the input" in capsys.readouterr().err
    assert src.read_text() == "import torch\n"
