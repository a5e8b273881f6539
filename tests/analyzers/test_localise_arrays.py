"""Localisation on the pair table's columns gives what the per-pair objects give.

The table path (classification, first divergences and minimum tolerances as whole arrays) is
what every statistics comparison takes; the object path is what a result loaded from JSON or
edited by hand takes. They must agree on every verdict and figure.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netparity.analyzers import divergence as div
from netparity.compare import engine


def _verdicts(r: Any) -> tuple[Any, ...]:
    calls = [(c.key, c.status, c.origin, c.note, c.in_error, c.out_error) for c in r.calls]
    firsts = [dataclasses.asdict(d) if d is not None else None
              for d in (r.first_divergence, r.first_backward, r.first_update)]
    return calls, firsts, r.min_tolerance


@pytest.mark.parametrize("case", [
    {},  # a faithful pair: everything passes
    {"perturb": {("net.l2", "forward"): 1e-2}},  # introduced in the forward, propagated back
    {"perturb": {("net.l2", "forward"): 1e-4, ("net.l3", "forward"): 1e-2}},  # amplified
    {"perturb": {("net.l1.weight", "grad"): 1e-2}},  # a gradient only
    {"noise": 1e-4, "noise_seed": 3},  # warnings, no failure
])
@pytest.mark.parametrize("profile", ["same", "cross"])
def test_table_and_object_localisation_agree(net, case, profile):
    ref, cand = net(), net(**case)
    by_table = engine.compare(ref, cand, level="both", profile=profile)
    assert by_table.table is not None
    by_objects = engine.compare(ref, cand, level="both", profile=profile)
    by_objects.pairs  # noqa: B018 -- every pair made: the table is dropped, objects rule
    assert by_objects.table is None
    assert _verdicts(div.localise(by_table)) == _verdicts(div.localise(by_objects))


def _oracle(rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """The per-row definition of the minimum passing tolerances."""
    def f(v: Any) -> float:
        return float(v) if v is not None else 0.0

    groups: dict[tuple[float, float], dict[str, Any]] = {}
    for basis, rtol, atol, source, ref_rms, nf, min_atol, min_rtol in rows:
        if basis not in ("tensors", "stats"):
            continue
        rms = f(ref_rms) if "(atol x rms)" in source else 0.0
        scale = rms if rms > 0 else 1.0
        key = (rtol, atol) if rms <= 0 else (rtol, -1.0)
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"rtol": rtol, "atol": atol / scale, "min_atol": 0.0,
                               "min_rtol": 0.0, "pairs": 0, "nonfinite_mismatch": 0,
                               "basis": set(), **({"atol_unit": "rms"} if rms > 0 else {})}
        g["pairs"] += 1
        g["basis"].add(basis)
        if nf:
            g["nonfinite_mismatch"] += 1
            continue
        g["min_atol"] = max(g["min_atol"], f(min_atol) / scale)
        g["min_rtol"] = max(g["min_rtol"], f(min_rtol))
    out = []
    for g in groups.values():
        g["basis"] = "+".join(sorted(g["basis"]))
        out.append(g)
    out.sort(key=lambda g: -int(g["pairs"]))
    return out


_num = st.one_of(st.none(), st.floats(0, 10), st.just(math.nan), st.sampled_from([0.0, 1e-3]))
_row = st.tuples(
    st.sampled_from(["stats", "tensors", "skipped", None]),
    st.sampled_from([1e-4, 1e-3, 0.0]),
    st.sampled_from([1e-5, 1e-3, 0.0, -1.0]),
    st.sampled_from(["default", "float32 (atol x rms)", "override", "float16 (atol x rms)"]),
    _num, st.booleans(), _num, _num,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_row, max_size=40))
def test_minimum_tolerances_as_arrays_match_the_definition(rows):
    got, want = div.min_tolerance_rows(rows), _oracle(rows)
    assert [list(g) for g in got] == [list(g) for g in want]  # same keys, same order

    def same(a: Any, b: Any) -> bool:
        return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))

    for g, w in zip(got, want):
        assert all(same(g[k], w[k]) for k in w), (g, w)


@settings(max_examples=300, deadline=None)
@given(st.lists(_row, max_size=40), st.lists(st.integers(0, 40), max_size=4))
def test_minimum_tolerances_part_by_part_match_the_definition(rows, cuts):
    """A large table's minimum tolerances are computed a part of its pairs at a time
    (``PairTable.tolerance_parts``): the groups, their values and their order are those of
    all pairs at once, wherever the parts are cut (a group spanning parts, NaN keys, a
    group's first pair in a later part)."""
    at = sorted({min(c, len(rows)) for c in cuts} | {0, len(rows)})
    parts = [div._columns_of_rows(rows[a:b]) for a, b in zip(at, at[1:]) if b > a]
    got, want = div.min_tolerance_parts(parts), _oracle(rows)
    assert [list(g) for g in got] == [list(g) for g in want]

    def same(a: Any, b: Any) -> bool:
        return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))

    for g, w in zip(got, want):
        assert all(same(g[k], w[k]) for k in w), (g, w)
