"""The all-reduce bucket proposal is never predicted to be worse than DDP's default buckets,
whatever the gradient-ready times, sizes and link (property test over the cost model)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from netparity.analyzers.allreduce import (
    DDP_DEFAULT_CAP,
    DDP_FIRST_CAP,
    Bandwidth,
    ddp_buckets,
    proposed_split,
    simulate,
)

MIB = 2**20


@settings(max_examples=200, deadline=None)
@given(gaps=st.lists(st.floats(0.0, 5e-3), min_size=1, max_size=30),
       sizes=st.lists(st.integers(1, 40 * MIB), min_size=30, max_size=30),
       latency=st.floats(0.0, 2e-3), bandwidth=st.floats(1e8, 1e10))
def test_the_proposal_never_loses_to_the_default(gaps: list[float], sizes: list[int],
                                                 latency: float, bandwidth: float) -> None:
    ready = [sum(gaps[: k + 1]) for k in range(len(gaps))]
    sz = sizes[: len(ready)]
    bw = Bandwidth(latency=latency, bandwidth=bandwidth, points=[], source="model")
    split = proposed_split(ready, sz, bw)
    # a partition of the gradients, contiguous in ready order
    assert [i for b in split for i in b] == list(range(len(ready)))
    default = ddp_buckets(sz, DDP_DEFAULT_CAP, DDP_FIRST_CAP)
    assert simulate(ready, sz, split, bw) <= simulate(ready, sz, default, bw)
