"""netparity.report: one report layer for every analyzer result.

Sections (:mod:`netparity.report.sections`) turn a result into neutral structures -- headline,
key/value rows, tables, plots, culprit boxes -- registered once per result type; each output
renders them: :mod:`~netparity.report.terminal` (rich), :mod:`~netparity.report.json_report`,
:mod:`~netparity.report.csv_report`, :mod:`~netparity.report.html` (one self-contained page).
:func:`~netparity.report.format.fmt` is the one number formatter,
:func:`~netparity.report.json_report.write_json` the one (atomic) JSON writer, and
:mod:`~netparity.report.progress` the progress display of long work.

Example:
    >>> from netparity.compare.results import CompareResult
    >>> from netparity.report import render
    >>> render(CompareResult(), "json")["sections"][0]["headline"]
    'PASS: the runs agree (0 tensor pairs compared)'
"""

from __future__ import annotations

from typing import Any

from netparity.errors import UsageError
from netparity.report.format import fmt, fmt_bytes
from netparity.report.json_report import write_json
from netparity.report.sections import Section, section, sections_for

__all__ = ["Section", "fmt", "fmt_bytes", "render", "section", "sections_for", "write_json"]


def render(result: Any, output: str, **options: Any) -> Any:
    """Render an analyzer result: ``"json"`` -> dict, ``"csv"`` / ``"html"`` -> str,
    ``"terminal"`` -> printed (``console=`` optional), ``None`` returned."""
    sections = sections_for(result, **{k: v for k, v in options.items() if k != "console"})
    if output == "json":
        from netparity.report.json_report import render_json

        return render_json(sections)
    if output == "csv":
        from netparity.report.csv_report import render_csv

        return render_csv(sections)
    if output == "html":
        from netparity.report.html import render_page

        return render_page(sections)
    if output == "terminal":
        from netparity.report.terminal import render_sections

        render_sections(sections, options.get("console"))
        return None
    raise UsageError(f"unknown report output {output!r} (terminal, json, csv, html)")
