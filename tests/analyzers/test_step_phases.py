"""Phase judgements of the step analyzer, on plain arrays and dicts (no framework needed)."""

from __future__ import annotations

import numpy as np

from netparity.analyzers.step import (
    SetupFacts,
    StepRun,
    diagnose_step,
    judge_data,
    judge_setup,
    judge_updates,
    optimizer_mismatch,
)

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
