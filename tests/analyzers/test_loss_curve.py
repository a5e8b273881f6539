"""The loss-curve explosion search is linear-time and finds what the prefix-median search found
(issue 29: 9 s for a 10k-line log, 117 s for 40k; see benchmarks/loss_curve.py)."""

from __future__ import annotations

import math
import statistics

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from netparity.analyzers.health import find_explosion


def _reference(losses, factor=10.0):
    """The search as it was: the median of every prefix, recomputed at each step (then the
    "rising" rule, which did not change, from the function itself)."""
    for i, (s, v) in enumerate(losses):
        if v != v or v in (math.inf, -math.inf):
            return s, "nonfinite"
        med = statistics.median(abs(x) for _, x in losses[:i]) if i else 0.0
        if med > 0 and abs(v) > factor * med:
            return s, "jump"
    rest = find_explosion(losses, factor=math.inf)
    return rest if rest[1] == "rising" else (None, "")


_loss = st.one_of(st.floats(-1e6, 1e6, allow_nan=False), st.sampled_from([0.0, 1.0, 2.0]),
                  st.just(float("nan")), st.just(float("inf")))


@settings(max_examples=300, deadline=None)
@given(st.lists(_loss, max_size=60), st.sampled_from([1.5, 2.0, 10.0, 100.0]))
def test_same_window_as_the_prefix_median_search(vals, factor):
    curve = list(enumerate(vals))
    assert find_explosion(curve, factor=factor) == _reference(curve, factor=factor)


def test_a_long_healthy_log_with_a_late_jump():
    rng = np.random.default_rng(0)
    vals = list(2.0 * 0.9999 ** np.arange(20_000) + rng.random(20_000) * 0.01)
    vals[19_000] = 50.0
    curve = list(enumerate(vals))
    assert find_explosion(curve) == (19_000, "jump")
