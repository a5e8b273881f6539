"""Phase judgements of the step analyzer, on plain arrays and dicts (no framework needed)."""

from __future__ import annotations

import numpy as np
import pytest

from netparity.analyzers.step import (
    SetupFacts,
    StepRun,
    diagnose_step,
    judge_data,
    judge_loss,
    judge_setup,
    judge_updates,
    optimizer_mismatch,
)
from netparity.compare.results import CompareResult, PairResult

COUNTS = {"total": 10, "trainable": 10, "tensors": 2, "trainable_tensors": 2, "buffers": 0}


def test_data_phase_names_the_first_differing_batch():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.array([0, 1])
    ok = judge_data([(x, y), (x, y)], [(x, y), (x, y)], steps=2, atol=1e-5)
    assert ok.status == "pass" and "2 batch(es) identical" in ok.summary
    bad = judge_data([(x, y), (x, y)], [(x, y), (x, 1 - y)], steps=2, atol=1e-5)
    assert (bad.status, bad.step, bad.where) == ("fail", 1, "labels")
    shifted = judge_data([(x, y)], [(x + 1e-3, y)], steps=1, atol=1e-5)
    assert shifted.where == "inputs" and shifted.evidence["batches"][0]["inputs_max_abs"] > 0


def test_uniform_update_ratio_is_a_learning_rate_difference():
    deltas = [{"param": f"l{i}.weight", "ratio": 2.0, "rel_err": 1.0, "decay_explained": 0.0,
               "decay_signal": 0.0, "decay_coef": 0.0} for i in range(4)]
    v = judge_updates(deltas, {"l0": 0, "l1": 1, "l2": 2, "l3": 3}, lr_ref=0.1)
    assert v["kind"] == "learning-rate" and v["median_ratio"] == 2.0
    assert v["first"]["param"] == "l0.weight"
    same = [dict(d, ratio=1.0, rel_err=1e-4) for d in deltas]
    assert judge_updates(same, {}, lr_ref=0.1) is None


def test_optimizer_settings_mismatch_names_the_earliest_parameter():
    rs = {"a.w": {"weight_decay": 0.0, "momentum": 0.9}, "b.w": {"weight_decay": 0.0,
                                                                "momentum": 0.9}}
    cs = {"A.w": {"weight_decay": 1e-4, "momentum": 0.9}, "B.w": {"weight_decay": 1e-4,
                                                                 "momentum": 0.9}}
    m = optimizer_mismatch(rs, cs, {"a.w": "A.w", "b.w": "B.w"}, {"b": 0, "a": 1})
    assert m["kind"] == "settings" and m["first"]["param"] == "b.w"
    assert m["first"]["setting"] == "weight decay"


def test_setup_failure_skips_every_later_phase():
    facts = SetupFacts(COUNTS, dict(COUNTS, trainable=12),
                       mapping_error="mapping: fc.weight (4, 2) does not fit fc.w (3, 2)")
    assert judge_setup(facts).status == "fail"
    r = diagnose_step(StepRun(out_dir="x", steps=1, level="module", ref={"spec": "a"},
                              cand={"spec": "b"}, setup=facts))
    assert r.first_phase == "setup" and not r
    assert r.where == "fc.weight"
    assert [p.status for p in r.phases[1:]] == ["skipped"] * 7
    j = r.to_json()
    assert j["netparity_step_result_version"] == 1 and j["first_divergence"]["phase"] == "setup"
    assert j["ref"]["params"] == COUNTS


def _pair(kind: str, direction: str, role: str, status: str = "pass", **metrics: float
          ) -> PairResult:
    return PairResult(f"{kind}|{direction}|{role}", kind, direction, 0, 0, role, "", "", "", "",
                      "", "float32", "float32", [], [], 1e-4, 0.0, "", status=status,
                      metrics={"basis": "tensors", **metrics})


@pytest.mark.parametrize(("dz_rmse", "fails"), [(1e-5, False), (1e-9, True)])
def test_a_loss_difference_the_outputs_can_carry_is_not_a_loss_divergence(dz_rmse, fails):
    # a cross-entropy computed another way turns the logits' accepted rounding difference into
    # a loss difference; its bound is ||dL/dz|| * ||dz|| (64 logits, gradient rms 0.02)
    loss = _pair("loss", "forward", "output", "fail", max_abs=1.2e-5, ref_rms=1.63,
                 noise_bound=5.9e-6)
    z = _pair("module", "forward", "output", numel=64, rmse=dz_rmse, ref_rms=2.0)
    g = _pair("module", "backward", "input", numel=64, rmse=0.0, ref_rms=0.02)
    r = CompareResult(pairs=[z, g], loss=[loss])
    ph = judge_loss(r, 1.631955, 1.631967)
    bound = 64 * dz_rmse * 0.02
    assert ph.evidence["carried_bound"] == pytest.approx(bound)
    assert (ph.status == "fail") == fails, ph.summary
    # gradients captured under a loss scale (1024, undone by hand before the optimizer) are
    # that much larger than dL/dz: the bound shrinks by it; an unknown scale gives no bound
    scaled = judge_loss(r, 1.631955, 1.631967, grad_scale=1024.0)
    assert scaled.evidence["carried_bound"] == pytest.approx(bound / 1024)
    assert scaled.status == "fail"
    assert "carried_bound" not in judge_loss(r, 1.631955, 1.631967, grad_scale=None).evidence
    # without the outputs' gradients there is no bound: the loss pair's own verdict stands
    alone = judge_loss(CompareResult(pairs=[z], loss=[loss]), 1.631955, 1.631967)
    assert alone.status == "fail" and "carried_bound" not in alone.evidence


def test_the_same_training_health_findings_on_both_sides_are_not_a_port_problem():
    # a demo whose loss rises at step 2 on both sides: the step report must not read as a
    # problem of the port; one side alone with the finding does
    from netparity.analyzers.health import Explosion
    from netparity.analyzers.numerics import NumericsResult
    from netparity.analyzers.step import StepResult
    from netparity.report.sections.step import numerics

    def side(rising: bool) -> NumericsResult:
        n = NumericsResult(path="t", ranks=[0], steps=[0, 1, 2])
        if rising:
            n.explosion = Explosion(found=True, kind="rising", step=2)
        return n

    def head(ref: bool, cand: bool) -> tuple[str, str]:
        r = StepResult(phases=[], ref={}, cand={}, losses={}, lr={}, out_dir="", notes=[])
        r.numerics = {"ref": side(ref), "cand": side(cand)}
        s = numerics(r)
        return s.headline, s.status

    both = head(True, True)
    assert "not a porting difference" in both[0] and both[1] == "pass"
    one = head(False, True)
    assert "problems found" in one[0] and one[1] == "warn"
    assert "both runs healthy" in head(False, False)[0]


def _stat_pairs(x: np.ndarray, dx: np.ndarray, m_ref: float, m_cand: float, which: str):
    """PairResults of a BatchNorm's forward input and of one running statistic after a
    training-mode step of real torch BatchNorms (same start, momenta given) on x and x + dx."""
    from netparity.compare.results import CallResult

    torch = pytest.importorskip("torch")
    out = []
    for v, m in ((x, m_ref), (x + dx, m_cand)):
        bn = torch.nn.BatchNorm2d(x.shape[1], momentum=m).double().train()
        bn(torch.from_numpy(v))
        out.append(getattr(bn, which).detach().numpy())
    ref, cand = out

    def pair(key, module, a, b):
        d = b - a
        return PairResult(key, "param" if "running" in module else "module", "forward", 0, 0,
                          "input", "0", module, "", "", "", "float64", "float64", list(a.shape),
                          list(a.shape), 1e-4, 0.0, "", status="fail",
                          metrics={"basis": "tensors", "rmse": float(np.sqrt(np.mean(d * d))),
                                   "ref_rms": float(np.sqrt(np.mean(a * a)))})

    xin = pair("bn|in0", "bn", x, x + dx)
    stat = pair(f"bn.{which}", f"bn.{which}", ref, cand)
    call = CallResult("bn|call", "module", "bn", "batch_norm", "", "bn", "", "forward", 0, 0,
                      "", "", 0, inputs=[xin.key], outputs=[])
    return CompareResult(pairs=[xin], calls=[call], params=[stat]), stat


@pytest.mark.parametrize("which", ["running_mean", "running_var"])
def test_running_statistics_are_bounded_by_their_layers_input_difference(which):
    # EfficientNet-B0 at 32 px and batch 2: its last BatchNorms normalise 2 values per channel,
    # so last-bit noise becomes a large input difference and so a large running-statistic
    # difference -- amplified noise the forward already showed, not a second finding
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from netparity.analyzers.step import _norm_diff, params_differing_after, running_stat_bound

    @settings(max_examples=60, deadline=None)
    @given(st.integers(0, 2**32 - 1), st.sampled_from([(2, 6, 1, 1), (4, 3, 2, 2)]),
           st.floats(0.01, 1.0), st.floats(1e-6, 1.0))
    def holds(seed, shape, m, eps):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal(shape) * rng.uniform(0.1, 100.0)
        r, stat = _stat_pairs(x, rng.standard_normal(shape) * eps, m, m, which)
        bound = running_stat_bound(stat, r.pairs[0])
        assert bound is not None and _norm_diff(stat) <= bound
        explained: list = []
        assert params_differing_after(r, [], explained) == [] and len(explained) == 1

    holds()
    # a momentum copied wrong (0.1 vs 0.9) on the same input is no input's doing: kept
    x = np.random.default_rng(1).standard_normal((2, 6, 1, 1)) * 3.0 + 1.0
    r, stat = _stat_pairs(x, np.zeros_like(x), 0.1, 0.9, which)
    assert params_differing_after(r, []) == [stat]


def test_a_gradient_culprit_is_the_one_nearest_the_loss():
    # backward runs from the loss back: of two diverging parameter gradients the head's is
    # reached first, whatever forward order says (issue 28: a decoder BatchNorm was named ahead
    # of the head); a parameter of a module never seen in forward comes last
    from netparity.analyzers.step import judge_backward

    def grad(name: str) -> PairResult:
        return PairResult(name, "grad", "", 0, 0, "grad", "", name, "", name, "", "float32",
                          "float32", [4], [4], 1e-5, 1e-5, "noise", status="fail")

    order = {"decoder.bn": 3, "head": 10}
    r0 = CompareResult(params=[grad("decoder.bn.weight"), grad("head.weight"),
                               grad("unused.weight")])
    bwd = judge_backward(r0, order)
    assert (bwd.status, bwd.where) == ("fail", "head"), bwd.summary
    r1 = CompareResult(params=[grad("unused.weight"), grad("decoder.bn.weight")])
    assert judge_backward(r1, order).where == "decoder.bn"
