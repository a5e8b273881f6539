"""Render a :class:`~netparity.scan.analyze.ScanResult`: terminal (rich), JSON and HTML.

Files are written atomically (a temporary file in the same directory, then ``os.replace``) so a
reader never sees half a report. The HTML page is self-contained (inline CSS, no scripts) and
every name, path and note in it is escaped.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from netparity.outputs import check_output, write_text_atomic
from netparity.scan.analyze import Finding, ScanResult

_ORDER = {"missing": 0, "trap": 1, "unlisted": 2, "mapped": 3}
_STYLE = {"missing": "bold red", "trap": "yellow", "unlisted": "magenta", "mapped": "green"}


def summary_line(result: ScanResult) -> str:
    """One line: files, uses, distinct APIs and the count per status."""
    s = result.summary()
    line = (f"{s['files']} file(s), {s['uses']} PyTorch API uses ({s['apis']} distinct): "
            f"{s['missing']} missing, {s['trap']} traps, {s['mapped']} mapped"
            + (f", {s['unlisted']} not in the table" if s["unlisted"] else "")
            + (f", {s['graph_mode_differs']} differ in Graph mode" if s["graph_mode_differs"]
               else "")
            + f"; {s['blocking']} block the port"
            + f" -- {s['mindspore_check']}")
    if result.runtime is not None:
        line += (f"; runtime: {s['runtime_ops']} aten ops, {s['runtime_missing']} missing, "
                 f"{s['runtime_unlisted']} not in the table")
    return line


def _sorted(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (_ORDER.get(f.status, 9), f.file, f.line, f.name))


def _where(f: Finding) -> str:
    return f"{f.file}:{f.line}" + (" (inferred)" if f.confidence != "resolved" else "")


def _runtime_table(result: ScanResult, console: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    if result.runtime is None:
        return
    t = Table(title=f"Executed aten ops ({result.runtime_note})")
    for col in ("aten op", "records", "status", "MindSpore primitive"):
        t.add_column(col, overflow="fold")
    for op in sorted(result.runtime, key=lambda o: (_ORDER.get(o.status, 9), o.name)):
        t.add_row(op.name, str(op.count),
                  Text(op.status, style=_STYLE.get(op.status, "")), op.target)
    console.print(t)


def _short(text: str, n: int = 160) -> str:
    return text if len(text) <= n else text[:n - 3] + "..."


def rollup(findings: Iterable[Finding]) -> list[dict[str, Any]]:
    """One row per (API, verdict, counterpart): count, blocking, first locations, what to do
    (the distinct advice, most frequent first)."""
    groups: dict[tuple[str, str, str], list[Finding]] = {}
    for f in _sorted(findings):
        groups.setdefault((f.name, f.status, f.target), []).append(f)
    rows: list[dict[str, Any]] = []
    for (name, status, target), fs in groups.items():
        advice: dict[str, int] = {}
        for f in fs:
            key = " | ".join(f.traps) if f.traps else f.note
            advice[key] = advice.get(key, 0) + 1
        rows.append({"name": name, "status": status, "target": target, "count": len(fs),
                     "blocking": any(f.blocking for f in fs),
                     "where": [f"{Path(f.file).name}:{f.line}" for f in fs[:3]],
                     "advice": sorted(advice, key=lambda k: -advice[k])})
    rows.sort(key=lambda r: (not r["blocking"], _ORDER.get(r["status"], 9), -r["count"],
                             r["name"]))
    return rows


def print_terminal(result: ScanResult, console: Any, verbose: bool = False,
                   detail: bool = False) -> None:
    """Summary line, then one row per API (default) or per line of code (``detail``)."""

    console.print(summary_line(result))
    if detail:
        _print_detail(result, console, verbose)
        _runtime_table(result, console)
        return
    _print_rollup(rollup(result.findings), console, verbose)
    _runtime_table(result, console)


#: rows of the default roll-up besides the blocking ones (the whole table: --detail / --json)
ROLLUP_ROWS = 30


def _print_rollup(rows: list[dict[str, Any]], console: Any, verbose: bool) -> None:
    """One screen: the blocking APIs, then the other non-mapped APIs by uses (one line each),
    a count of those left out, and the mapped APIs on one line."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    rest = sorted((r for r in rows if r["status"] != "mapped" and not r["blocking"]),
                  key=lambda r: (-r["count"], _ORDER.get(r["status"], 9), r["name"]))
    shown = [r for r in rows if r["blocking"]] + rest[:ROLLUP_ROWS]
    if shown:
        t = Table(title="Per API, blocking first then by uses (--detail: every line)",
                  box=box.SIMPLE_HEAD, pad_edge=False)
        # fixed widths that fill the console: every row stays one line (rich would drop a
        # flexible column rather than cut a long cell), "what to do" takes the most
        rem = max(40, int(getattr(console, "width", 80) or 80) - 12 - 5 - 8 - 2)
        widths = {"PyTorch API": rem * 25 // 100, "uses": 5, "verdict": 8,
                  "MindSpore": rem * 20 // 100, "first line": rem * 17 // 100,
                  "what to do": rem - rem * 62 // 100}
        for col, width in widths.items():
            t.add_column(col, no_wrap=not verbose, overflow="fold" if verbose else "ellipsis",
                         width=None if verbose else width)
        for r in shown:
            verdict = "BLOCKS" if r["blocking"] else r["status"]
            style = "bold red" if r["blocking"] else _STYLE.get(r["status"], "")
            todo = _short(r["advice"][0]) if r["advice"] and r["advice"][0] else ""
            if len(r["advice"]) > 1:
                todo = f"(+{len(r['advice']) - 1} forms) " + todo
            where = r["where"][0]
            t.add_row(r["name"], str(r["count"]),
                      Text(verdict, style=style), r["target"],
                      where, todo if not verbose else " || ".join(r["advice"]))
        console.print(t)
    left = rest[ROLLUP_ROWS:]
    if left:
        console.print(f"{len(left)} more APIs ({sum(r['count'] for r in left)} uses) not shown: "
                      f"--detail for every line, --json for all")
    mapped = [r for r in rows if r["status"] == "mapped"]
    if mapped:
        names = ", ".join(f"{r['name'].removeprefix('torch.')} ({r['count']})"
                          for r in sorted(mapped, key=lambda r: -r["count"]))
        console.print(Text(f"Mapped as is ({len(mapped)} APIs): ", style=_STYLE["mapped"])
                      + Text(names), no_wrap=not verbose, overflow="ellipsis")


def _print_detail(result: ScanResult, console: Any, verbose: bool) -> None:
    """Every line: missing, traps, not-in-table and (grouped by API) mapped."""
    from rich.table import Table

    for status, title in (("missing", "Missing in MindSpore"), ("trap", "Traps (numbers change)"),
                          ("unlisted", "Not in the table (check by hand)")):
        rows = [f for f in _sorted(result.findings) if f.status == status]
        if not rows:
            continue
        t = Table(title=title, title_style=_STYLE[status], show_lines=status == "trap")
        for col in ("where", "PyTorch API", "MindSpore", "what to do"):
            t.add_column(col, overflow="fold")
        for f in rows:
            # traps: only what to set (the general notes are in --verbose, JSON and HTML)
            note = f.note if verbose or not f.traps else " | ".join(f.traps)
            t.add_row(_where(f), f.name, f.target, ("BLOCKS: " if f.blocking else "") + note)
        console.print(t)
    mapped = [f for f in _sorted(result.findings) if f.status == "mapped"]
    if mapped:
        t = Table(title="Mapped", title_style=_STYLE["mapped"])
        for col in ("PyTorch API", "MindSpore", "lines", "notes"):
            t.add_column(col, overflow="fold")
        groups: dict[str, list[Finding]] = {}
        for f in mapped:
            groups.setdefault(f.name, []).append(f)
        for name, fs in sorted(groups.items()):
            lines = ", ".join(f"{Path(f.file).name}:{f.line}" for f in fs[:6])
            if len(fs) > 6:
                lines += f" (+{len(fs) - 6})"
            note = fs[0].note if verbose else _short(fs[0].note)
            t.add_row(name, fs[0].target, lines, note)
        console.print(t)


def to_html(result: ScanResult) -> str:
    """A self-contained HTML page (inline CSS, no scripts), every string escaped."""
    e = html.escape
    rows = []
    for f in _sorted(result.findings):
        rows.append(
            f"<tr class='{e(f.status)}'><td>{e(f.file)}:{f.line}</td><td>{e(f.status)}</td>"
            f"<td><code>{e(f.name)}</code></td><td><code>{e(f.target)}</code></td>"
            f"<td>{e(f.note)}</td></tr>")
    runtime = ""
    if result.runtime is not None:
        rt = "".join(f"<tr class='{e(o.status)}'><td><code>{e(o.name)}</code></td><td>{o.count}"
                     f"</td><td>{e(o.status)}</td><td><code>{e(o.target)}</code></td></tr>"
                     for o in result.runtime)
        runtime = (f"<h2>Executed aten ops</h2><p>{e(result.runtime_note)}</p><table><tr>"
                   f"<th>aten op</th><th>records</th><th>status</th><th>MindSpore</th></tr>"
                   f"{rt}</table>")
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>netparity scan</title><style>"
        "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;width:100%}"
        "td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top;font-size:13px}"
        "tr.missing td{background:#fdd}tr.trap td{background:#ffe9b3}"
        "tr.unlisted td{background:#f0e0ff}</style></head><body>"
        f"<h1>netparity scan</h1><p>{e(summary_line(result))}</p>"
        "<table><tr><th>where</th><th>status</th><th>PyTorch API</th><th>MindSpore</th>"
        f"<th>note</th></tr>{''.join(rows)}</table>{runtime}</body></html>\n")


def check_output_path(dest: str, inputs: Iterable[str | Path]) -> Path:
    """Refuse an output path that is one of the scanned inputs (or inside a scanned folder)."""
    return check_output(dest, list(inputs), what="scan output")


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same directory + ``os.replace``."""
    write_text_atomic(path, text, what="scan output")


def write_json(result: ScanResult, path: Path) -> None:
    """The JSON report: ``apis`` (list of findings) and ``summary`` (+ ``runtime``)."""
    write_atomic(path, json.dumps(result.as_json(), indent=1) + "\n")


def write_html(result: ScanResult, path: Path) -> None:
    """The HTML report."""
    write_atomic(path, to_html(result))
