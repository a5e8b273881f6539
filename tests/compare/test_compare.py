"""Comparison engine on synthetic traces (no frameworks needed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import netparity
from netparity.compare.metrics import array_metrics
from netparity.compare.results import CompareResult
from netparity.errors import UsageError


def _call(result: CompareResult, module: str, direction: str):
    return next(c for c in result.calls if c.module == module and c.direction == direction)


def test_identical_traces_pass(net):
    r = netparity.compare(net(), net())
    assert r and r.status == "pass"
    assert r.first_divergence is None and r.first_backward is None
    assert all(p.metrics["basis"] == "tensors" for p in r.pairs)
    assert len(r.params) == 10 and len(r.loss) == 1


def test_forward_op_perturbed_culprit_and_propagation(net):
    r = netparity.compare(net(), net(perturb={("net.l2", "forward"): 1e-2}))
    assert not r
    d = r.first_divergence
    assert (d.module, d.op, d.direction, d.step, d.verdict) == ("net.l2", "linear", "forward", 0,
                                                               "introduced")
    assert d.source == "net.py:12"
    assert d.metrics["max_rel"] == pytest.approx(1e-2, rel=0.05)
    assert _call(r, "net.l1", "forward").status == "pass"
    for m in ("net.l3", "net.l4"):
        assert _call(r, m, "forward").origin == "propagated"
    assert r.first_backward.verdict == "propagated"  # backward only inherits the error
    assert r.loss[0].status == "fail"


def test_backward_only_bug(net):
    r = netparity.compare(net(), net(perturb={("net.l3", "backward"): 1e-2}))
    assert r.first_divergence is None
    b = r.first_backward
    assert (b.module, b.direction, b.verdict) == ("net.l3", "backward", "introduced")
    assert _call(r, "net.l4", "backward").status == "pass"  # runs before l3 in backward
    assert _call(r, "net.l1", "backward").origin == "propagated"
    assert r.divergent_params("grad")  # grads of l0..l2 see the bad gradient
    assert not [p for p in r.divergent_params("grad") if p.module == "net.l4.weight"]


def test_param_grad_only_bug(net):
    r = netparity.compare(net(), net(perturb={("net.l1.weight", "grad"): 1e-2}))
    assert not r
    assert [p.module for p in r.divergent_params("grad")] == ["net.l1.weight"]
    assert r.first_divergence is None and r.first_backward is None


def _nan_edit(pos_ref: int, pos_cand: int, which: str):
    def edit(module, direction, role, arr):
        if module == "net.l1" and direction == "forward" and role == "output":
            arr = arr.copy()
            arr[pos_ref if which == "ref" else pos_cand] = np.nan
            arr[10] = np.inf
        return arr

    return edit


def test_nan_inf_matching_positions_pass(net):
    r = netparity.compare(net(edit=_nan_edit(3, 3, "ref")), net(edit=_nan_edit(3, 3, "cand")))
    p = next(p for p in r.pairs if p.module == "net.l1" and p.role == "output")
    assert p.status == "pass"
    assert p.metrics["nonfinite_match"] == 2 and p.metrics["nan_mismatch"] == 0


def test_nan_in_different_positions_fails(net):
    r = netparity.compare(net(edit=_nan_edit(3, 3, "ref")), net(edit=_nan_edit(3, 4, "cand")))
    p = next(p for p in r.pairs if p.module == "net.l1" and p.role == "output")
    assert p.status == "fail" and "NaN" in p.reason
    assert p.metrics["nan_mismatch"] == 2  # position 3 and position 4
    assert r.first_divergence.module == "net.l1"


def test_stats_only_traces_weaker_basis(net):
    r_ok = netparity.compare(net(payload="stats"), net(payload="stats"))
    assert r_ok and {p.metrics["basis"] for p in r_ok.pairs} == {"stats"}
    assert any("statistics" in n for n in r_ok.notes)
    r = netparity.compare(net(payload="stats"),
                          net(payload="stats", perturb={("net.l2", "forward"): 1e-2}))
    d = r.first_divergence
    assert d.module == "net.l2" and d.metrics["basis"] == "stats" and d.verdict == "introduced"
    assert d.metrics["max_abs_lb"] > 0


def test_dtype_aware_tolerances(net):
    # 1e-4 relative noise: far beyond float32's tolerance, well inside bfloat16's
    r32 = netparity.compare(net(), net(noise=1e-4))
    assert not r32
    rbf = netparity.compare(net(dtype="bfloat16"), net(dtype="bfloat16", noise=1e-4))
    assert rbf, [p.reason for p in rbf.pairs if p.status == "fail"][:2]
    assert {p.tol_source for p in rbf.pairs} == {"same:bfloat16"}
    assert rbf.pairs[0].rtol == 1.6e-2


def test_cross_profile_when_frameworks_differ(net):
    r = netparity.compare(net(framework="torch"), net(framework="mindspore", noise=1e-6))
    assert {p.tol_source for p in r.pairs} == {"cross:float32(atol x rms)"}
    assert r


def test_cross_profile_atol_scales_with_magnitude(net):
    # Gradients of ~1e-7 scaled by 1024 on one side (a loss-scale mismatch) must fail even though
    # every absolute difference is far below 1e-4; tiny relative noise at that scale passes.
    def scaled(factor):
        return lambda m, d, role, a: a * factor if role == "grad" else a

    ref = net(framework="torch", edit=scaled(1e-7))
    ok = netparity.compare(ref, net(framework="mindspore", edit=scaled(1e-7 * (1 + 1e-7))))
    assert ok
    bad = netparity.compare(ref, net(framework="mindspore", edit=scaled(1e-7 * 1024)))
    grads = [p for p in bad.params if p.kind == "grad"]
    assert grads and all(p.status == "fail" for p in grads)
    assert all(p.atol < 1e-9 for p in grads)  # scaled to the gradients' own magnitude

def test_per_name_overrides_and_globals(net):
    ref, cand = net(), net(perturb={("net.l2", "forward"): 1e-2})
    r = netparity.compare(ref, cand, tolerances={"net.l[2-4]": (0.1, 0.1)}, level="module")
    bad = [p for p in r.pairs if p.status != "pass"]
    # forward of l2..l4 is now within tolerance; backward of l0/l1 still fails
    assert all(p.direction == "backward" and p.module in ("net.l0", "net.l1") for p in bad)
    assert r.first_divergence is None
    assert next(p for p in r.pairs if p.module == "net.l3").tol_source == "override:net.l[2-4]"
    r2 = netparity.compare(ref, cand, rtol=0.1, atol=0.1)
    assert all(p.tol_source == "global" for p in r2.all_pairs())
    assert r2


def test_min_tolerance_reported_and_sufficient(net):
    ref, cand = net(), net(noise=1e-4, noise_seed=3)
    r = netparity.compare(ref, cand)
    assert not r
    (mt,) = r.min_tolerance
    assert mt["rtol"] == 1.3e-6 and mt["min_atol"] > 0
    again = netparity.compare(ref, cand, rtol=mt["rtol"], atol=mt["min_atol"] * 1.0001)
    assert again and again.status == "pass"
    tighter = netparity.compare(ref, cand, rtol=mt["rtol"], atol=mt["min_atol"] * 0.99)
    assert tighter.status != "pass"
    by_rtol = netparity.compare(ref, cand, atol=mt["atol"], rtol=mt["min_rtol"] * 1.0001)
    assert by_rtol.status == "pass"


def test_shape_mismatch_fails_cleanly(net):
    def edit(module, direction, role, arr):
        return arr[:-1] if module == "net.l3" and direction == "forward" and role == "output" else arr

    r = netparity.compare(net(), net(edit=edit))
    p = next(p for p in r.pairs if p.module == "net.l3" and p.role == "output" and
             p.direction == "forward")
    assert p.status == "fail" and "shape mismatch" in p.reason
    assert r.first_divergence.module == "net.l3"


def test_fp64_reference_mode(net, tmp_path):
    ref64 = net(dtype="float64")
    ref, good, bad = net(), net(), net(perturb={("net.l2", "forward"): 1e-3})
    r_good = netparity.compare(ref, good, fp64_ref=ref64, rtol=0.0, atol=0.0)
    assert r_good  # error vs fp64 equals the reference's own error
    assert r_good.pairs[0].fp64 is not None
    r_bad = netparity.compare(ref, bad, fp64_ref=ref64, k=2.0)
    assert r_bad.first_divergence.module == "net.l2"
    assert "fp64" in r_bad.first_divergence.metrics


def test_json_schema_and_roundtrip(net):
    r = netparity.compare(net(), net(perturb={("net.l2", "forward"): 1e-2}))
    j = r.to_json()
    assert j["netparity_result_version"] == 1
    for k in ("module", "op", "direction", "step", "verdict", "source", "rank", "metrics", "key"):
        assert k in j["first_divergence"]
    for k in ("first_backward", "pairs", "params", "unmatched", "min_tolerance", "calls", "loss"):
        assert k in j
    back = CompareResult.from_json(j)
    assert back.first_divergence == r.first_divergence and len(back.pairs) == len(r.pairs)


def test_bad_arguments(net, tmp_path):
    with pytest.raises(netparity.TraceError):
        netparity.compare(tmp_path / "missing", net())
    with pytest.raises(UsageError):
        netparity.compare(net(), net(), level="layer")
    with pytest.raises(UsageError):
        netparity.compare(net(), net(), steps=[7])


def test_array_metrics_definitions():
    ref = np.array([1.0, -2.0, 0.0, 4.0])
    cand = np.array([1.1, -2.0, 0.01, 4.0])
    m = array_metrics(ref, cand, rtol=0.05, atol=0.0)
    rms = math.sqrt((1 + 4 + 0 + 16) / 4)
    assert m["max_abs"] == pytest.approx(0.1)
    assert m["max_rel"] == pytest.approx(0.1 / rms)  # |1.0| < rms: judged on the rms scale
    assert m["min_atol"] == pytest.approx(max(0.1 - 0.05, 0.01))
    assert math.isinf(m["min_rtol"])  # ref 0 vs cand 0.01 at atol 0
    assert m["within"] == 0.5
    assert m["cosine"] == pytest.approx(np.dot(ref, cand) / np.linalg.norm(ref) / np.linalg.norm(cand))


def test_large_tensor_chunked_matches_direct():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(300_000).astype(np.float32)
    b = a + (1e-4 * rng.standard_normal(a.size)).astype(np.float32)
    m = array_metrics(a, b, rtol=1e-5, atol=1e-6)
    d = np.abs(b.astype(np.float64) - a)
    assert m["max_abs"] == pytest.approx(d.max())
    assert m["rmse"] == pytest.approx(np.sqrt(np.mean(d**2)))
    assert m["within"] == pytest.approx(np.mean(d <= 1e-6 + 1e-5 * np.abs(a)))
    assert m["q50"] == pytest.approx(np.median(d), rel=0.45)
    assert m["q99"] == pytest.approx(np.quantile(d, 0.99), rel=0.45)


def test_cross_profile_judges_normwise_sparse_outliers_warn(net):
    # One backward element flipped (a ReLU decision that fell the other way): elementwise it is
    # far off, normwise tiny -> warn, not fail. A systematic 1% forward shift -> fail.
    def flip(m, d, role, a):
        if m == "net.l2" and d == "backward" and role == "output":
            a = a.copy()
            a[7] *= 0.8  # one element off by 20%
        return a

    ref = net(framework="torch", size=3000)
    r = netparity.compare(ref, net(framework="mindspore", size=3000, edit=flip))
    (p,) = [p for p in r.pairs if p.module == "net.l2" and p.direction == "backward"
            and p.role == "output"]
    assert p.status == "warn" and "sparse outliers" in p.reason
    assert r  # warnings do not fail the comparison
    shifted = netparity.compare(ref, net(framework="mindspore", size=3000,
                                         perturb={("net.l1", "forward"): 1e-2}))
    assert not shifted and shifted.first_divergence.module == "net.l1"
    assert shifted.first_divergence.metrics["norm_err"] > 1e-3
