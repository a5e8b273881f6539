"""Repeated calls at ``--level both`` (issue #28, item 3 at op level): gradient accumulation
with two micro-batches, the candidate running micro-batch 2's backward first. The module calls
pair by content (:mod:`netparity.align.repeats`) and their ops follow them (each op partition
is the paired module call's); the accumulation ``add`` into each gradient adds the same two
partial sums in the other order, so its operands pair crosswise. The faithful pair passes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

from tests.compare.test_oplevel_trust import _accumulate  # noqa: E402

import netparity  # noqa: E402


def test_micro_batches_in_another_order_pass_at_both_levels_ops_following_their_modules(
        tmp_path):
    _accumulate(tmp_path / "ref", False, level="both")
    _accumulate(tmp_path / "cand", True, level="both")
    r = netparity.compare(tmp_path / "ref", tmp_path / "cand", level="both")
    bad = [(p.name, p.direction, p.reason) for p in r.all_pairs() if p.status != "pass"
           and not (p.status == "unknown" and p.metrics.get("restructured"))]  # set aside
    assert r and not bad, bad[:4]
    moved = [c for c in r.calls if c.level == "module" and c.direction == "backward"
             and c.method == "content"]
    assert moved
    back_ops = [c for c in r.calls if c.level == "op" and c.direction == "backward"]
    assert len(back_ops) > 30 and all(c.status == "pass" for c in back_ops)
    # the accumulation adds are compared, their operands crosswise
    assert sum(bool(p.metrics.get("commuted")) for p in r.pairs) == 8
    # only the first copy into each gradient holds another micro-batch's partial sum on the
    # two sides: left out as restructured inside the agreeing module
    listed = r.unmatched.get("restructured", [])
    assert [(e["op"], e["direction"]) for e in listed] == [("identity", "backward")]
