"""Reports are views of a result: terminal, CSV, HTML (escaping, hook, browser rendering)."""

from __future__ import annotations

import csv
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from rich.console import Console

import netparity
from netparity.report.csv_report import write_csv
from netparity.report.html import render_html, svg_line_plot, write_html
from netparity.report.terminal import render_terminal, summary_lines

EVIL = "<script>alert(1)</script>"


def _evil_names(i: int) -> str:
    return EVIL if i == 2 else f"net.l{i}"


@pytest.fixture
def evil_result(net):
    return netparity.compare(
        net(names=_evil_names), net(names=_evil_names, perturb={(EVIL, "forward"): 1e-2})
    )


def test_terminal_culprit_first(evil_result):
    con = Console(record=True, width=120)
    render_terminal(evil_result, top=3, console=con)
    text = con.export_text()
    lines = text.splitlines()
    assert lines[0].startswith("FAIL")
    assert EVIL in lines[1] and "INTRODUCED" in lines[1]
    assert text.index("first divergence (backward)") < text.index("worst 3 pairs")
    assert summary_lines(evil_result)[1] == lines[1]


def test_csv_one_row_per_pair(evil_result, tmp_path):
    p = tmp_path / "r.csv"
    write_csv(evil_result, p)
    rows = list(csv.DictReader(p.open()))
    assert len(rows) == len(evil_result.all_pairs())
    bad = [r for r in rows if r["module"] == EVIL and r["direction"] == "forward"
           and r["role"] == "output"]
    assert bad[0]["status"] == "fail" and float(bad[0]["max_rel"]) > 1e-3


def test_html_escapes_trace_names_and_embeds_sections(evil_result):
    page = render_html(evil_result, extra_sections=[("Loss curve", svg_line_plot(
        {"ref": [3.0, 2.0, 1.0], "cand": [3.0, 2.1, 1.4]}, title="loss", log_y=True))])
    assert EVIL not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count("<script>") == 1  # only our own inline script
    assert "Loss curve" in page and page.count("<svg") >= 3  # loss + forward + backward charts
    assert 'id="culprit"' in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_svg_line_plot_log_drops_nonpositive():
    svg = svg_line_plot({"a": [1.0, 0.0, 10.0, float("nan")]}, log_y=True)
    assert svg.count("<circle") == 2


@pytest.mark.browser
def test_html_renders_in_headless_chromium(evil_result, tmp_path):
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("chromium is not on PATH (apt-get install -y chromium)")
    out = tmp_path / "report.html"
    write_html(evil_result, out)
    profile = tempfile.mkdtemp()
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", "--dump-dom", Path(out).as_uri()]
    try:
        dom = subprocess.run(cmd, capture_output=True, text=True, timeout=90).stdout
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert 'id="culprit"' in dom
    start = dom.index('id="culprit"')
    culprit = dom[start : dom.index("</div></div>", start)]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in culprit and "introduced" in culprit
    assert "<script>alert(1)</script>" not in dom  # never became markup
    assert "np-calls" in dom and "<svg" in dom


def test_a_failing_verdict_without_a_diverging_call_says_what_fails():
    # every call agrees, yet the loss pair fails (a GPT-2-style head computed outside any
    # captured module): the report must name what fails instead of showing no culprit
    from netparity.compare.results import CompareResult, PairResult

    loss = PairResult(key="loss|0", kind="loss", direction="forward", step=0, rank=0,
                      role="output", arg="", module="", op="loss", cand_module="", cand_op="loss",
                      ref_dtype="float32", cand_dtype="float32", ref_shape=[], cand_shape=[],
                      rtol=1e-5, atol=1e-6, tol_source="table", status="fail")
    r = CompareResult(loss=[loss])
    assert r.status == "fail"
    con = Console(record=True, width=120)
    render_terminal(r, console=con)
    assert "no module or op call diverges; what fails: 1 loss" in con.export_text()
