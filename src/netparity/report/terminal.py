"""Terminal report of a comparison: the verdict and the culprit first, evidence below (rich).

Example:
    >>> from netparity.compare.results import CompareResult
    >>> print(summary_lines(CompareResult())[0])
    PASS: the runs agree (0 tensor pairs compared)
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from netparity.compare.results import CompareResult, Divergence, PairResult

STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "unknown": "dim"}


def fmt(x: Any) -> str:
    """Short number formatting shared by the reports."""
    if isinstance(x, bool) or x is None:
        return "" if x is None else str(x)
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if x != x:
            return "nan"
        if x == 0:
            return "0"
        return f"{x:.3g}"
    return str(x)


def _where(d: Divergence) -> str:
    name = d.module or "<root>"
    if d.op:
        name += f" ({d.op})"
    if d.cand_module and d.cand_module != d.module:
        name += f"  <->  cand {d.cand_module}"
    return name


def divergence_lines(title: str, d: Divergence | None) -> list[str]:
    """Plain lines describing one divergence (used by every report)."""
    if d is None:
        return [f"{title}: none"]
    m = d.metrics
    lines = [
        f"{title}: {_where(d)} -- {d.verdict.upper()} here ({d.status})",
        f"    {d.direction}, step {d.step}, rank {d.rank}"
        + (f", source {d.source}" if d.source else "")
        + (f" / cand {d.cand_source}" if d.cand_source and d.cand_source != d.source else ""),
    ]
    if m.get("basis") == "tensors":
        lines.append(
            f"    max abs err {fmt(m.get('max_abs'))}, max rel err {fmt(m.get('max_rel'))}, "
            f"cosine {fmt(m.get('cosine'))}, {fmt(100 * (1 - float(m.get('within', 1))))}% "
            f"elements outside rtol={fmt(m.get('rtol'))} atol={fmt(m.get('atol'))}"
        )
    elif m.get("basis") == "stats":
        lines.append(
            f"    judged from statistics only (weaker): error >= {fmt(m.get('max_abs_lb'))}"
        )
    if m.get("reason") and m.get("basis") != "tensors":
        lines.append(f"    {m['reason']}")
    if d.verdict == "propagated":
        lines.append(f"    inputs already differ (rel err {fmt(d.in_error)}): look earlier")
    if d.note:
        lines.append(f"    note: {d.note}")
    return lines


def unit(t: dict[str, Any]) -> str:
    """Unit suffix of a minimum-tolerance entry ("x rms" for RMS-relative atol)."""
    return " x rms" if t.get("atol_unit") == "rms" else ""


def summary_lines(result: CompareResult) -> list[str]:
    """The first screen as plain text: verdict, culprit, backward, params, loss."""
    counts = result.counts()
    n = sum(counts.values())
    status = result.status
    if status == "pass":
        head = f"PASS: the runs agree ({n} tensor pairs compared)"
    elif status == "warn":
        head = f"WARN: the runs agree within a looser tolerance ({counts['warn']} of {n} pairs warn)"
    else:
        head = f"FAIL: the runs diverge ({counts['fail']} of {n} pairs fail, {counts['warn']} warn)"
    lines = [head]
    lines += divergence_lines("first divergence (forward)", result.first_divergence)
    lines += divergence_lines("first divergence (backward)", result.first_backward)
    if result.first_update is not None:
        lines += divergence_lines("first divergence (optimizer)", result.first_update)
    for kind, label in (("grad", "parameter gradients"), ("param", "updated parameters")):
        allp = [p for p in result.params if p.kind == kind]
        bad = result.divergent_params(kind)
        if allp:
            names = ", ".join(p.module for p in bad[:5]) + (" ..." if len(bad) > 5 else "")
            lines.append(
                f"{label}: {len(bad)} of {len(allp)} diverge" + (f" ({names})" if bad else "")
            )
    for p in result.loss:
        lines.append(
            f"loss step {p.step}: {p.status}"
            + (f" (abs err {fmt(p.metrics.get('max_abs', p.metrics.get('max_abs_lb')))})"
               if p.status != "pass" else "")
        )
    bad_data = [p for p in result.data if p.status != "pass"]
    if bad_data:
        lines.append(f"data: {len(bad_data)} input record(s) differ -- the runs were not fed the same data")
    for t in result.min_tolerance:
        lines.append(
            f"minimum passing tolerance: atol>={fmt(t['min_atol'])}{unit(t)} at "
            f"rtol={fmt(t['rtol'])}, or rtol>={fmt(t['min_rtol'])} at atol={fmt(t['atol'])}"
            f"{unit(t)} ({t['pairs']} pairs"
            + (f", {t['nonfinite_mismatch']} with NaN/Inf mismatches that no tolerance passes"
               if t["nonfinite_mismatch"] else "")
            + ")"
        )
    um = result.unmatched
    parts = [f"{len(um.get(k, []))} {k.replace('_', ' ')}" for k in
             ("calls_ref", "calls_cand", "params_ref", "params_cand", "tensors") if um.get(k)]
    if parts:
        lines.append("unmatched: " + ", ".join(parts))
    lines += [f"note: {x}" for x in result.notes]
    return lines


def _pair_row(p: PairResult) -> list[Any]:
    m = p.metrics
    return [
        Text(p.status, style=STYLE.get(p.status, "")),
        p.name,
        p.direction,
        str(p.step),
        m.get("basis", ""),
        fmt(m.get("max_abs", m.get("max_abs_lb"))),
        fmt(m.get("max_rel", m.get("max_rel_lb"))),
        fmt(m.get("cosine")),
        fmt(m.get("q99")),
        fmt(m.get("within")),
        f"{fmt(p.rtol)}/{fmt(p.atol)}",
    ]


def render_terminal(result: CompareResult, *, top: int = 10, console: Console | None = None) -> None:
    """Print the report: verdict and culprit on top, then the worst ``top`` pairs.

    Example:
        >>> from netparity.compare.results import CompareResult
        >>> render_terminal(CompareResult(), console=Console(width=100))  # doctest: +ELLIPSIS
        PASS...
    """
    con = console or Console()
    lines = summary_lines(result)
    con.print(Text(lines[0], style=STYLE.get(result.status, "")))
    for line in lines[1:]:
        style = "bold" if line.startswith("first divergence") and "none" not in line else ""
        con.print(Text(line, style=style))
    worst = [p for p in result.worst_pairs(top) if p.status != "pass"] or result.worst_pairs(top)
    if not worst:
        return
    t = Table(title=f"worst {len(worst)} pairs", title_justify="left", show_lines=False)
    for col in ("status", "tensor", "dir", "step", "basis", "max abs", "max rel", "cosine",
                "p99 abs", "within", "rtol/atol"):
        t.add_column(col, overflow="fold")
    for p in worst:
        t.add_row(*_pair_row(p))
    con.print(t)
