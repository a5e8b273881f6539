"""``compare --by-step`` (issue 33 item 1: memory independent of the number of steps): one rank
compared a step at a time and merged gives the one-pass verdict -- exit status, first
divergence (module, direction, step), INCOMPLETE lines -- and says which steps agree; the
details shown are the lead step's. Through the CLI, each case against the same comparison in
one pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from netparity.cli import main


def _step_bug(module: str, direction: str, from_call: int, rel: float) -> Any:
    """An ``edit`` for write_net that perturbs ``module``'s ``direction`` output from its
    ``from_call``-th call on (one call per step: a bug that starts in a later step)."""
    seen = {"n": 0}

    def edit(m: str, d: str, role: str, arr: np.ndarray) -> np.ndarray:
        if (m, d, role) != (module, direction, "output"):
            return arr
        seen["n"] += 1
        if seen["n"] <= from_call:
            return arr
        return (arr + rel * np.sqrt(np.mean(arr.astype(np.float64) ** 2))).astype(arr.dtype)

    return edit


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from conftest import write_net

    root = tmp_path_factory.mktemp("bystep")
    kw: dict[str, Any] = {"n": 4, "size": 64, "steps": 3, "payload": "stats"}
    return {
        "ref": write_net(root / "ref", **kw),
        "same": write_net(root / "same", noise=1e-7, **kw),
        # forward output of net.l2 wrong from step 1 on (steps 0 agree)
        "late": write_net(root / "late", edit=_step_bug("net.l2", "forward", 1, 0.05), **kw),
        # a backward bug in every step
        "back": write_net(root / "back", perturb={("net.l1", "backward"): 0.05}, **kw),
        "short": write_net(root / "short", **{**kw, "steps": 2}),
    }


def _compare(capsys: pytest.CaptureFixture[str], tmp: Path, ref: Path, cand: Path,
             *more: str) -> tuple[int, dict[str, Any]]:
    out = tmp / f"r{len(list(tmp.iterdir()))}.json"
    rc = main(["compare", str(ref), str(cand), "-q", "--json", str(out), *more])
    capsys.readouterr()
    return rc, json.loads(out.read_text())


def _first(doc: dict[str, Any], which: str) -> Any:
    d = doc.get(which)
    return None if d is None else (d["module"], d["direction"], d["step"])


@pytest.mark.parametrize("cand", ["same", "late", "back", "short"])
def test_by_step_gives_the_one_pass_verdict(traces, cand, capsys, tmp_path):
    rc1, whole = _compare(capsys, tmp_path, traces["ref"], traces[cand])
    rc2, steps = _compare(capsys, tmp_path, traces["ref"], traces[cand], "--by-step")
    assert rc2 == rc1
    assert steps["status"] == whole["status"]
    for which in ("first_divergence", "first_backward", "first_update"):
        assert _first(steps, which) == _first(whole, which), which
    assert steps["coverage"]["incomplete"] == whole["coverage"]["incomplete"]
    common = sorted({0, 1, 2} if cand != "short" else {0, 1})
    assert [s["step"] for s in steps["steps"]] == common
    bad = [s["step"] for s in steps["steps"] if s["pair_status"] == "fail"]
    assert bad == {"same": [], "late": [1, 2], "back": common, "short": []}[cand]
    assert any("compared one at a time" in n for n in steps["notes"])
    # the details are the lead step's: its pairs only
    lead = steps["settings"]["step_shown"]
    assert lead == (bad[0] if bad else common[0])
    assert {c["step"] for c in steps["calls"]} == {lead}
    assert {c["step"] for c in whole["calls"]} == set(common)
    assert "steps" not in whole


def test_by_step_is_chosen_for_large_traces_only(traces, monkeypatch):
    from netparity.analyzers import ranks
    from netparity.trace import open_trace

    ref, cand = open_trace(traces["ref"]), open_trace(traces["late"])
    opts = {"fp64_ref": None, "noise_run": None}
    assert not ranks.by_step(ref, cand, None, None, None, opts)  # small: one pass
    assert ranks.by_step(ref, cand, None, None, True, opts)
    assert not ranks.by_step(ref, cand, None, [1], True, opts)  # one step: nothing to split
    monkeypatch.setattr(ranks, "STEP_ROWS", 10)
    assert ranks.by_step(ref, cand, None, None, None, opts)  # large: a step at a time
    assert not ranks.by_step(ref, cand, None, None, False, opts)  # --no-by-step


def test_by_step_refuses_whole_run_evidence(traces, capsys):
    rc = main(["compare", str(traces["ref"]), str(traces["same"]), "--by-step", "--noise",
               str(traces["ref"])])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--by-step" in err[0], err


def test_by_step_names_one_rank(traces, capsys, tmp_path):
    """Several ranks are compared rank by rank (each in one pass): ``--by-step`` asks for the
    rank to go through step by step instead of being ignored."""
    import shutil

    two = tmp_path / "two"
    shutil.copytree(traces["ref"], two)
    shutil.copytree(two / "rank0", two / "rank1")
    rc = main(["compare", str(two), str(two), "--by-step"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--rank N" in err[0], err
    rc, doc = _compare(capsys, tmp_path, two, two, "--by-step", "--rank", "1")
    assert rc == 0 and [s["step"] for s in doc["steps"]] == [0, 1, 2]


def test_the_summary_says_whose_details_it_shows(traces, capsys):
    """Counts, parameters and tolerances shown step by step are the lead step's: each of
    those lines says so (one pass: no step named)."""
    ref, late = str(traces["ref"]), str(traces["late"])
    assert main(["compare", ref, late, "-q", "--by-step"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("FAIL") and "in step 1" in lines[0], lines[0]
    tol = [ln for ln in lines if ln.startswith("minimum passing tolerance")]
    grads = [ln for ln in lines if ln.startswith("parameter gradients")]
    assert tol and grads and all(" in step 1" in ln for ln in tol + grads), lines
    assert main(["compare", ref, late, "-q"]) == 1
    assert not any(" in step " in ln for ln in capsys.readouterr().out.splitlines())
