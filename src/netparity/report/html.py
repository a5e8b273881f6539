"""One self-contained HTML report (inline CSS, JS and SVG; no network access).

Every string that comes from a trace (module paths, op names, sources, reasons) is escaped.
Other reports embed their own sections with ``extra_sections=[(title, html_fragment)]``; the
fragments are trusted HTML built by netparity code (escape trace names with :func:`esc`), and
:func:`svg_line_plot` draws small inline line charts (e.g. loss curves).

Example:
    >>> from netparity.compare.results import CompareResult
    >>> page = render_html(CompareResult(), extra_sections=[("Loss", svg_line_plot(
    ...     {"ref": [3.0, 2.0, 1.5]}, title="loss"))])
    >>> page.startswith("<!DOCTYPE html>") and "<svg" in page
    True
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from netparity.compare.results import CallResult, CompareResult, Divergence, PairResult
from netparity.errors import UsageError
from netparity.report.terminal import divergence_lines, fmt, summary_lines

COLOURS = {"pass": "#2e7d32", "warn": "#e69500", "fail": "#c62828", "unknown": "#888"}
PALETTE = ("#1565c0", "#c62828", "#2e7d32", "#6a1b9a", "#ef6c00", "#00838f")

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em} h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
.verdict{font-size:1.3em;font-weight:bold;padding:.5em .8em;border-radius:6px;color:#fff}
.v-pass{background:#2e7d32}.v-warn{background:#e69500}.v-fail{background:#c62828}
.culprit{border:3px solid #c62828;background:#fff4f4;padding:.6em 1em;margin:.8em 0;border-radius:6px}
.culprit.warn{border-color:#e69500;background:#fffaf0}
.culprit .name{font-size:1.2em;font-weight:bold;font-family:monospace}
.sub{border:1px solid #ccc;padding:.5em 1em;margin:.5em 0;border-radius:6px}
pre{background:#f6f6f6;padding:.6em;overflow:auto}
table{border-collapse:collapse;font-size:.85em} td,th{border:1px solid #ddd;padding:2px 6px}
th{background:#f0f0f0;cursor:pointer} td.n{text-align:right;font-family:monospace}
tr.s-fail td:first-child{background:#ffcdd2}tr.s-warn td:first-child{background:#ffe9b3}
tr.s-pass td:first-child{background:#d7f0d8} tr.culprit-row{outline:3px solid #c62828}
.mono{font-family:monospace} .muted{color:#777}
"""

JS = """
function npFilter(inp,id){var q=inp.value.toLowerCase();var rows=document.getElementById(id).tBodies[0].rows;
for(var i=0;i<rows.length;i++){rows[i].style.display=rows[i].textContent.toLowerCase().indexOf(q)>=0?'':'none';}}
function npSort(th){var t=th.closest('table'),b=t.tBodies[0],i=th.cellIndex,asc=th.dataset.asc!=='1';
th.dataset.asc=asc?'1':'0';var r=Array.prototype.slice.call(b.rows);
r.sort(function(x,y){var a=x.cells[i].textContent,c=y.cells[i].textContent,fa=parseFloat(a),fc=parseFloat(c);
var k=(!isNaN(fa)&&!isNaN(fc))?fa-fc:a.localeCompare(c);return asc?k:-k;});r.forEach(function(e){b.appendChild(e);});}
"""


def esc(x: Any) -> str:
    """HTML-escape anything (quotes included)."""
    return html.escape(str(x), quote=True)


def svg_line_plot(
    series: Mapping[str, Sequence[float]] | Sequence[tuple[str, Sequence[float], Sequence[float]]],
    *,
    title: str = "",
    log_y: bool = False,
    width: int = 720,
    height: int = 260,
    x_label: str = "",
    y_label: str = "",
    markers: Mapping[str, Sequence[str]] | None = None,
    highlight: tuple[str, int] | None = None,
) -> str:
    """An inline SVG line chart.

    Args:
        series: ``{name: ys}`` (x = 0, 1, ...) or ``[(name, xs, ys), ...]``.
        log_y: logarithmic y axis (non-positive values are dropped).
        markers: per series, a colour per point (e.g. verdict colours).
        highlight: ``(series name, point index)`` drawn as a large ring (the culprit).

    Example:
        >>> svg_line_plot({"loss": [2.0, 1.0]}, title="loss").count("<polyline")
        1
    """
    items: list[tuple[str, list[float], list[float]]]
    if isinstance(series, Mapping):
        items = [(str(k), [float(i) for i in range(len(v))], list(v)) for k, v in series.items()]
    else:
        items = [(str(n), list(xs), list(ys)) for n, xs, ys in series]
    pts_all: list[tuple[float, float]] = []
    clean: list[tuple[str, list[tuple[int, float, float]]]] = []
    for name, xs, ys in items:
        pts = []
        for i, (x, y) in enumerate(zip(xs, ys)):
            y = float(y)
            if not math.isfinite(y) or (log_y and y <= 0):
                continue
            pts.append((i, float(x), math.log10(y) if log_y else y))
        clean.append((name, pts))
        pts_all += [(p[1], p[2]) for p in pts]
    ml, mr, mt, mb = 64, 16, 28, 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">',
           f'<rect width="{width}" height="{height}" fill="#fff"/>']
    if title:
        out.append(f'<text x="{ml}" y="18" font-size="13" font-weight="bold">{esc(title)}</text>')
    if not pts_all:
        out.append(f'<text x="{ml}" y="{height // 2}" fill="#777">no data</text></svg>')
        return "".join(out)
    x0, x1 = min(p[0] for p in pts_all), max(p[0] for p in pts_all)
    y0, y1 = min(p[1] for p in pts_all), max(p[1] for p in pts_all)
    if log_y:
        y0, y1 = math.floor(y0), math.ceil(y1)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y1 = y0 + 1
    pw, ph = width - ml - mr, height - mt - mb

    def sx(x: float) -> float:
        return ml + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return mt + ph - (y - y0) / (y1 - y0) * ph

    out.append(f'<line x1="{ml}" y1="{mt + ph}" x2="{ml + pw}" y2="{mt + ph}" stroke="#444"/>')
    out.append(f'<line x1="{ml}" y1="{mt}" x2="{ml}" y2="{mt + ph}" stroke="#444"/>')
    nt = 5
    for k in range(nt + 1):
        yv = y0 + (y1 - y0) * k / nt
        lab = f"1e{yv:.0f}" if log_y and abs(yv - round(yv)) < 1e-9 else (
            fmt(10**yv) if log_y else fmt(yv))
        out.append(f'<line x1="{ml}" y1="{sy(yv):.1f}" x2="{ml + pw}" y2="{sy(yv):.1f}" '
                   f'stroke="#eee"/><text x="{ml - 4}" y="{sy(yv) + 4:.1f}" font-size="10" '
                   f'text-anchor="end">{esc(lab)}</text>')
    for k in range(nt + 1):
        xv = x0 + (x1 - x0) * k / nt
        out.append(f'<text x="{sx(xv):.1f}" y="{mt + ph + 14}" font-size="10" '
                   f'text-anchor="middle">{esc(fmt(round(xv, 2)))}</text>')
    if x_label:
        out.append(f'<text x="{ml + pw / 2}" y="{height - 6}" font-size="11" '
                   f'text-anchor="middle">{esc(x_label)}</text>')
    if y_label:
        out.append(f'<text x="12" y="{mt + ph / 2}" font-size="11" text-anchor="middle" '
                   f'transform="rotate(-90 12 {mt + ph / 2})">{esc(y_label)}</text>')
    for si, (name, pts) in enumerate(clean):
        col = PALETTE[si % len(PALETTE)]
        if pts:
            poly = " ".join(f"{sx(p[1]):.1f},{sy(p[2]):.1f}" for p in pts)
            out.append(f'<polyline fill="none" stroke="{col}" stroke-width="1.6" points="{poly}"/>')
        cols = (markers or {}).get(name)
        for i, xf, yf in pts:
            x, y = xf, yf
            c = cols[i] if cols and i < len(cols) else col
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{esc(c)}"/>')
            if highlight and highlight[0] == name and highlight[1] == i:
                out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="8" fill="none" '
                           f'stroke="#c62828" stroke-width="2.5"/>')
        out.append(f'<rect x="{ml + pw - 150}" y="{mt + 4 + 14 * si}" width="10" height="10" '
                   f'fill="{col}"/><text x="{ml + pw - 136}" y="{mt + 13 + 14 * si}" '
                   f'font-size="11">{esc(name)}</text>')
    out.append("</svg>")
    return "".join(out)


def _div_html(title: str, d: Divergence | None, main: bool = False) -> str:
    lines = divergence_lines(title, d)
    if d is None:
        return f'<div class="sub"><b>{esc(title)}</b>: none</div>'
    cls = "culprit" + (" warn" if d.status == "warn" else "") if main else "sub"
    name = esc(d.module or "<root>") + (f" <span class='muted'>({esc(d.op)})</span>" if d.op else "")
    body = "<br>".join(esc(x.strip()) for x in lines[1:])
    return (f'<div class="{cls}" id="{"culprit" if main else "np-" + esc(d.direction)}">'
            f'<div>{esc(title)}: <span class="name">{name}</span> &mdash; '
            f'<b>{esc(d.verdict)}</b> ({esc(d.status)})</div><div class="mono">{body}</div></div>')


def _depth_chart(result: CompareResult, direction: str) -> str:
    calls = sorted((c for c in result.calls if c.direction == direction),
                   key=lambda c: (c.step, c.order))
    if not calls:
        return ""
    levels = sorted({c.level for c in calls})
    series, markers = [], {}
    hl = None
    key = result.first_divergence.key if direction == "forward" and result.first_divergence else (
        result.first_backward.key if direction == "backward" and result.first_backward else None)
    for lv in levels:
        cs = [c for c in calls if c.level == lv]
        name = f"{lv} output rel err"
        series.append((name, list(range(len(cs))), [max(c.out_error, 1e-17) for c in cs]))
        markers[name] = [COLOURS.get(c.status, "#888") for c in cs]
        for i, c in enumerate(cs):
            if c.key == key:
                hl = (name, i)
    return svg_line_plot(series, title=f"{direction}: normwise relative error per matched call "
                         "(execution order)", log_y=True, markers=markers, highlight=hl,
                         x_label="call index in execution order", y_label="rmse / rms(ref)")


def _calls_table(calls: list[CallResult], culprit: str | None) -> str:
    rows = []
    for c in sorted(calls, key=lambda c: (c.direction != "forward", c.step, c.order)):
        cls = f"s-{c.status}" + (" culprit-row" if c.key == culprit else "")
        rows.append(
            f'<tr class="{cls}"><td>{esc(c.status)}</td><td>{esc(c.origin)}</td>'
            f'<td>{esc(c.direction)}</td><td class="n">{c.step}</td><td>{esc(c.level)}</td>'
            f'<td class="mono">{esc(c.name)}</td><td class="mono">{esc(c.cand_module)}'
            f'{("/" + esc(c.cand_op)) if c.level == "op" else ""}</td>'
            f'<td>{esc(c.method)}</td><td class="n">{fmt(c.in_error)}</td>'
            f'<td class="n">{fmt(c.out_error)}</td><td class="mono">{esc(c.source)}</td>'
            f'<td>{esc(c.note)}</td></tr>')
    head = "".join(f'<th onclick="npSort(this)">{h}</th>' for h in (
        "status", "origin", "dir", "step", "level", "reference", "candidate", "match",
        "input err", "output err", "source", "note"))
    return (f'<input placeholder="filter" oninput="npFilter(this,\'np-calls\')">'
            f'<table id="np-calls"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'
            f'</tbody></table>')


def _pairs_table(pairs: list[PairResult]) -> str:
    rows = []
    for p in pairs:
        m = p.metrics
        rows.append(
            f'<tr class="s-{esc(p.status)}"><td>{esc(p.status)}</td><td>{esc(p.kind)}</td>'
            f'<td>{esc(p.direction)}</td><td class="n">{p.step}</td>'
            f'<td class="mono">{esc(p.name)}</td><td>{esc(m.get("basis", ""))}</td>'
            + "".join(f'<td class="n">{esc(fmt(m.get(k, m.get(k + "_lb"))))}</td>' for k in (
                "max_abs", "max_rel", "mean_rel", "cosine", "q99", "within"))
            + f'<td class="n">{fmt(p.rtol)}/{fmt(p.atol)}</td><td>{esc(p.reason)}</td></tr>')
    head = "".join(f'<th onclick="npSort(this)">{h}</th>' for h in (
        "status", "kind", "dir", "step", "tensor", "basis", "max abs", "max rel", "mean rel",
        "cosine", "p99 abs", "within", "rtol/atol", "reason"))
    return (f'<input placeholder="filter" oninput="npFilter(this,\'np-pairs\')">'
            f'<table id="np-pairs"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'
            f'</tbody></table>')


def _unmatched(result: CompareResult) -> str:
    parts = []
    for k, items in result.unmatched.items():
        if not items:
            continue
        lis = "".join(
            f"<li class='mono'>{esc(i.get('name', i.get('call', '')))} "
            f"<span class='muted'>{esc({x: y for x, y in i.items() if x != 'name'})}</span></li>"
            for i in items[:500])
        more = f"<li>... {len(items) - 500} more</li>" if len(items) > 500 else ""
        parts.append(f"<h3>{esc(k.replace('_', ' '))} ({len(items)})</h3><ul>{lis}{more}</ul>")
    return "".join(parts) or "<p>nothing unmatched</p>"


def render_html(
    result: CompareResult,
    *,
    title: str = "netparity comparison",
    extra_sections: Sequence[tuple[str, str]] = (),
    lead_sections: Sequence[tuple[str, str]] = (),
) -> str:
    """The report as one HTML string (see the module docstring)."""
    status = result.status
    head = esc(summary_lines(result)[0])
    body = [f"<h1>{esc(title)}</h1>"]
    for t, frag in lead_sections:  # e.g. the one-step workflow's phase table, before the rest
        body.append(f"<h2>{esc(t)}</h2>{frag}")
    body.append(f'<div class="verdict v-{esc(status)}" id="verdict">{head}</div>')
    runs = result.runs
    if runs:
        body.append("<p class='muted mono'>ref: " + esc(runs.get("ref", {})) + "<br>cand: "
                    + esc(runs.get("cand", {})) + "</p>")
    body.append(_div_html("First divergence (forward)", result.first_divergence, main=True))
    body.append(_div_html("First divergence (backward)", result.first_backward))
    if result.first_update is not None:
        body.append(_div_html("First divergence (optimizer)", result.first_update))
    rest = [x for x in summary_lines(result)[1:] if not x.startswith(("first divergence", "    "))]
    body.append("<pre>" + esc("\n".join(rest)) + "</pre>")
    for t, frag in extra_sections:
        body.append(f"<h2>{esc(t)}</h2>{frag}")
    charts = [_depth_chart(result, d) for d in ("forward", "backward")]
    if any(charts):
        body.append("<h2>Error along network depth</h2>" + "".join(c for c in charts if c))
    params = [p for p in result.params if p.status != "pass"]
    if result.params:
        body.append(f"<h2>Parameters ({len(params)} of {len(result.params)} diverge)</h2>"
                    + _pairs_table(params or result.params[:0]).replace("np-pairs", "np-params"))
    if result.loss or result.data:
        body.append("<h2>Loss and data</h2>" + _pairs_table(result.loss + result.data)
                    .replace("np-pairs", "np-loss"))
    culprit = result.first_divergence.key if result.first_divergence else None
    body.append("<h2>Aligned structure (reference &harr; candidate)</h2>"
                + _calls_table(result.calls, culprit))
    body.append("<h2>Unmatched</h2>" + _unmatched(result))
    body.append("<h2>All tensor pairs</h2>" + _pairs_table(result.pairs))
    if result.min_tolerance:
        body.append("<h2>Settings</h2><pre>" + esc(result.settings) + "</pre>")
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width'><title>{esc(title)}</title>"
            f"<style>{CSS}</style><script>{JS}</script></head><body>"
            + "\n".join(body) + "</body></html>")


def write_html(result: CompareResult, path: str | os.PathLike[str], **kwargs: Any) -> None:
    """Write :func:`render_html` to ``path``."""
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(render_html(result, **kwargs))
    except OSError as e:
        raise UsageError(f"{path}: cannot write HTML report ({e.strerror})") from None
