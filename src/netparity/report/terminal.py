"""The terminal output: report sections printed with rich, the verdict and the culprit first.

:func:`make_console` is the one place that decides the output width: a terminal reports its own;
when stdout is not a terminal (CI logs, files, pipes) the width is ``COLUMNS`` when set, else
:data:`PIPE_WIDTH` (rich would fall back to 80 columns and wrap every table).

It is also the one place that keeps text read from traces, checkpoints, logs and paths from
acting on the terminal: its console (:class:`SafeConsole`) parses no markup (a module named
``box[red]`` prints as ``box[red]``, ``cls[/]`` is not a ``MarkupError``), and every string it
prints passes :func:`safe_text` (control characters such as ESC shown escaped, ``\x1b[2J``
never clears the screen; a name longer than :data:`MAX_TEXT` shortened). Styles are given as
:class:`rich.text.Text` objects (``Text.assemble(("missing", "bold"), ...)``), never as markup.

Example:
    >>> from netparity.compare.results import CompareResult
    >>> print(summary_lines(CompareResult())[0])
    PASS: the runs agree (0 tensor pairs compared)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.table import Table as RichTable
from rich.text import Text as RichText

from netparity.report.format import fmt
from netparity.report.sections import Callout, Section, Table, Text, for_output, sections_for
from netparity.report.sections.compare import divergence_lines, summary_lines, unit

__all__ = ["PIPE_WIDTH", "STYLE", "SafeConsole", "divergence_lines", "make_console",
           "render_sections", "render_terminal", "safe_text", "summary_lines", "unit"]

STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "unknown": "dim",
         "skipped": "dim", "incomplete": "bold yellow"}
#: width of output that does not go to a terminal, unless ``COLUMNS`` says otherwise
PIPE_WIDTH = 120


def _width(stream: Any) -> int | None:
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        return None  # a terminal knows its width (rich asks it, and honours COLUMNS)
    try:
        cols = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        cols = 0
    return cols if cols > 0 else PIPE_WIDTH


#: the longest text printed whole; longer (a 5 MB module name) is shortened in the middle
MAX_TEXT = 1000


def safe_text(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` as it may reach a terminal: characters that are not printable (ESC, CR, BEL,
    the C1 controls, bidi overrides...) written as Python escapes, line breaks kept, and text
    longer than ``limit`` characters shortened in the middle.

    Example:
        >>> safe_text("cls[/]\\x1b[2J\\n\\tok")
        'cls[/]\\\\x1b[2J\\n\\\\tok'
        >>> len(safe_text("m" * 5_000_000))
        1026
    """
    if len(text) > limit:
        cut = len(text) - limit
        text = f"{text[:limit * 3 // 4]}...({cut} more chars)...{text[-(limit // 4):]}"
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == "\n" else repr(c)[1:-1] for c in text)


class SafeConsole(Console):
    """The console every command prints through: no markup, every string through
    :func:`safe_text` (see the module's docstring)."""

    def render_str(self, text: str, **kwargs: Any) -> RichText:
        kwargs["markup"] = False
        return super().render_str(safe_text(text), **kwargs)

    def render(self, renderable: RenderableType,
               options: ConsoleOptions | None = None) -> Any:
        # the last line of defence, for Text objects built from names (a table cell, a
        # headline): no segment of text reaches the terminal with a control character
        for seg in super().render(renderable, options):
            if seg.control is None and not seg.text.isprintable() and seg.text != "\n":
                lines = seg.text.split("\n")
                seg = Segment("\n".join(safe_text(x, limit=len(x)) for x in lines), seg.style)
            yield seg


def make_console(stream: Any = None, **kwargs: Any) -> Console:
    """A rich console for netparity's output (no syntax highlighting, no soft wrapping, no
    markup, control characters escaped)."""
    s = stream if stream is not None else sys.stdout
    return SafeConsole(file=stream, highlight=False, markup=False, width=_width(s),
                       soft_wrap=False, **kwargs)


def text(s: Any, style: str = "") -> RichText:
    """A styled line of netparity's output from any text (:func:`safe_text` applied)."""
    return RichText(safe_text(str(s)), style=style)


def _table(t: Table) -> RichTable:
    rt = RichTable(title=safe_text(t.title) if t.title else None, title_justify="left",
                   show_lines=False)
    for c in t.columns:
        if t.wrap is None:
            rt.add_column(c, overflow="fold")
        else:
            # a wrapped column keeps room for a verdict word beside long unbroken names
            # a wrapped column keeps room for a verdict word; long names fold to make it
            rt.add_column(c, no_wrap=c not in t.wrap and c not in t.mono,
                          overflow="fold" if c in t.mono else "ellipsis",
                          min_width=16 if c in t.wrap else None)
    for i, row in enumerate(t.rows):
        st = t.status[i] if i < len(t.status) else ""
        cells: list[Any] = [safe_text(fmt(v)) for v in row]
        # the status column (or the first one) carries the verdict's colour
        k = t.columns.index("status") if "status" in t.columns else (
            t.columns.index("verdict") if "verdict" in t.columns else -1)
        if k >= 0 and st:
            cells[k] = RichText(cells[k], style=STYLE.get(st, ""))
        rt.add_row(*cells)
    return rt


def render_sections(sections: Sequence[Section], console: Console | None = None) -> None:
    """Print the sections meant for the terminal."""
    con = console or make_console()
    for s in for_output(sections, "terminal"):
        if s.headline:
            con.print(text(s.headline, STYLE.get(s.status, "")))
        for k, v in s.rows:
            con.print(RichText.assemble((safe_text(k), "bold"), "  ", safe_text(fmt(v))))
        for b in s.for_output("terminal"):
            if isinstance(b, Callout):
                con.print(text(b.lines[0], "bold" if b.found else ""))
                for line in b.lines[1:]:
                    con.print(text(line))
            elif isinstance(b, Table):
                if b.rows:
                    con.print(_table(b))
            elif isinstance(b, Text):
                for line in b.lines:
                    bold = bool(b.bold_prefix) and line.startswith(b.bold_prefix)
                    con.print(text(line, "bold" if bold else ""))


def render_terminal(result: Any, *, top: int = 10, console: Console | None = None) -> None:
    """Print an analyzer result's report: verdict and culprit on top, evidence below.

    Example:
        >>> from netparity.compare.results import CompareResult
        >>> render_terminal(CompareResult(), console=Console(width=100))  # doctest: +ELLIPSIS
        PASS...
    """
    # output="terminal": sections with nothing to print there may skip their work (a
    # comparison's every-pair table would make ~300k pair objects at 100k ops)
    render_sections(sections_for(result, top=top, output="terminal"), console)
