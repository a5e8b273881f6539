"""``netparity ckpt`` exit codes and outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from netparity.ckpt import save_checkpoint
from netparity.cli import main


@pytest.fixture
def files(tmp_path):
    ref = {"fc.weight": np.ones((2, 3), np.float32), "bn.weight": np.ones(3, np.float32),
           "bn.bias": np.zeros(3, np.float32), "bn.running_mean": np.zeros(3, np.float32),
           "bn.running_var": np.ones(3, np.float32)}
    cand = {"classifier.weight": np.ones((2, 3), np.float32), "bn.gamma": np.ones(3, np.float32),
            "bn.beta": np.zeros(3, np.float32), "bn.moving_mean": np.zeros(3, np.float32),
            "bn.moving_variance": np.ones(3, np.float32)}
    changed = dict(cand, **{"bn.beta": np.full(3, 0.5, np.float32)})
    save_checkpoint(ref, tmp_path / "ref.safetensors")
    save_checkpoint(cand, tmp_path / "cand.ckpt", use_mindspore=False)
    save_checkpoint(changed, tmp_path / "changed.ckpt", use_mindspore=False)
    (tmp_path / "bad.ckpt").write_bytes(b"\x0a\x50truncated")
    return tmp_path


def test_show(files, capsys):
    assert main(["ckpt", "show", str(files / "cand.ckpt")]) == 0
    out = capsys.readouterr().out
    assert "bn.moving_variance" in out and "5 tensors" in out


def test_diff_exit_codes(files, capsys):
    d = files
    assert main(["ckpt", "diff", str(d / "ref.safetensors"), str(d / "cand.ckpt")]) == 0
    assert main(["ckpt", "diff", str(d / "ref.safetensors"), str(d / "changed.ckpt"),
                 "--json", str(d / "r.json")]) == 1
    res = json.loads((d / "r.json").read_text())
    assert res["ok"] is False and res["differing"] == ["bn.bias"]
    assert main(["ckpt", "diff", str(d / "ref.safetensors"), str(d / "changed.ckpt"),
                 "--atol", "0.6"]) == 0
    capsys.readouterr()
    assert main(["ckpt", "diff", str(d / "ref.safetensors"), str(d / "bad.ckpt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("netparity: error:") and err.count("\n") == 1


def test_map_and_convert(files):
    d = files
    assert main(["ckpt", "map", str(d / "ref.safetensors"), str(d / "cand.ckpt"),
                 "-o", str(d / "m.json")]) == 0
    params = json.loads((d / "m.json").read_text())["params"]
    assert params["fc.weight"] == "classifier.weight" and params["bn.weight"] == "bn.gamma"
    assert main(["ckpt", "convert", str(d / "ref.safetensors"), str(d / "out.ckpt"),
                 "--template", str(d / "cand.ckpt")]) == 0
    assert main(["ckpt", "diff", str(d / "out.ckpt"), str(d / "cand.ckpt")]) == 0
    assert main(["ckpt", "convert", str(d / "ref.safetensors"), str(d / "x.ckpt"),
                 "--mapping", str(d / "nope.json")]) == 2
