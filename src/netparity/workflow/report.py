"""Views of a :class:`~netparity.workflow.step.StepResult`: terminal summary, JSON and HTML.

The HTML report is the comparison report of step 0 (every module pair, error along depth,
aligned structures) with the phase table and the loss curves put on top.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from netparity.workflow.step import StepResult

_MARK = {"pass": "ok", "fail": "DIVERGES", "warn": "warn", "skipped": "-"}
_COLOUR = {"pass": "green", "fail": "bold red", "warn": "yellow", "skipped": "dim"}


def headline(r: StepResult) -> str:
    f = r.first
    if f is None:
        warns = [p.name for p in r.phases if p.status == "warn"]
        return (f"PASS: one training step and {max(len(r.losses.get('ref', [])) - 1, 0)} more "
                "agree" + (f" (warning: {', '.join(warns)})" if warns else " in every phase"))
    where = f" at {f.where}" if f.where else ""
    step = f" (step {f.step})" if f.step is not None else ""
    return f"FAIL: first divergence in the {f.name.upper()} phase{where}{step}"


def render_terminal(r: StepResult, console: Any = None) -> None:
    """Print the phase table, the culprit and the loss curves."""
    from rich.table import Table

    from netparity.cli._common import console as make_console

    con = console or make_console()
    con.print(f"[bold]reference[/]  {r.ref.get('description') or r.ref.get('spec')}")
    con.print(f"[bold]candidate[/]  {r.cand.get('description') or r.cand.get('spec')}")
    t = Table(show_edge=False, pad_edge=False)
    for c in ("phase", "verdict", "where", "what netparity found"):
        t.add_column(c, no_wrap=c != "what netparity found")
    for p in r.phases:
        t.add_row(p.name, f"[{_COLOUR[p.status]}]{_MARK[p.status]}[/]", p.where or "",
                  p.summary)
    con.print(t)
    f = r.first
    colour = "green" if f is None else "bold red"
    con.print(f"[{colour}]{headline(r)}[/]")
    if f is not None:
        ev = f.evidence
        m = ev.get("metrics") or {}
        if m:
            keys = [k for k in ("max_abs", "max_rel", "rmse", "cosine", "frac_within", "basis")
                    if k in m]
            con.print("  evidence: " + ", ".join(f"{k}={_num(m[k])}" for k in keys))
        if ev.get("source"):
            con.print(f"  source: {ev['source']}")
        if ev.get("update_ratio"):
            u = ev["update_ratio"]
            con.print(f"  update ratio cand/ref: median {_num(u['median_ratio'])} over "
                      f"{u['params']} parameters (uniform: {u['uniform']})")
    lr, lc = r.losses.get("ref", []), r.losses.get("cand", [])
    if lr:
        con.print("loss  ref: " + "  ".join(f"{x:.6g}" for x in lr))
        con.print("     cand: " + "  ".join(f"{x:.6g}" for x in lc)
                  + "   (each step from the reference's state)")
        for key, label in (("cand_free", "cand, free"), ("ref_noise", "ref, noise")):
            if r.losses.get(key):
                con.print(f"{label:>10}: " + "  ".join(f"{x:.6g}" for x in r.losses[key]))
    con.print(f"traces and reports in {r.out_dir}  ({r.seconds:.1f} s)")


def _num(v: Any) -> str:
    from netparity.cli._common import fmt_num

    return fmt_num(v)


def render_html(r: StepResult, *, title: str = "netparity one-step parity") -> str:
    """One self-contained HTML page: phases, culprit, loss curves, then the step-0 comparison."""
    from netparity.compare.results import CompareResult
    from netparity.report.html import esc, svg_line_plot
    from netparity.report.html import render_html as render_compare

    rows = []
    for p in r.phases:
        rows.append(f"<tr class='ph-{esc(p.status)}'><td>{esc(p.name)}</td>"
                    f"<td class='st-{esc(p.status)}'>{esc(_MARK[p.status])}</td>"
                    f"<td class='mono'>{esc(p.where)}</td><td>{esc(p.summary)}</td></tr>")
    phases = ("<table class='phases' id='phases'><thead><tr><th>phase</th><th>verdict</th>"
              "<th>where</th><th>what netparity found</th></tr></thead><tbody>"
              + "".join(rows) + "</tbody></table>"
              "<style>.phases td,.phases th{padding:3px 8px;border-bottom:1px solid #ddd;"
              "text-align:left}.st-fail{color:#b00;font-weight:bold}.st-pass{color:#070}"
              ".st-skipped{color:#999}.ph-fail{background:#fee}</style>")
    st = "pass" if r.first is None else "fail"
    head = (f"<div id='step-verdict' class='verdict v-{st}'>{esc(headline(r))}</div>")
    sides = (f"<p class='muted'>reference: {esc(r.ref.get('description') or r.ref.get('spec'))}"
             f"<br>candidate: {esc(r.cand.get('description') or r.cand.get('spec'))}</p>")
    curves = ""
    if r.losses.get("ref"):
        series = {"reference": r.losses["ref"],
                  "candidate (each step from the reference's state)": r.losses["cand"]}
        if r.losses.get("cand_free"):
            series["candidate, free-running"] = r.losses["cand_free"]
        if r.losses.get("ref_noise"):
            series["reference, last-bit noise run"] = r.losses["ref_noise"]
        curves = svg_line_plot(series, title="loss per step", x_label="step", y_label="loss")
    lr = ""
    lr_ref, lr_cand = r.lr.get("ref"), r.lr.get("cand")
    if lr_ref and lr_cand:
        lr = svg_line_plot({"reference": lr_ref, "candidate": lr_cand},
                           title="learning rate per step", x_label="step", height=200)
    lead = [("One-step parity", head + sides + phases), ("Loss curves", curves + lr),
            ("Step 0 in detail", "")]
    cmp_result = r.compare_step0 if r.compare_step0 is not None else CompareResult()
    return render_compare(cmp_result, title=title, lead_sections=lead)


def write_reports(r: StepResult, out_dir: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """Write ``step.json`` and ``report.html`` (and the step-0 comparison JSON); returns paths."""
    from netparity.cli._common import write_json

    out = Path(out_dir or r.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": str(out / "step.json"), "html": str(out / "report.html")}
    write_json(r.to_json(), paths["json"])
    if r.compare_step0 is not None:
        paths["compare_json"] = str(out / "compare-step0.json")
        write_json(r.compare_step0.to_json(histograms=False), paths["compare_json"])
    tmp = out / ".report.html.tmp"
    tmp.write_text(render_html(r), encoding="utf-8")
    os.replace(tmp, paths["html"])
    return paths
