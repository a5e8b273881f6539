"""Verdicts: pass / warn / fail per pair, from its metrics (and again at new tolerances).

Per pair (tensor basis): **fail** when NaN/Inf positions differ or when the pair exceeds its
tolerance by more than the warn band; **pass** when every element satisfies
``|c - r| <= atol + rtol*|r|``; **warn** when it does not, but would with *one* of the two
tolerances :data:`WARN_FACTOR` (10) times looser (``min_atol <= 10*atol`` or
``min_rtol <= 10*rtol``). The stats basis applies the same rule to lower bounds of the error
(a stats failure is certain, a stats pass is weak). fp64-reference mode replaces the rule by
"candidate error vs fp64 <= k * reference error vs fp64 + floor".

Per call (introduced / propagated), the first divergences and the minimum passing tolerances
are localisation, in :mod:`netparity.analyzers.divergence`: this module judges pairs only.

Example:
    >>> judge({"basis": "tensors", "min_atol": 0.0, "min_rtol": 0.0, "nan_mismatch": 0,
    ...        "inf_mismatch": 0, "max_abs": 0.0}, 1e-5, 1e-5)
    ('pass', '')
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from netparity.compare.metrics import R_BITS, WARN_FACTOR, d_bin_edges, r_bin_edges

#: an output error this many times the inputs' makes a call "introduced" even if inputs diverge.
#: A setting of the comparison (``compare(..., amplification=)``, saved in the result's settings);
#: :mod:`netparity.analyzers.divergence` applies it.
AMPLIFICATION = 100.0


def _g(m: dict[str, Any], k: str, default: float = 0.0) -> float:
    v = m.get(k, default)
    return float(v) if v is not None else default


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def _nonfinite_reason(m: dict[str, Any]) -> str:
    parts = []
    if m.get("nan_mismatch"):
        parts.append(f"{m['nan_mismatch']} NaN position(s) differ")
    if m.get("inf_mismatch"):
        parts.append(f"{m['inf_mismatch']} Inf position(s) differ")
    return "; ".join(parts)


def judge(m: dict[str, Any], rtol: float, atol: float) -> tuple[str, str]:
    """Status and reason of one pair from its metrics, at ``(rtol, atol)``.

    ``m`` must have been computed at these tolerances (tensor basis) or holds statistics (stats
    basis, any tolerance). Use :func:`rejudge` for other tolerances.
    """
    basis = m.get("basis")
    if basis == "hash":
        return "pass", ""
    if basis in (None, "none"):
        return "unknown", str(m.get("reason", "no evidence captured"))
    if basis == "shape":
        return "fail", str(m.get("reason", "shape mismatch"))
    nf = _nonfinite_reason(m)
    if nf:
        return "fail", nf
    if basis == "stats":
        return judge_stats(m, _g(m, "max_abs_lb"), atol + rtol * _g(m, "ref_maxabs"))
    min_atol, min_rtol = _g(m, "min_atol"), _g(m, "min_rtol")
    norm_tol = m.get("norm_tol")
    if norm_tol is not None:
        return _judge_norm(m, float(norm_tol), rtol, atol, min_atol <= atol)
    if min_atol <= atol:
        return "pass", ""
    msg = (
        f"max abs err {_fmt(_g(m, 'max_abs'))}, max rel err {_fmt(_g(m, 'max_rel'))}, "
        f"{100 * (1 - _g(m, 'within', 1.0)):.3g}% of elements outside rtol={_fmt(rtol)} "
        f"atol={_fmt(atol)}; would pass with atol>={_fmt(min_atol)} or rtol>={_fmt(min_rtol)}"
    )
    if min_atol <= WARN_FACTOR * atol or min_rtol <= WARN_FACTOR * rtol:
        return "warn", msg
    return "fail", msg


def judge_stats(m: dict[str, Any], lb: float, bound: float) -> tuple[str, str]:
    """The stats-basis rule of :func:`judge` for metrics without a NaN/Inf mismatch, given
    ``lb = max_abs_lb`` and ``bound = atol + rtol * ref_maxabs`` (batch callers have them)."""
    if lb <= bound:
        return "pass", ""
    diffs = m.get("stat_diff") or {}
    # the first statistic with the largest difference (max over the items keeps the first)
    worst_stat = max(diffs, key=diffs.__getitem__) if diffs else ""
    msg = (
        f"statistics differ: |d{worst_stat}| = {_fmt(lb)} > atol + rtol*max|ref| "
        f"= {_fmt(bound)}"
    )
    if lb <= WARN_FACTOR * bound:
        return "warn", msg
    return "fail", msg


def norm_error(m: dict[str, Any]) -> float:
    """Normwise relative error ``rmse / rms(ref)`` (``inf`` when the reference is all zeros and
    the candidate is not)."""
    rmse, rms = _g(m, "rmse"), _g(m, "ref_rms")
    if rms > 0:
        return rmse / rms
    return 0.0 if rmse == 0 else math.inf


def _judge_norm(m: dict[str, Any], norm_tol: float, rtol: float, atol: float,
                elementwise_ok: bool) -> tuple[str, str]:
    """Cross-profile rule: normwise error decides; elementwise outliers under it warn."""
    e = norm_error(m)
    m["norm_err"] = e
    if e > norm_tol:
        return "fail", (
            f"normwise relative error {_fmt(e)} > {_fmt(norm_tol)} (max abs err "
            f"{_fmt(_g(m, 'max_abs'))}, cosine {_g(m, 'cosine', 1.0):.7f})")
    if elementwise_ok:
        return "pass", ""
    outside = 1 - _g(m, "within", 1.0)
    why = ("sparse outliers, typical of ReLU/max-pool decisions flipping between kernels"
           if outside < 0.01 else "small differences spread over the tensor")
    return "warn", (
        f"normwise error {_fmt(e)} is within {_fmt(norm_tol)}, but {100 * outside:.3g}% of "
        f"elements exceed rtol={_fmt(rtol)} atol={_fmt(atol)} (max rel err "
        f"{_fmt(_g(m, 'max_rel'))}): {why}")


def judge_fp64(ref64: dict[str, Any], cand64: dict[str, Any], k: float, floor: float) -> tuple[str, str]:
    """fp64-reference rule: cand error vs fp64 <= k * ref error vs fp64 + floor (max abs)."""
    nf = _nonfinite_reason(cand64)
    if nf and not _nonfinite_reason(ref64):
        return "fail", nf + " (against the fp64 reference)"
    e_ref, e_cand = _g(ref64, "max_abs"), _g(cand64, "max_abs")
    bound = k * e_ref + floor
    if e_cand <= bound:
        return "pass", ""
    msg = (
        f"error vs fp64 {_fmt(e_cand)} > {k:g} x reference's own error {_fmt(e_ref)} "
        f"+ floor {_fmt(floor)}"
    )
    if e_cand <= WARN_FACTOR * bound:
        return "warn", msg
    return "fail", msg


# ---- recheck: judging saved evidence at new tolerances ---------------------------------------
def _curve_points(m: dict[str, Any]) -> tuple[list[tuple[float, float]], float | None]:
    """Known points (rtol, g(rtol)) of g(rtol) = max(0, max(d - rtol*|r|)) (convex, decreasing).

    Returns the points and, when an element with ``r == 0`` exceeds the original atol, that atol
    (g stays above it for every rtol).
    """
    rtol0, atol0 = _g(m, "rtol"), _g(m, "atol")
    pts = {0.0: _g(m, "max_abs")}
    pts[rtol0] = _g(m, "min_atol")
    r0 = _g(m, "min_rtol")
    floor = None
    if math.isinf(r0):
        floor = atol0
    elif r0 > 0:
        pts[r0] = min(pts.get(r0, atol0), atol0) if r0 in pts else atol0
    return sorted(pts.items()), floor


def _bounds(m: dict[str, Any], x: float) -> tuple[float, float]:
    """Lower and upper bound of g(x) from the known points and convexity."""
    pts, floor = _curve_points(m)
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    upper = math.inf
    lower = 0.0 if floor is None else math.nextafter(floor, math.inf)
    for xi, yi in pts:
        if xi <= x:
            upper = min(upper, yi)  # non-increasing
    for i in range(len(pts) - 1):
        x0, y0, x1, y1 = xs[i], ys[i], xs[i + 1], ys[i + 1]
        if x1 == x0:
            continue
        slope = (y1 - y0) / (x1 - x0)
        line = y0 + slope * (x - x0)
        if x0 <= x <= x1:
            upper = min(upper, line)  # convex: below the chord inside it
        else:
            lower = max(lower, line)  # convex: above the chord's extension outside it
    return lower, upper


def estimate_within(m: dict[str, Any], rtol: float, atol: float) -> tuple[float, int]:
    """Fraction of elements within ``(rtol, atol)`` estimated from the saved 2-D histogram,
    and the number of sampled elements that are certainly outside."""
    hist = m.get("hist")
    numel = int(m.get("numel") or 0)
    if not hist or not numel:
        return float("nan"), 0
    arr = np.asarray(hist, dtype=np.int64)
    idx, cnt = arr[:, 0], arr[:, 1]
    dlo, dhi = d_bin_edges(idx >> R_BITS)
    rlo, rhi = r_bin_edges(idx & ((1 << R_BITS) - 1))
    sure_in = dhi <= atol + rtol * rlo
    sure_out = dlo > atol + rtol * rhi
    partial = ~(sure_in | sure_out)
    sampled = int(cnt.sum())
    frac_finite = (cnt[sure_in].sum() + 0.5 * cnt[partial].sum()) / sampled
    finite = int(m.get("finite", numel))
    nf = int(m.get("nonfinite_match", 0))
    return (nf + frac_finite * finite) / numel, int(cnt[sure_out].sum())


def _decide(m: dict[str, Any], rtol: float, atol: float) -> str:
    """'pass' | 'fail' | 'unsure' for the tensor basis at new tolerances."""
    if math.isclose(rtol, _g(m, "rtol")) and math.isclose(atol, _g(m, "atol")):
        return "pass" if _g(m, "min_atol") <= atol else "fail"
    lo, hi = _bounds(m, rtol)
    if hi <= atol:
        return "pass"
    if lo > atol:
        return "fail"
    _, out = estimate_within(m, rtol, atol)
    if out > 0:
        return "fail"  # a sampled element is certainly outside
    return "unsure"


def rejudge(m: dict[str, Any], rtol: float, atol: float,
            use_norm: bool = True) -> tuple[str, str, bool]:
    """Status, reason and exactness of a saved pair at new tolerances (no tensor access).

    Exact for the stats and hash bases and, on the tensor basis, whenever the saved points of the
    convex required-tolerance curve decide it; otherwise estimated from the histogram. A pair
    judged by the cross profile's normwise rule (``norm_tol`` in its metrics) keeps that rule
    while ``use_norm`` -- as ``compare`` does, global tolerances switch it off: the normwise
    error does not depend on tolerances, so it is exact, and only the pass/warn split under it
    uses the elementwise decision at the new tolerances.
    """
    basis = m.get("basis")
    if basis != "tensors":
        s, r = judge({**m, "rtol": rtol, "atol": atol}, rtol, atol)
        return s, r, True
    nf = _nonfinite_reason(m)
    if nf:
        return "fail", nf, True
    d = _decide(m, rtol, atol)
    norm_tol = m.get("norm_tol") if use_norm else None
    if norm_tol is not None:
        est, _ = estimate_within(m, rtol, atol)
        seen = {**m, "within": est if d != "pass" and est == est else 1.0}
        s, r = _judge_norm(seen, float(norm_tol), rtol, atol, d == "pass")
        m["norm_err"] = seen["norm_err"]
        exact = s != "warn" or d == "fail"
        return s, (r if exact else r + " (elementwise part estimated; re-run compare)"), exact
    if d == "pass":
        return "pass", "", True
    est, _ = estimate_within(m, rtol, atol)
    est_txt = f"~{100 * (1 - est):.3g}% of elements outside" if est == est else "outside"
    msg = f"max abs err {_fmt(_g(m, 'max_abs'))}; {est_txt} rtol={_fmt(rtol)} atol={_fmt(atol)}"
    if d == "fail":
        loose = [_decide(m, rtol, WARN_FACTOR * atol), _decide(m, WARN_FACTOR * rtol, atol)]
        if "pass" in loose:
            return "warn", msg, True
        if "unsure" in loose:
            return "warn", msg + " (recheck estimate; re-run compare to be sure)", False
        return "fail", msg, True
    return "warn", msg + " (recheck cannot decide from saved evidence; re-run compare)", False
