"""recheck and the CLI exit codes."""

from __future__ import annotations

import json

import pytest

import netparity
from netparity.cli import main
from netparity.compare import recheck
from netparity.report.json_report import read_json


def test_recheck_loosened_tolerance_changes_verdict(net, tmp_path, capsys):
    ref, cand = net(), net(noise=1e-4, noise_seed=3)
    out = tmp_path / "r.json"
    assert main(["compare", str(ref), str(cand), "--json", str(out), "--quiet"]) == 1
    saved = json.loads(out.read_text())
    mt = saved["min_tolerance"][0]
    assert main(["recheck", str(out), "--atol", str(mt["min_atol"] * 1.01), "--quiet"]) == 0
    assert "PASS" in capsys.readouterr().out
    assert main(["recheck", str(out), "--rtol", "0", "--atol", "0", "--quiet"]) == 1
    # loosening rtol past the reported minimum is decided exactly
    exact = recheck(read_json(out), rtol=mt["min_rtol"] * 1.01, atol=mt["atol"])
    assert exact.status == "pass" and not exact.notes
    # elsewhere recheck agrees with a fresh comparison, or says it only estimated
    for rt, at in ((1e-3, 1e-4), (1e-4, 1e-3), (3e-5, 3e-5)):
        fresh = netparity.compare(ref, cand, rtol=rt, atol=at)
        again = recheck(read_json(out), rtol=rt, atol=at)
        for p, q in zip(again.all_pairs(), fresh.all_pairs()):
            assert p.key == q.key
            if "re-run compare" not in p.reason:
                assert p.status == q.status, (p.key, p.reason, q.reason)


def test_cli_exit_codes(net, tmp_path, capsys):
    ref = net()
    assert main(["compare", str(ref), str(net()), "--quiet"]) == 0
    bad = net(perturb={("net.l2", "forward"): 1e-2})
    html, csvp = tmp_path / "r.html", tmp_path / "r.csv"
    assert main(["compare", str(ref), str(bad), "--html", str(html), "--csv", str(csvp)]) == 1
    assert "net.l2" in capsys.readouterr().out
    assert html.is_file() and csvp.read_text().count("\n") > 30
    assert main(["compare", str(ref), str(tmp_path / "nope")]) == 2
    assert main(["compare", str(ref), str(bad), "--tol", "nonsense"]) == 2
    assert main(["compare", str(ref), str(bad), "--steps", "9"]) == 2
    (tmp_path / "x.json").write_text("{}")
    assert main(["recheck", str(tmp_path / "x.json"), "--rtol", "1"]) == 2
    with pytest.raises(SystemExit) as e:
        main(["compare", str(ref)])
    assert e.value.code == 2


def test_recheck_keeps_the_cross_profile_normwise_rule(net, tmp_path):
    """Without new tolerances recheck reproduces a cross-profile result (normwise rule, warn for
    outliers under it); global tolerances switch to the elementwise rule, as compare does."""
    ref = net()
    # small noise: under the normwise bound, but elementwise outside the cross float32 tolerance
    cand = net(noise=3e-4, noise_seed=5)
    out = tmp_path / "cross.json"
    assert main(["compare", str(ref), str(cand), "--profile", "cross", "--json", str(out),
                 "--quiet"]) in (0, 1)
    original = read_json(out)
    statuses = [p.status for p in original.all_pairs()]
    assert "warn" in statuses  # the case this test is about: outliers under the normwise bound
    again = recheck(read_json(out))
    assert [p.status for p in again.all_pairs()] == statuses
    assert again.status == original.status
    # global tolerances: elementwise judgement, exactly what a fresh compare gives
    rt, at = 1e-6, 1e-6
    fresh = netparity.compare(ref, cand, rtol=rt, atol=at, profile="cross")
    elementwise = recheck(read_json(out), rtol=rt, atol=at)
    for p, q in zip(elementwise.all_pairs(), fresh.all_pairs()):
        assert p.key == q.key
        if "re-run compare" not in p.reason:
            assert p.status == q.status, (p.key, p.reason, q.reason)
    assert "fail" in [p.status for p in elementwise.all_pairs()]
