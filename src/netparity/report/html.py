"""The HTML output: one self-contained page (inline CSS, JS and SVG; no network access).

:func:`render_page` renders report sections (:mod:`netparity.report.sections`) of any analyzer
result; :func:`render_html` is the page of one result. Every string that comes from a trace
(module paths, op names, sources, reasons) is escaped. Callers may add their own fragments with
``extra_sections=[(title, html_fragment)]``: trusted HTML built by netparity code (escape trace
names with :func:`esc`); :func:`svg_line_plot` draws small inline line charts.

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

from netparity.outputs import write_text_atomic
from netparity.report.format import fmt
from netparity.report.sections import (
    Block,
    Callout,
    Plot,
    Section,
    Table,
    Text,
    TreeView,
    for_output,
    sections_for,
)
from netparity.report.view import VIEW_CSS, VIEW_JS, view_fragment

PALETTE = ("#1565c0", "#c62828", "#2e7d32", "#6a1b9a", "#ef6c00", "#00838f", "#9e9e9e", "#f9a825",
           "#6d4c41", "#ad1457")  # distinct for the step breakdown's 7 phases and more

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em} h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
.verdict{font-size:1.3em;font-weight:bold;padding:.5em .8em;border-radius:6px;color:#fff}
.v-pass{background:#2e7d32}.v-warn{background:#e69500}.v-fail{background:#c62828}
.v-incomplete{background:#e69500}
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
tr.s-skipped td:first-child{background:#eee} .v-skipped{background:#888}
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


def _svg_open(width: int, height: int, title: str, ml: int) -> list[str]:
    """An SVG's opening tag, white background and title (left-aligned at ``ml``)."""
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">',
           f'<rect width="{width}" height="{height}" fill="#fff"/>']
    if title:
        out.append(f'<text x="{ml}" y="18" font-size="13" font-weight="bold">{esc(title)}</text>')
    return out


def _axis_labels(x_label: str, y_label: str, x_mid: float, x_y: float, y_mid: float
                 ) -> list[str]:
    """The x axis label centred at ``(x_mid, x_y)``, the y label rotated at ``(12, y_mid)``."""
    out = []
    if x_label:
        out.append(f'<text x="{x_mid}" y="{x_y}" font-size="11" '
                   f'text-anchor="middle">{esc(x_label)}</text>')
    if y_label:
        out.append(f'<text x="12" y="{y_mid}" font-size="11" text-anchor="middle" '
                   f'transform="rotate(-90 12 {y_mid})">{esc(y_label)}</text>')
    return out


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
    out = _svg_open(width, height, title, ml)
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
    out += _axis_labels(x_label, y_label, ml + pw / 2, height - 6, mt + ph / 2)
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


def svg_stacked_bars(series: Sequence[tuple[str, Sequence[float], Sequence[float]]], *,
                     title: str = "", labels: Sequence[str] = (), width: int = 720,
                     height: int = 260, x_label: str = "", y_label: str = "") -> str:
    """An inline SVG stacked bar chart: one bar per x (the first series' xs, or ``labels``),
    each series a segment; non-finite or negative values count as 0.

    Example:
        >>> svg_stacked_bars([("a", [0, 1], [1.0, 2.0]), ("b", [0, 1], [0.5, 0.5])]).count(
        ...     "<rect x=")
        6
    """
    items = [(str(n), list(xs), [max(float(y), 0.0) if math.isfinite(float(y)) else 0.0
                                 for y in ys]) for n, xs, ys in series]
    n = max((len(ys) for _, _, ys in items), default=0)
    names = list(labels) or [fmt(x) for x in (items[0][1] if items else [])]
    tops = [sum(ys[i] for _, _, ys in items if i < len(ys)) for i in range(n)]
    ml, mr, mt, mb = 64, 160, 28, 40
    out = _svg_open(width, height, title, ml)
    ymax = max(tops, default=0.0)
    if n == 0 or ymax <= 0:
        out.append(f'<text x="{ml}" y="{height // 2}" fill="#777">no data</text></svg>')
        return "".join(out)
    pw, ph = width - ml - mr, height - mt - mb
    out.append(f'<line x1="{ml}" y1="{mt + ph}" x2="{ml + pw}" y2="{mt + ph}" stroke="#444"/>')
    for k in range(6):
        yv = ymax * k / 5
        y = mt + ph - ph * k / 5
        out.append(f'<line x1="{ml}" y1="{y:.1f}" x2="{ml + pw}" y2="{y:.1f}" stroke="#eee"/>'
                   f'<text x="{ml - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">'
                   f'{esc(fmt(yv))}</text>')
    slot = pw / n
    bw = max(min(slot * 0.7, 60.0), 1.0)
    for i in range(n):
        x = ml + slot * i + (slot - bw) / 2
        base = 0.0
        for si, (name, _, ys) in enumerate(items):
            v = ys[i] if i < len(ys) else 0.0
            if v <= 0:
                continue
            y_top = mt + ph - (base + v) / ymax * ph
            out.append(f'<rect x="{x:.1f}" y="{y_top:.1f}" width="{bw:.1f}" '
                       f'height="{v / ymax * ph:.1f}" fill="{PALETTE[si % len(PALETTE)]}">'
                       f'<title>{esc(names[i] if i < len(names) else i)} {esc(name)}: '
                       f'{esc(fmt(v))}</title></rect>')
            base += v
        if n <= 40 and i < len(names):
            out.append(f'<text x="{x + bw / 2:.1f}" y="{mt + ph + 14}" font-size="10" '
                       f'text-anchor="middle">{esc(names[i])}</text>')
    for si, (name, _, _) in enumerate(items):
        out.append(f'<rect x="{ml + pw + 12}" y="{mt + 4 + 14 * si}" width="10" height="10" '
                   f'fill="{PALETTE[si % len(PALETTE)]}"/><text x="{ml + pw + 26}" '
                   f'y="{mt + 13 + 14 * si}" font-size="11">{esc(name)}</text>')
    out += _axis_labels(x_label, y_label, ml + pw / 2, height - 6, mt + ph / 2)
    out.append("</svg>")
    return "".join(out)


def _callout(c: Callout) -> str:
    if not c.found:  # no line that says "divergence" under a pass
        what = c.title.replace("First divergence", "").strip(" ()") or c.title
        return f'<div class="sub"><b>{esc(what[:1].upper() + what[1:])}</b>: every pair agrees</div>'
    cls = ("culprit" + (" warn" if c.status == "warn" else "")) if c.main else "sub"
    name = esc(c.name) + (f" <span class='muted'>({esc(c.detail)})</span>" if c.detail else "")
    body = "<br>".join(esc(x.strip()) for x in c.lines[1:])
    anchor = f' id="{esc(c.anchor)}"' if c.anchor else ""
    return (f'<div class="{cls}"{anchor}>'
            f'<div>{esc(c.title)}: <span class="name">{name}</span> &mdash; '
            f'<b>{esc(c.verdict)}</b> ({esc(c.status)})</div><div class="mono">{body}</div></div>')


def _cell(t: Table, col: str, v: Any) -> str:
    if col in t.numeric:
        return f'<td class="n">{esc(fmt(v))}</td>'
    text = esc(fmt(v))
    return f'<td class="mono">{text}</td>' if col in t.mono else f"<td>{text}</td>"


def _table(t: Table) -> str:
    rows = []
    for i, row in enumerate(t.rows):
        cls = f"s-{t.status[i]}" if i < len(t.status) else ""
        if t.highlight == i:
            cls += " culprit-row"
        rows.append(f'<tr class="{esc(cls.strip())}">'
                    + "".join(_cell(t, c, v) for c, v in zip(t.columns, row)) + "</tr>")
    head = "".join(f'<th onclick="npSort(this)">{esc(c)}</th>' for c in t.columns)
    tid = f' id="{esc(t.id)}"' if t.id else ""
    box = (f'<input placeholder="filter" oninput="npFilter(this,\'{esc(t.id)}\')">'
           if t.filter and t.id else "")
    title = f"<h3>{esc(t.title)}</h3>" if t.title else ""
    return (f"{title}{box}<table{tid}><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}"
            "</tbody></table>")


def _text(x: Text) -> str:
    if x.pre:
        return "<pre>" + esc("\n".join(x.lines)) + "</pre>"
    cls = f" class='{esc(x.style)}'" if x.style else ""
    return f"<p{cls}>" + "<br>".join(esc(line) for line in x.lines) + "</p>"


def _plot(p: Plot) -> str:
    if p.stacked:
        return svg_stacked_bars(p.series, title=p.title, labels=p.labels, x_label=p.x_label,
                                y_label=p.y_label, height=p.height)
    return svg_line_plot(p.series, title=p.title, log_y=p.log_y, x_label=p.x_label,
                         y_label=p.y_label, markers=p.markers, highlight=p.highlight,
                         height=p.height)


def _block(b: Block) -> str:
    if isinstance(b, Callout):
        return _callout(b)
    if isinstance(b, Table):
        return _table(b)
    if isinstance(b, Plot):
        return _plot(b)
    if isinstance(b, TreeView):
        return view_fragment(b.get(), include_assets=False)
    return _text(b)


def _section(s: Section) -> str:
    out = [f"<h2>{esc(s.title)}</h2>"] if s.title else []
    if s.headline:
        anchor = f" id='{esc(s.anchor)}'" if s.anchor else ""
        out.append(f"<div class='verdict v-{esc(s.status or 'pass')}'{anchor}>"
                   f"{esc(s.headline)}</div>")
    if s.rows:
        out.append("<p class='muted'>" + "<br>".join(f"{esc(k)}: {esc(fmt(v))}" for k, v in s.rows)
                   + "</p>")
    out += [_block(b) for b in s.for_output("html")]
    return "".join(out)


def render_page(sections: Sequence[Section], *, title: str = "netparity report",
                extra_sections: Sequence[tuple[str, str]] = (),
                lead_sections: Sequence[tuple[str, str]] = ()) -> str:
    """One self-contained page of ``sections`` (those meant for HTML).

    ``lead_sections`` come first; ``extra_sections`` follow the first section (the verdict).
    """
    body = [f"<h1>{esc(title)}</h1>"]
    body += [f"<h2>{esc(t)}</h2>{frag}" for t, frag in lead_sections]
    for i, s in enumerate(for_output(sections, "html")):
        body.append(_section(s))
        if i == 0:
            body += [f"<h2>{esc(t)}</h2>{frag}" for t, frag in extra_sections]
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width'><title>{esc(title)}</title>"
            f"<style>{CSS}{VIEW_CSS}</style><script>{JS}{VIEW_JS}</script></head><body>"
            + "\n".join(body) + "</body></html>")


def render_html(result: Any, *, title: str = "netparity comparison",
                extra_sections: Sequence[tuple[str, str]] = (),
                lead_sections: Sequence[tuple[str, str]] = ()) -> str:
    """The HTML page of one analyzer result (a comparison, a step diagnosis, ...)."""
    return render_page(sections_for(result), title=title, extra_sections=extra_sections,
                       lead_sections=lead_sections)


def write_html(result: Any, path: str | os.PathLike[str], **kwargs: Any) -> None:
    """Write :func:`render_html` to ``path`` (atomically)."""
    write_text_atomic(path, render_html(result, **kwargs), what="HTML report")
