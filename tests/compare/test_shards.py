"""Tensor-parallel candidates against unsharded references (``compare --shards``, layouts a
capture recorded): ranks merged into one, then compared as usual; bad layouts are one line."""

from __future__ import annotations

import contextlib
import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.safety.helpers import assert_one_line_error, run_cli

from netparity.cli import main
from netparity.compare.shards import Layout, _merge_stats, parse_layout
from netparity.errors import UsageError
from netparity.stats import compute_stats
from netparity.trace import Record, TraceWriter
from netparity.trace.schema import STAT_FIELDS


# ---- synthetic traces: one column-parallel Linear "fc" (4 -> 6), TP 2 ----------------------
def _write(path: Path, ranks: dict[int, list[tuple[Record, np.ndarray]]],
           manifest: dict[str, Any] | None = None) -> Path:
    with contextlib.ExitStack() as stack:  # the ranks of one run write at the same time
        writers = {r: stack.enter_context(TraceWriter(
            path, rank=r, manifest={"framework": "numpy", "world_size": len(ranks),
                                    **(manifest or {})})) for r in ranks}
        for r, recs in ranks.items():
            ev = writers[r].next_event()
            for rec, arr in recs:
                rec.rank = r
                rec.event = ev if rec.kind == "module" else -1
                rec.stats = compute_stats(arr)
                writers[r].add(rec, arr)
    return path


def _fc(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> list[tuple[Record, np.ndarray]]:
    """A Linear ``fc`` and a ReLU ``act`` after it."""
    y = (x @ w.T + b).astype(np.float32)
    z = np.maximum(y, 0)
    mod = dict(kind="module", module="fc", op="linear", native="Linear", dtype="float32")
    act = dict(kind="module", module="act", op="relu", native="ReLU", dtype="float32")
    return [(Record(**mod, role="input", arg="0", shape=x.shape), x),
            (Record(**mod, role="output", shape=y.shape), y),
            (Record(**act, role="input", arg="0", shape=y.shape), y),
            (Record(**act, role="output", shape=z.shape), z),
            (Record(kind="param", module="fc.weight", op="param", role="param",
                    direction="update", dtype="float32", shape=w.shape), w),
            (Record(kind="param", module="fc.bias", op="param", role="param",
                    direction="update", dtype="float32", shape=b.shape), b)]


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shards")
    g = np.random.default_rng(0)
    x = g.standard_normal((2, 4)).astype(np.float32)
    w = g.standard_normal((6, 4)).astype(np.float32)
    b = g.standard_normal(6).astype(np.float32)
    _write(root / "ref", {0: _fc(x, w, b)})
    _write(root / "tp", {r: _fc(x, w[3 * r:3 * r + 3], b[3 * r:3 * r + 3]) for r in (0, 1)})
    # uneven shards (4 + 2 output features)
    _write(root / "uneven", {0: _fc(x, w[:4], b[:4]), 1: _fc(x, w[4:], b[4:])})
    # rank 1's weight shard has a fifth column: the shards do not concatenate
    bad = _fc(x, w[3:], b[3:])
    wide = np.concatenate([w[3:], w[3:, :1]], axis=1)
    bad[4] = (Record(**{**bad[4][0].__dict__, "shape": wide.shape}), wide)
    _write(root / "ragged", {0: _fc(x, w[:3], b[:3]), 1: bad})
    # rank 1 lacks the bias
    _write(root / "gap", {0: _fc(x, w[:3], b[:3]), 1: _fc(x, w[3:], b[3:])[:5]})
    (root / "col.yaml").write_text("fc: {parallel: column, dim: -1}\nact: split\n")
    return root


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["compare", *argv, "-q"])
    out, err = capsys.readouterr()
    return rc, out, err


def test_synthetic_column_parallel_pair_passes_once_merged(
        traces: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, _ = _cli(capsys, str(traces / "ref"), str(traces / "tp"),
                      "--shards", str(traces / "col.yaml"), "--json", str(tmp_path / "r.json"))
    assert rc == 0, out
    assert "ranks 0, 1 merged" in out
    res = json.loads((tmp_path / "r.json").read_text())
    # the report names the user's trace, not the temporary merged one
    assert res["runs"]["cand"]["path"] == str(traces / "tp")
    assert res["runs"]["cand"]["merged_ranks"] == [0, 1]
    # without the layout, rank 0 alone is half of every sharded tensor: not a PASS
    rc, out, _ = _cli(capsys, str(traces / "ref"), str(traces / "tp"))
    assert rc != 0


BAD = {
    # what is wrong: (layout file text, candidate, extra args, words of the one-line error)
    "unknown module": ("nope: column\n", "tp", (), ("'nope'", "matches no module")),
    "wrong parallel": ("fc: row\n", "tp", (), ("merge to shape", "reference has [2, 4]")),
    "wrong weight dim": ("fc: {parallel: column, weight_dim: 1}\n", "tp", (),
                         ("fc.weight", "reference has [6, 4]")),
    "dim out of range": ("fc: {parallel: column, dim: 5}\n", "tp", (), ("dim 5", "out of range")),
    "ragged shards": ("fc: column\nact: split\n", "ragged", (),
                      ("fc.weight", "do not concatenate", "[3, 4], [3, 5]")),
    "rank lacks a record": ("fc: column\nact: split\n", "gap", (), ("rank 1 has no", "fc.bias")),
    "sharded but unnamed": ("fc: column\n", "uneven", (),
                            ("act forward input", "[2, 4], [2, 2]", "does not name this module")),
    "bad parallel": ("fc: diagonal\n", "tp", (), ("parallel must be one of",)),
    "unknown key": ("fc: {parallel: column, axis: 1}\n", "tp", (), ("unknown key", "axis")),
    "not an object": ("- fc\n", "tp", (), ("must be a non-empty object",)),
    "bad YAML": ("fc: {parallel: [\n", "tp", (), ("not valid YAML",)),
    "op level": ("fc: column\n", "tp", ("--level", "op"), ("--level op", "module level only")),
    "rank named": ("fc: column\n", "tp", ("--rank", "1"), ("--rank 1",)),
    "nothing to merge": ("fc: column\n", "ref", (), ("neither trace has several ranks",)),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_layouts_are_one_line_errors(case: str, traces: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    text, cand, extra, needles = BAD[case]
    lay = tmp_path / "layout.yaml"
    lay.write_text(text)
    rc, _, err = _cli(capsys, str(traces / "ref"), str(traces / cand), "--shards", str(lay),
                      *extra)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("netparity: error:"), err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_uneven_shards_merge(traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _cli(capsys, str(traces / "ref"), str(traces / "uneven"),
                      "--shards", str(traces / "col.yaml"))
    assert rc == 0, out


def test_a_bad_layout_from_the_command_line_has_no_traceback(traces: Path,
                                                            tmp_path: Path) -> None:
    lay = tmp_path / "l.yaml"
    lay.write_text("fc: row\n")
    assert_one_line_error(run_cli("compare", str(traces / "ref"), str(traces / "tp"),
                                  "--shards", str(lay)), "merge to shape")


def test_parse_layout_defaults() -> None:
    lay = parse_layout({"a.*": "column", "b": {"parallel": "row", "reduced": False}})
    assert isinstance(lay, Layout)
    assert lay.spec("a.q") is not None and lay.spec("a.q").weight_dim == 0  # type: ignore[union-attr]
    b = lay.spec("b")
    assert b is not None and b.weight_dim == 1 and b.dim == -1 and not b.reduced
    with pytest.raises(UsageError):
        parse_layout({"b": {"parallel": "row", "reduced": "no"}})


_vals = st.floats(width=32, allow_nan=True, allow_infinity=True)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(_vals, min_size=0, max_size=20), min_size=1, max_size=4))
def test_merged_statistics_are_those_of_the_concatenation(parts: list[list[float]]) -> None:
    arrs = [np.array(p, np.float32) for p in parts]
    recs = [Record(kind="module", dtype="float32", shape=a.shape, stats=compute_stats(a))
            for a in arrs]
    got = _merge_stats(recs)
    want = compute_stats(np.concatenate(arrs))
    for k in STAT_FIELDS:
        a, b = got[k], want[k]
        if a is None or b is None:
            assert a is None and b is None, (k, a, b)
        else:
            assert math.isclose(float(a), float(b), rel_tol=1e-6,
                                abs_tol=1e-6 * (1 + abs(float(want["max"] or 0))
                                                + abs(float(want["min"] or 0)))), (k, a, b)


# ---- a real 2-process gloo run of a transformer block with TP 2 ----------------------------
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tp_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    from netparity.examples import tp_block

    root = tmp_path_factory.mktemp("tp_block")
    tp_block.run_ref(root / "ref")
    tp_block.run_tps({None: root / "ok", "bias": root / "bias",
                      "no-allreduce": root / "noar", "twice": root / "twice"})
    return root


def _first(root: Path, cand: str, tmp: Path, capsys: pytest.CaptureFixture[str],
           *extra: str) -> tuple[int, dict[str, Any]]:
    rc, out, _ = _cli(capsys, str(root / "ref"), str(root / cand), "--json",
                      str(tmp / f"{cand}.json"), *extra)
    return rc, json.loads((tmp / f"{cand}.json").read_text())


@pytest.mark.slow  # (the two gloo processes: ~20 s, shared by both tests)
def test_tp2_block_faithful_passes_and_planted_bugs_name_their_module(
        tp_runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # faithful: the layout the capture recorded (netparity.shard_layout) merges the ranks
    rc, res = _first(tp_runs, "ok", tmp_path, capsys)
    assert rc == 0, res["notes"]
    assert res["runs"]["cand"]["merged_ranks"] == [0, 1]
    assert any("concatenated" in n for n in res["notes"])
    # rank 1's shard of mlp.fc1 has a wrong bias; mlp.fc2's output not all-reduced, or
    # divided by the world size twice: the first divergence is the module with the mistake
    for cand, module in (("bias", "mlp.fc1"), ("noar", "mlp.fc2"), ("twice", "mlp.fc2")):
        rc, res = _first(tp_runs, cand, tmp_path, capsys)
        first = res["first_divergence"]
        assert rc == 1 and first["module"] == module and first["direction"] == "forward", (
            cand, first)
        assert first["verdict"] == "introduced"


@pytest.mark.slow
def test_tp2_block_with_a_layout_file_instead_of_the_recorded_one(
        tp_runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from netparity.examples.tp_block import LAYOUT

    bare = tmp_path / "bare"
    shutil.copytree(tp_runs / "ok", bare)
    m = json.loads((bare / "manifest.json").read_text())
    del m["shard_layout"]
    (bare / "manifest.json").write_text(json.dumps(m))
    lay = tmp_path / "tp.json"
    lay.write_text(json.dumps(LAYOUT))
    rc, out, _ = _cli(capsys, str(tp_runs / "ref"), str(bare), "--shards", str(lay))
    assert rc == 0, out
    rc, out, _ = _cli(capsys, str(tp_runs / "ref"), str(bare))  # rank 0 alone: half of it
    assert rc != 0
