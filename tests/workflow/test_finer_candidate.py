"""A candidate computing in a finer precision than the reference (float64 against float32)
differs from it by the reference's own rounding, which one-ulp jitter does not sample where
float32 saturates: a sigmoid whose output rounds to exactly 1 has a gradient of exactly 0 in
float32 and a small one in float64 (issue 28: timm EfficientNet's ``se.gate`` at 32 px,
batch 2, float64 candidate, failed LATER-STEPS as "introduced" under ATEN avx2 on one thread).
Replay holds such a candidate to the reference module replayed in float64 (the golden)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from netparity.analyzers.replay import ReplayOutcome, judge  # noqa: E402
from netparity.frameworks.models import run_module_backward  # noqa: E402
from netparity.workflow.replay import _golden_clear  # noqa: E402


def _case(scale: float) -> tuple[ReplayOutcome, list, list, list, list, torch.nn.Module]:
    model = torch.nn.Sequential(torch.nn.Sigmoid())
    x = np.array([[14.0, 15.0, 16.0, 16.5]], np.float32)  # near saturation: float32 8 % off
    g = np.ones_like(x)
    ins, ref_g = [("0", x, "float32")], [("", g)]
    want = [(a, v, "float32") for a, v in run_module_backward(model, "0", ins, ref_g)]
    cand = torch.nn.Sequential(torch.nn.Sigmoid()).double()
    got = run_module_backward(cand, "0", [("0", x.astype(np.float64), "float64")],
                              [("", g.astype(np.float64))])
    got = [(a, v * scale) for a, v in got]
    o = ReplayOutcome("k", "0", "0", "sigmoid", accumulated=1.0, direction="backward")
    local = float(np.linalg.norm(got[0][1] - want[0][1]) / np.linalg.norm(want[0][1]))
    judge(o, local, 1e-7, "float32", "float64")
    return o, ins, ref_g, want, got, model


def test_a_float64_candidate_within_the_references_own_error_is_cleared() -> None:
    o, ins, ref_g, want, got, model = _case(1.0)
    assert o.introduced  # the jitter-based bound alone calls the better rounding a difference
    _golden_clear(o, lambda m, p, i, gg: run_module_backward(m, p, i, gg), model, "0", ins,
                  ref_g, want, got)
    assert o.verdict == "reproduces" and "float64 replay" in o.reason


def test_the_float64_replay_leaves_the_reference_module_as_it_was() -> None:
    from netparity.frameworks.models import in_float64

    lin = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    before = {k: v.clone() for k, v in lin.state_dict().items()}
    with in_float64(lin, "1"):
        assert lin[1].weight.dtype == torch.float64 and lin[0].weight.dtype == torch.float32
    after = lin.state_dict()
    assert all(after[k].dtype == v.dtype and torch.equal(after[k], v) for k, v in before.items())


def test_a_float64_candidate_with_a_real_difference_stays_introduced() -> None:
    o, ins, ref_g, want, got, model = _case(2.0)  # its gradient twice the exact one
    _golden_clear(o, lambda m, p, i, gg: run_module_backward(m, p, i, gg), model, "0", ins,
                  ref_g, want, got)
    assert o.introduced
