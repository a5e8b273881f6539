"""A gradient that is zero in exact arithmetic is rounding noise on both sides: it passes, and
only then."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import netparity
from netparity.compare.engine import recheck
from netparity.compare.results import CompareResult


def _noise(seed: int, scale: float = 1e-9) -> Callable[[str, str, str, np.ndarray], np.ndarray]:
    """Replace net.l2's weight gradient by independent noise (like a bias before batch norm)."""
    rng = np.random.default_rng(seed)

    def edit(module: str, direction: str, role: str, arr: np.ndarray) -> np.ndarray:
        if module == "net.l2.weight" and role == "grad":
            return (scale * rng.standard_normal(arr.shape)).astype(arr.dtype)
        return arr

    return edit


def _grad(result: CompareResult, name: str):  # type: ignore[no-untyped-def]
    (p,) = [p for p in result.params if p.kind == "grad" and name in p.key]
    return p


def test_noise_on_both_sides_passes_with_a_reason(net):
    res = netparity.compare(net(edit=_noise(1)), net(edit=_noise(2)), profile="cross")
    p = _grad(res, "net.l2.weight")
    assert p.status == "pass" and "rounding noise" in p.reason
    assert p.metrics["cosine"] < 0.5  # the two sides really are unrelated noise
    assert res.passed and any("rounding noise" in n for n in res.notes)
    # recheck keeps the rule (tolerances do not enter it)
    again = recheck(CompareResult.from_json(res.to_json()), rtol=0.0, atol=0.0)
    assert _grad(again, "net.l2.weight").status == "pass"


def test_a_gradient_that_vanishes_on_one_side_still_fails(net):
    res = netparity.compare(net(), net(edit=_noise(2)), profile="cross")
    p = _grad(res, "net.l2.weight")
    assert p.status == "fail" and "rounding noise" not in p.reason
    assert not res.passed


def test_noise_above_the_floor_is_not_excused(net):
    # 1e-3 of the typical gradient is far above rounding noise: a real (small) divergence
    res = netparity.compare(net(edit=_noise(1, 1e-3)), net(edit=_noise(2, 1e-3)),
                            profile="cross")
    assert _grad(res, "net.l2.weight").status == "fail"
