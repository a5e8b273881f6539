"""Sections of a trace summary (:class:`~netparity.analyzers.summary.TraceSummary`).

Example:
    >>> from netparity.analyzers.summary import TraceSummary
    >>> s = TraceSummary("t", {}, [0], [0], {}, {}, 0, 0)
    >>> overview(s).headline
    'no NaN/Inf values'
"""

from __future__ import annotations

from typing import Any

from netparity.analyzers.summary import TraceSummary
from netparity.report.format import fmt, fmt_bytes
from netparity.report.sections import Section, Table, Text, section


def _ranges(steps: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5``."""
    if not steps:
        return "-"
    out: list[str] = []
    start = prev = steps[0]
    for s in steps[1:]:
        if s == prev + 1:
            prev = s
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = s
    out.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(out)


@section("TraceSummary", "run")
def run_facts(s: TraceSummary, **_: Any) -> Section:
    """Run facts and record counts."""
    m = s.manifest
    fw = f"{m.get('framework', '?')} {m.get('framework_version', '')}".strip()
    lines = [f"{s.path}  {fw}  device={m.get('device', '?')}  schema v{m.get('schema_version')}"
             f"  world_size={m.get('world_size', 1)}"]
    if m.get("precision"):
        lines.append("precision: " + ", ".join(f"{k}={v}" for k, v in m["precision"].items()))
    if m.get("seeds"):
        lines.append(f"seeds: {m['seeds']}")
    lines.append(f"ranks {s.ranks}  steps {_ranges(s.steps)}  records "
                 + ", ".join(f"{k}={v}" for k, v in sorted(s.counts.items()))
                 + f"  payload {fmt_bytes(s.payload_bytes)}")
    return Section("run", title="Run", blocks=[Text(lines)])


@section("TraceSummary", "health")
def overview(s: TraceSummary, **_: Any) -> Section:
    """NaN/Inf first occurrences, fp16 overflow, losses."""
    blocks: list[Any] = []
    if s.nonfinite_records:
        head, status = (f"NaN/Inf in {s.nonfinite_records} record(s); first occurrences:",
                        "fail")
        blocks.append(Table(title="", columns=["step", "dir", "kind", "where", "role", "nan",
                                               "+inf", "-inf", "numel", "source"],
                            rows=[[n.step, n.direction, n.kind, n.where,
                                   n.role + (f"[{n.arg}]" if n.arg else ""), n.nan, n.posinf,
                                   n.neginf, n.numel, n.source] for n in s.first_nonfinite],
                            mono=("where", "source"), wrap=("source",)))
    else:
        head, status = "no NaN/Inf values", "pass"
    tail = []
    if s.fp16_overflow_records:
        tail.append(f"{s.fp16_overflow_records} record(s) hold finite values beyond float16 "
                    "range (65504): they would overflow in fp16")
    if s.losses:
        tail.append("loss: " + "  ".join(f"step {st}: {fmt(v, 6, none='-')}"
                                         for st, v in s.losses[:12]))
    if tail:
        blocks.append(Text(tail))
    return Section("health", title="Health", headline=head, status=status, blocks=blocks)


@section("TraceSummary", "modules")
def modules(s: TraceSummary, depth: int | None = None, max_rows: int = 60,
            **_: Any) -> Section | None:
    """The module tree of the summary step: forward output statistics per module."""
    rows = [r for r in s.modules if depth is None or r.depth <= depth]
    if not rows:
        return None
    table_rows = []
    for r in rows[:max_rows]:
        st = r.stats
        bad = (st.get("nan") or 0) + (st.get("posinf") or 0) + (st.get("neginf") or 0)
        table_rows.append(["  " * r.depth + (r.module.rsplit(".", 1)[-1] if r.module else "(root)"),
                           r.native.rsplit(".", 1)[-1], r.calls, r.dtype,
                           "x".join(map(str, r.shape)) or "()", fmt(st.get("mean"), 4, none="-"),
                           fmt(st.get("std"), 4, none="-"), fmt(st.get("min"), 4, none="-"),
                           fmt(st.get("max"), 4, none="-"), bad])
    blocks: list[Any] = [Table(
        title=f"module outputs, step {s.step} (forward)",
        columns=["module", "type", "calls", "dtype", "shape", "mean", "std", "min", "max",
                 "nan/inf"],
        rows=table_rows, status=["fail" if r[-1] else "" for r in table_rows],
        mono=("module",), wrap=("type", "shape"))]
    if len(rows) > max_rows:
        blocks.append(Text([f"... {len(rows) - max_rows} more module(s); use --max-rows or "
                            "--depth"]))
    return Section("modules", title="Modules", blocks=blocks)
