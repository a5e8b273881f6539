"""`netparity demo`: the ResNet-50 migration end to end, through the CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest

from netparity.examples.resnet.bugs import BUGS

pytest.importorskip("torch", reason="PyTorch is not installed")
pytest.importorskip("mindspore", reason="MindSpore is not installed")


def test_list_bugs():
    p = subprocess.run([sys.executable, "-m", "netparity", "demo", "--list-bugs"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0
    names = [line.split()[0] for line in p.stdout.strip().splitlines()]
    assert names == list(BUGS) and {"bn-momentum", "bn-eps", "same-pad", "bn-decay", "warmup",
                                    "eval-mode"} <= set(names)


@pytest.mark.slow
def test_resnet50_demo_names_the_same_pad_convolution(tmp_path):
    out = tmp_path / "demo"
    p = subprocess.run([sys.executable, "-m", "netparity", "demo", "--bug", "same-pad",
                        "--steps", "1", "-o", str(out)],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    # ResNet-50's first stride-2 3x3 convolution is the second conv of layer2's first block
    assert "first divergence in the FORWARD phase at layer2.0.conv2" in p.stdout
    assert "23,516,228 trainable parameters" in p.stdout
    assert (out / "resnet50-mindspore.ckpt").is_file() and (out / "report.html").is_file()
    html = (out / "report.html").read_text()
    assert "layer2.0.conv2" in html and "<script>alert" not in html


def test_demo_rejects_unknown_bug(tmp_path):
    p = subprocess.run([sys.executable, "-m", "netparity", "demo", "--bug", "nope", "-o",
                        str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "unknown ResNet demo bug" in p.stderr
