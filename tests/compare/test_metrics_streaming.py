"""The streaming metric pass against direct NumPy on multi-chunk arrays.

The pass skips work whenever a bound already decides the result (elements that cannot raise the
required tolerance, chunks entirely within tolerance); these tests pin that every reported number
still equals its definition computed element by element, including when the deciding element sits
in a later chunk than the one that set the running maximum.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from netparity.compare.metrics import CHUNK, array_metrics


def _direct(a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> dict[str, float]:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    fin = np.isfinite(a64) & np.isfinite(b64)
    same_nf = (np.isnan(a64) & np.isnan(b64)) | (np.isinf(a64) & (a64 == b64))
    x, y = a64[fin], b64[fin]
    d, r = np.abs(y - x), np.abs(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        need = np.fmax.reduce((d - atol) / r) if d.size else 0.0
    return {
        "max_abs": float(d.max()),
        "mean_abs": float(d.mean()),
        "min_atol": max(0.0, float((d - rtol * r).max())),
        "min_rtol": max(0.0, float(need)),
        "within": (int(np.count_nonzero(d - rtol * r <= atol)) + int(same_nf.sum())) / a.size,
        "cosine": float(np.dot(x, y) / np.linalg.norm(x) / np.linalg.norm(y)),
    }


def _pair(kind: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    n = 5 * CHUNK + 123
    a = rng.standard_normal(n).astype(np.float32)
    b = (a + 1e-6 * rng.standard_normal(n)).astype(np.float32)
    if kind == "late_spike":  # the element that sets min_atol/min_rtol is in the last chunk
        b[-50] = a[-50] + np.float32(3e-3)
        a[-7], b[-7] = np.float32(0.0), np.float32(2e-3)  # r == 0 past atol: min_rtol inf
    elif kind == "late_small_ref":  # tiny |ref| in a later chunk raises d - rtol*|r| only there
        a[3 * CHUNK + 5] = np.float32(1e-9)
        b[3 * CHUNK + 5] = np.float32(4e-5)
    elif kind == "nonfinite":
        a[10], b[10] = np.nan, np.nan  # matching NaN
        a[CHUNK + 3] = np.inf  # inf on one side only
        b[4 * CHUNK + 9] = np.nan  # NaN on one side only
    elif kind == "scaled":  # a scale bug: very different norms, same direction
        b = (a * np.float32(1e4)).astype(np.float32)
    return a, b


@pytest.mark.parametrize("kind", ["noise", "late_spike", "late_small_ref", "nonfinite", "scaled"])
@pytest.mark.parametrize(("rtol", "atol"), [(1e-4, 1e-4), (0.0, 1e-5), (1e-2, 0.0), (1.3e-6, 1e-5)])
def test_streaming_metrics_equal_direct(kind: str, rtol: float, atol: float) -> None:
    a, b = _pair(kind)
    m = array_metrics(a, b, rtol=rtol, atol=atol)
    ref = _direct(a, b, rtol, atol)
    assert m["max_abs"] == ref["max_abs"]
    assert m["min_atol"] == ref["min_atol"]
    assert m["min_rtol"] == ref["min_rtol"]
    assert m["within"] == ref["within"]
    assert m["mean_abs"] == pytest.approx(ref["mean_abs"], rel=1e-12)
    assert m["cosine"] == pytest.approx(ref["cosine"], rel=1e-12, abs=1e-15)


def test_required_tolerances_are_tight_across_chunks() -> None:
    # Re-running just above the reported minimum passes every finite element; just below fails.
    a, b = _pair("late_small_ref")
    m = array_metrics(a, b, rtol=1e-4, atol=1e-4)
    assert m["min_atol"] > 0
    above = array_metrics(a, b, rtol=1e-4, atol=m["min_atol"] * (1 + 1e-9))
    below = array_metrics(a, b, rtol=1e-4, atol=m["min_atol"] * (1 - 1e-9))
    assert above["within"] == 1.0 and below["within"] < 1.0
    r = array_metrics(a, b, rtol=1e-4, atol=1e-6)
    assert 0 < r["min_rtol"] < math.inf
    assert array_metrics(a, b, rtol=r["min_rtol"] * (1 + 1e-9), atol=1e-6)["within"] == 1.0
    assert array_metrics(a, b, rtol=r["min_rtol"] * (1 - 1e-9), atol=1e-6)["within"] < 1.0
