"""The bisection on synthetic trees (no framework): one culprit anywhere in any tree is found in
about log2(regions) + 2 runs; a difference spread over regions names none."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from netparity.bisect import bisect_tree


@st.composite
def trees(draw: st.DrawFn) -> tuple[dict[str, list[str]], str]:
    """A random module tree (2-9 children per node, depth 1-4) and one leaf or inner node."""
    tree: dict[str, list[str]] = {}

    def grow(node: str, depth: int) -> None:
        n = draw(st.integers(0 if node else 2, 9)) if depth < 4 else 0
        tree[node] = [f"{node}.{i}" if node else str(i) for i in range(n)]
        for c in tree[node]:
            grow(c, depth + 1)

    grow("", 0)
    nodes = [n for n in tree if n]
    return tree, draw(st.sampled_from(nodes))


def _loss(culprit: str) -> object:
    """1.0 (the reference's) when the culprit or one of its ancestors is switched back."""
    def measure(switched: tuple[str, ...]) -> float:
        return 1.0 if any(culprit == s or culprit.startswith(s + ".") for s in switched) \
            else 2.0
    return measure


@settings(max_examples=200, deadline=None)
@given(trees())
def test_one_culprit_is_found_within_log2_runs(case: tuple[dict[str, list[str]], str]) -> None:
    tree, culprit = case
    s = bisect_tree(tree.get, _loss(culprit), ref_loss=1.0, cand_loss=2.0, tol=1e-9)
    # a region with children whose switch back alone fixes nothing: the search walks back up
    # to it; with the difference in a leaf it is that leaf
    assert s.region is not None and (s.region == culprit or culprit.startswith(s.region + "."))
    if not tree[culprit]:
        assert s.region == culprit
    assert s.fix_share == 1.0 and s.reproduce_share == 1.0
    # one run per halving along the chain the search descended, a verification per level
    # below the culprit it walks back up (an inner culprit), and one reproduction
    halvings = sum(math.ceil(math.log2(len(tree[c.rpartition(".")[0]]))) for c in s.chain)
    below = len(s.chain) - (culprit.count(".") + 1)
    assert s.chain[culprit.count(".")] == culprit
    assert len(s.runs) <= halvings + below + 2


def test_an_operation_of_a_container_is_named_at_the_container() -> None:
    """The difference made by the node's own code (no child fixes it): the deepest child the
    search inferred is verified, fails, and its parent is named."""
    tree = {"": ["a", "b"], "a": ["a.x", "a.y"], "b": []}

    def measure(switched: tuple[str, ...]) -> float:
        return 1.0 if "a" in switched else 2.0

    s = bisect_tree(tree.get, measure, ref_loss=1.0, cand_loss=2.0, tol=1e-9)
    assert s.region == "a" and s.chain == ["a", "a.y"]
    assert [r.purpose for r in s.runs] == ["halve", "halve", "verify", "reproduce"]


def test_a_spread_difference_names_no_region() -> None:
    tree = {"": ["a", "b", "c", "d"], "a": [], "b": [], "c": [], "d": []}

    def measure(switched: tuple[str, ...]) -> float:
        return 2.0 - 0.25 * len(switched)  # each module carries a quarter

    s = bisect_tree(tree.get, measure, ref_loss=1.0, cand_loss=2.0, tol=1e-9)
    assert s.region is None and s.reproduce_share is None


def test_the_run_budget_stops_the_search() -> None:
    tree = {"": [str(i) for i in range(64)]}
    s = bisect_tree(tree.get, _loss("37"), ref_loss=1.0, cand_loss=2.0, tol=1e-9, max_runs=3)
    assert not s.complete and len(s.runs) == 3
