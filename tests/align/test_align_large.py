"""The benchmark's synthetic PyTorch-vs-MindSpore traces align exactly as constructed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from align_speed import OPS_PER_STAGE, Gen  # noqa: E402

from netparity.align import align_traces  # noqa: E402
from netparity.trace import open_trace  # noqa: E402


def _check(tmp_path: Path, ops: int) -> None:
    ref, cand = tmp_path / "ref", tmp_path / "cand"
    Gen(ref, "torch", ops, flat=False).run()
    Gen(cand, "mindspore", ops, flat=False).run()
    tr, tc = open_trace(ref), open_trace(cand)
    al = align_traces(tr, tc, level="op")
    stages = max(1, round(ops / OPS_PER_STAGE))
    clones = len(tr.records(kind="op", op="identity", role="output"))
    casts = len(tc.records(kind="op", op="cast", role="output"))
    # every op the port lacks or adds, and nothing else, is reported
    assert sorted({c.op for c in al.unmatched_ref}) == (["identity"] if clones else [])
    assert len(al.unmatched_ref) == clones
    assert [c.op for c in al.unmatched_cand] == ["cast"] * casts
    # one layer-norm decomposition and one linear = matmul + bias_add per stage
    groups = sorted((tuple(c.op for c in g.ref), len(g.cand)) for g in al.groups)
    assert groups == sorted([(("layer_norm",), 9), (("linear",), 2)] * stages)
    # the 1:1 pairs keep their module: layerN.B.conv1 <-> layerN.B.conv1, downsample renamed
    for m in al.matches:
        if not m.is_group:
            r, c = m.ref[0].module, m.cand[0].module
            assert r.replace("downsample.0", "down_sample.conv").replace(
                "downsample.1", "down_sample.bn").replace("downsample", "down_sample").replace(
                ".fc", ".classifier") == c


def test_benchmark_traces_align_2k(tmp_path):
    _check(tmp_path, 2000)


@pytest.mark.slow
def test_100k_ops_align(tmp_path):
    _check(tmp_path, 100_000)
