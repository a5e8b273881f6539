"""Outputs never land over, or inside, what a command reads (issue: `compare --json
A/manifest.json` destroyed trace A; `ckpt convert x.pth x.pth` overwrote its source)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.name.endswith(("-wal", "-shm")):
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "netparity", *argv], capture_output=True,
                          text=True, timeout=300)


def test_reports_inside_an_input_trace_are_refused_and_the_trace_is_untouched(net):
    ref, cand = net("ref"), net("cand")
    before = _digest(ref)
    for flag, dest in (("--json", ref / "manifest.json"), ("--html", ref / "rank0" / "x.html"),
                       ("--csv", cand)):
        p = _run("compare", str(ref), str(cand), flag, str(dest))
        assert p.returncode == 2 and "input" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert _digest(ref) == before
    p = _run("export", str(ref), "-o", str(ref / "out.npz"))
    assert p.returncode == 2 and _digest(ref) == before


def test_checkpoint_outputs_never_overwrite_their_source(tmp_path):
    src = tmp_path / "w.npz"
    np.savez(src, **{"fc.weight": np.ones((2, 2), np.float32)})
    data = src.read_bytes()
    for argv in (("ckpt", "convert", str(src), str(src)),
                 ("ckpt", "map", str(src), str(src), "-o", str(src)),
                 ("ckpt", "diff", str(src), str(src), "--json", str(src))):
        p = _run(*argv)
        assert p.returncode == 2 and "overwrite the input" in p.stderr, (argv, p.stderr)
    assert src.read_bytes() == data
