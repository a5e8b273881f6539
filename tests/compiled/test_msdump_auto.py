"""``netparity run`` turns MindSpore's own dump on, runs, and imports it (issue 30, item 3): the
kernels of a GRAPH_MODE script land in ``OUT-graph`` with no configuration by the user."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("mindspore")

from netparity.trace import open_trace  # noqa: E402
from safety.helpers import run_cli  # noqa: E402  (tests/ is on sys.path)

SCRIPT = str(Path(__file__).parent / "scripts" / "ms_graph_train.py")


@pytest.mark.parametrize("folder", ["out", "v1.2"], ids=["plain", "dot-in-path"])
def test_graph_mode_script_is_dumped_and_imported(tmp_path, folder) -> None:
    """(A dot in the output path: MindSpore refuses such a dump path and the script failed;
    the dump then goes to a temp folder.)"""
    out = tmp_path / folder
    p = run_cli("run", "-o", str(out), "--", sys.executable, SCRIPT, "graph")
    assert p.returncode == 0, p.stderr[-3000:]
    p = run_cli("run", "-o", str(out), "--overwrite", "--", sys.executable, SCRIPT, "graph")
    assert p.returncode == 0, p.stderr[-3000:]  # again, over both traces
    assert "graph-compiled kernels" in p.stderr, p.stderr[-2000:]
    recs = list(open_trace(str(tmp_path / f"{folder}-graph")).records())
    mods = {(r.module, r.direction) for r in recs if r.kind != "param"}
    assert {("fc1", "forward"), ("fc2", "forward"), ("act", "backward"), ("", "update")} <= mods, mods
    assert {r.step for r in recs} == {0, 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder, f"{folder}-graph"]
    assert not list(Path(__import__("tempfile").gettempdir()).glob("netparity_msdump_*"))


@pytest.mark.parametrize(("steps", "expect"), [(None, {0, 1, 2, 3, 4}), ("1", {1})],
                         ids=["default", "steps"])
def test_dumped_iterations_are_bounded(tmp_path, steps, expect) -> None:
    """A long run dumps the first five iterations (every kernel's tensors on disk: a whole run
    would fill it), or those of --steps."""
    extra = ["--steps", steps] if steps else []
    p = run_cli("run", "-o", str(tmp_path / "o"), *extra, "--", sys.executable, SCRIPT, "graph",
                "7")
    assert p.returncode == 0, p.stderr[-3000:]
    assert {r.step for r in open_trace(str(tmp_path / "o-graph")).records()} == expect


def test_no_mindspore_no_graph_trace(tmp_path) -> None:
    out = tmp_path / "o"
    p = run_cli("run", "-o", str(out), "--", sys.executable, "-c", "print(1)")
    assert p.returncode == 0, p.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["o"]  # nothing next to it either
