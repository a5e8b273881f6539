"""A uniform ratio of every update is named a learning rate only when it is one (issue 28,
deliver 3): the specs' rates differ, the ratio follows the schedule, or the optimizers' own
rates differ; with equal declared rates it is gradient handling (Adam-type: the update rule).
Every caller that names it -- step 0's update (``judge_update``, with or without optimizer
replay: ``refine_update`` passes through it) and a later step (``later_step_divergence``) --
goes through :meth:`RateFacts.name`."""

from __future__ import annotations

import pytest

from netparity.analyzers.step import RateFacts, judge_update, later_step_divergence
from netparity.compare.results import CompareResult

LR = "optimizer (learning rate)"
DELTAS = [{"param": f"l{i}.weight", "cand_param": f"l{i}.weight", "ratio": 2.0**-10,
           "rel_err": 1.0, "decay_explained": 0.0, "decay_signal": 0.0, "decay_coef": 0.0}
          for i in range(4)]
ORDER = {f"l{i}": i for i in range(4)}

CASES = {
    # (schedules, optimizers' own rates differ, adam, ratio) -> where
    "declared-rates-differ": (({"ref": [0.1, 0.1], "cand": [0.2, 0.2]}, False, False, 2.0), LR),
    "schedule-off-by-one": (({"ref": [0.1, 0.05, 0.025], "cand": [0.1, 0.05, 0.025]}, False,
                             False, 0.5), LR),
    "optimizers-rates-differ": (({"ref": [0.1] * 3, "cand": [0.1] * 3}, True, False, 2.0), LR),
    "nothing-declared": (({"ref": None, "cand": None}, False, False, 2.0), LR),
    "equal-rates-sgd": (({"ref": [0.1] * 3, "cand": [0.1] * 3}, False, False, 2.0**-10),
                        "gradient handling"),
    "equal-rates-adam": (({"ref": [0.1] * 3, "cand": [0.1] * 3}, False, True, 3.16),
                         "optimizer (update rule)"),
}


def _empty() -> CompareResult:
    return CompareResult()


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("caller", ["step-0-update", "later-step"])
def test_a_uniform_update_ratio_is_named_by_what_is_known_of_the_rates(case, caller):
    (lr, differ, adam, ratio), where = CASES[case]
    rates = RateFacts(lr, optimizers_differ=differ, adam=adam)
    deltas = [dict(d, ratio=ratio) for d in DELTAS]
    step = 0 if caller == "step-0-update" else 1
    if caller == "step-0-update":
        ph = judge_update(_empty(), deltas, ORDER, rates, None)
        got, why = ph.where, ph.summary
    else:
        found = later_step_divergence(_empty(), step, deltas, ORDER, None, None, rates=rates)
        assert found is not None and found[0] == "update"
        got, why = found[1], found[2]
    assert got == where, why
    if where == LR:
        assert "learning rate" in why
    else:  # the rate is never blamed when both specs declare the same one
        assert "the learning rate differs" not in why and "declare the learning rate" in why
