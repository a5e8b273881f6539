"""Localisation lives in the analyzers: the engine judges pairs, the facade names culprits."""

from __future__ import annotations

import json

import pytest

import netparity
import netparity.compare as compare_pkg
from netparity.analyzers import ANALYZERS, Analysis, get, localise
from netparity.analyzers import divergence as div
from netparity.analyzers.summary import TraceSummary
from netparity.compare import engine
from netparity.compare.results import CompareResult
from netparity.errors import UsageError


def test_engine_judges_pairs_only_and_the_facade_localises(net):
    ref, cand = net(), net(perturb={("net.l2", "forward"): 1e-2})
    raw = engine.compare(ref, cand)
    assert raw.first_divergence is None and raw.min_tolerance == []
    assert all(c.origin == "" for c in raw.calls)  # nobody classified the calls
    assert raw.status == "fail"  # ...but every pair was judged
    loc = localise(raw)
    assert loc is raw
    d = loc.first_divergence
    assert (d.module, d.direction, d.verdict) == ("net.l2", "forward", "introduced")
    assert loc.min_tolerance and loc.first_backward.verdict == "propagated"


def test_public_compare_names_are_the_localising_facade(net):
    ref, cand = net(), net(perturb={("net.l2", "forward"): 1e-2})
    assert compare_pkg.compare is div.compare and compare_pkg.recheck is div.recheck
    a = netparity.compare(ref, cand)
    b = netparity.compare.compare(ref, cand)
    c = div.compare(ref, cand)
    assert a.to_json() == b.to_json() == c.to_json()
    assert a.first_divergence.module == "net.l2"


def test_recheck_relocalises_and_keeps_measured_tolerances(net, tmp_path):
    r = netparity.compare(net(), net(noise=1e-4, noise_seed=3))
    saved = json.loads(json.dumps(r.to_json()))
    measured = r.min_tolerance
    loose = netparity.compare.recheck(CompareResult.from_json(saved), rtol=1.0, atol=1.0)
    assert loose.status == "pass" and loose.first_divergence is None
    assert loose.min_tolerance == measured
    strict = netparity.compare.recheck(CompareResult.from_json(saved), rtol=0.0, atol=0.0)
    assert strict.first_divergence is not None and strict.first_divergence.status == "fail"


def test_amplification_setting_reaches_localisation(net):
    ref, cand = net(), net(perturb={("net.l2", "forward"): 1e-4, ("net.l3", "forward"): 1e-2})
    default = netparity.compare(ref, cand)
    l3 = next(c for c in default.calls if c.module == "net.l3" and c.direction == "forward")
    assert l3.origin == "introduced"  # 100x more error than its input: flagged
    tolerant = netparity.compare(ref, cand, amplification=1e6)
    l3 = next(c for c in tolerant.calls if c.module == "net.l3" and c.direction == "forward")
    assert l3.origin == "propagated"


def test_registry_and_analysis_facade(net):
    assert {"summary", "divergence", "recheck", "step"} <= set(ANALYZERS)
    for entry in ANALYZERS.values():
        assert callable(entry.load())
    with pytest.raises(UsageError, match="unknown analyzer 'nope'"):
        get("nope")
    a = Analysis(net(), net(perturb={("net.l1", "forward"): 1e-2}), level="module")
    s = a.summary()
    assert isinstance(s, TraceSummary) and s and s.to_json()["healthy"] is True
    r = a.divergence()
    assert not r and r.first_divergence.module == "net.l1"
    assert a.run("divergence").to_json() == r.to_json()
    assert isinstance(a.run("summary"), TraceSummary)
    with pytest.raises(UsageError, match="needs two traces"):
        Analysis(net()).divergence()
    with pytest.raises(UsageError, match="takes a step run"):
        a.run("step")
