"""Noise-run mode: every pair judged against the same tensor's error in a noise run of the
reference, instead of one tolerance table; and a comparison of nothing is an error."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

import netparity
from netparity.compare.noise import perturb_last_bit
from netparity.errors import UsageError


def test_faithful_candidate_passes_without_warnings_and_a_small_change_fails_at_its_layer(net):
    ref = net("ref", framework="torch")
    noise = net("noise", framework="torch", noise=1e-6, noise_seed=2)
    faithful = net("faithful", framework="mindspore", noise=1e-6, noise_seed=3)
    # a change well under the cross-framework table's normwise bound (1e-3) in one layer
    changed = net("changed", framework="mindspore", noise=1e-6, noise_seed=3,
                  perturb={("net.l2", "forward"): 3e-4})
    table = netparity.compare(ref, changed)
    assert table, "the table passes this change: the reason for the noise mode"
    r = netparity.compare(ref, faithful, noise_run=noise)
    assert r and r.counts()["warn"] == 0 and r.counts()["fail"] == 0
    assert r.settings["noise"]["pairs"] == len(r.all_pairs())
    r = netparity.compare(ref, changed, noise_run=noise)
    assert not r
    d = r.first_divergence
    assert (d.module, d.verdict, d.status) == ("net.l2", "introduced", "fail")


def test_noise_run_of_another_framework_is_refused(net):
    ref, cand = net("ref", framework="torch"), net("cand", framework="mindspore")
    with pytest.raises(UsageError, match="noise run"):
        netparity.compare(ref, cand, noise_run=cand)


def test_perturb_last_bit_moves_every_float_by_one_ulp_and_leaves_integers():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(1000).astype(np.float32)
    b = perturb_last_bit(a, rng)
    steps = np.abs(b.view(np.int32).astype(np.int64) - a.view(np.int32).astype(np.int64))
    assert np.all(steps == 1) and b.dtype == np.float32
    ints = np.arange(5)
    assert perturb_last_bit(ints, rng) is ints


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_perturb_last_bit_keeps_the_extreme_finite_values_finite(dtype):
    # an attention mask filled with finfo.min (GPT-2's causal mask): one ulp outwards would be
    # -inf, which the run never computed (and NumPy warns about the overflow)
    big = np.finfo(dtype).max
    a = np.array([big, -big] * 50, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = perturb_last_bit(a, np.random.default_rng(1))
    assert np.all(np.isfinite(b)) and np.all(b != a) and np.all(np.abs(b) < big)


def test_comparing_nothing_is_an_error_not_a_pass(net, tmp_path):
    empty_ref, empty_cand = net("eref", steps=0), net("ecand", steps=0)  # zero-step traces
    with pytest.raises(UsageError, match="nothing to compare"):
        netparity.compare(empty_ref, empty_cand)
    ref, cand = net("ref"), net("cand")
    p = subprocess.run([sys.executable, "-m", "netparity", "compare", str(ref), str(cand),
                        "--steps", "3-1"], capture_output=True, text=True)
    assert p.returncode == 2 and "empty range" in p.stderr and "Traceback" not in p.stderr
    p = subprocess.run([sys.executable, "-m", "netparity", "compare", str(ref), str(cand),
                        "--steps", "7"], capture_output=True, text=True)
    assert p.returncode == 2 and "not in both traces" in p.stderr


def test_a_passing_comparison_prints_no_line_that_says_diverge(net, tmp_path):
    from rich.console import Console

    from netparity.report.html import render_html
    from netparity.report.terminal import render_terminal

    ref = net("ref", framework="torch")
    r = netparity.compare(ref, net("same", framework="mindspore", noise=1e-6, noise_seed=3),
                          noise_run=net("noise", framework="torch", noise=1e-6, noise_seed=2))
    assert r
    con = Console(record=True, width=120)
    render_terminal(r, console=con)
    text = con.export_text()
    assert text.startswith("PASS") and "diverg" not in text.lower()
    assert "every pair agrees" in text
    import re

    body = re.sub(r"<style.*?</style>|<script.*?</script>", "", render_html(r), flags=re.S)
    assert "diverg" not in body.lower() and "every pair agrees" in body
