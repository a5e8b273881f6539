"""`netparity inspect` / `export` and the CLI's error contract (one line, exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from netparity.cli import main
from netparity.stats import compute_stats
from netparity.trace import Record, TraceWriter

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _trace(path: Path) -> None:
    with TraceWriter(path, manifest={"framework": "numpy", "device": "cpu"}) as w:
        for step in range(2):
            for mod in ("conv1", "layer1.0.conv1", "layer1.0", "fc"):
                a = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3) * (step + 1)
                if step == 1 and mod == "layer1.0.conv1":
                    a[0, 0] = np.inf
                w.add(Record(kind="module", module=mod, native="torch.nn.Conv2d", role="output",
                             dtype="float32", shape=a.shape, stats=compute_stats(a), step=step),
                      payload=a)
            loss = np.float32(1.0 / (step + 1))
            w.add(Record(kind="loss", op="loss", dtype="float32", shape=(), step=step,
                         stats=compute_stats(np.asarray(loss))))


def test_inspect_json_lists_first_nonfinite(tmp_path, capsys):
    _trace(tmp_path / "t")
    assert main(["inspect", str(tmp_path / "t"), "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["healthy"] is False and data["nonfinite_records"] == 1
    first = data["first_nonfinite"][0]
    assert (first["module"], first["step"], first["posinf"]) == ("layer1.0.conv1", 1, 1)
    assert [m["module"] for m in data["modules"]] == ["conv1", "fc", "layer1.0", "layer1.0.conv1"]
    assert data["losses"] == [[0, 1.0], [1, 0.5]]
    # the numerics analyzer's verdict comes with it: the Inf entered at layer1.0.conv1, step 1
    num = data["numerics"]["first_nonfinite"]
    assert (num["module"], num["step"], num["direction"]) == ("layer1.0.conv1", 1, "forward")


def test_inspect_terminal_shows_tree_and_nan(tmp_path, capsys):
    _trace(tmp_path / "t")
    assert main(["inspect", str(tmp_path / "t")]) == 0
    out = capsys.readouterr().out
    assert "NaN/Inf in 1 record" in out and "layer1.0.conv1" in out and "numpy" in out
    assert "PROBLEMS in" in out  # the numerics verdict line


def test_export_npz_and_dir(tmp_path):
    _trace(tmp_path / "t")
    assert main(["export", str(tmp_path / "t"), "-o", str(tmp_path / "o.npz"), "--step", "1",
                 "--name", "layer1*"]) == 0
    z = np.load(tmp_path / "o.npz")
    assert len(z.files) == 2
    inf_arr = [z[f] for f in z.files if "layer1.0.conv1" in f][0]
    assert np.isinf(inf_arr[0, 0])
    assert main(["export", str(tmp_path / "t"), "-o", str(tmp_path / "d")]) == 0
    assert len(list((tmp_path / "d").glob("*.npy"))) == 8


@pytest.mark.parametrize("setup, message", [
    ("missing", "no such trace"),
    ("empty_dir", "not a netparity trace"),
    ("corrupt", "corrupt trace index"),
    ("newer", "newer than this netparity"),
])
def test_cli_errors_are_one_line_exit_2(tmp_path, setup, message):
    t = tmp_path / "t"
    if setup != "missing":
        t.mkdir()
    if setup in ("corrupt", "newer"):
        _trace(tmp_path / "good")
        t = tmp_path / "good"
    if setup == "corrupt":
        (t / "rank0" / "index.sqlite").write_bytes(b"garbage" * 500)
        for f in (t / "rank0").glob("index.sqlite-*"):
            f.unlink()
    if setup == "newer":
        m = json.loads((t / "manifest.json").read_text())
        m["schema_version"] = 999
        (t / "manifest.json").write_text(json.dumps(m))
    p = subprocess.run([sys.executable, "-m", "netparity", "inspect", str(t)],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=SRC))
    assert p.returncode == 2
    assert message in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert "Traceback" not in p.stderr
