"""``netparity inspect TRACE``: run facts, steps, counts, module tree, NaN/Inf first."""

from __future__ import annotations

import argparse

from netparity.cli._common import add_json_out, console, fmt_bytes, fmt_num, write_json


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("inspect", help="summarise a trace: run info, counts, module tree, NaN/Inf")
    p.add_argument("trace", help="trace directory")
    p.add_argument("--step", type=int, help="step whose module tree is shown (default: first)")
    p.add_argument("--rank", type=int, help="only this rank")
    p.add_argument("--depth", type=int, default=None, help="deepest module level shown")
    p.add_argument("--max-rows", type=int, default=60, help="module rows shown (default 60)")
    add_json_out(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.table import Table

    from netparity.analyzers.summary import summarize
    from netparity.trace import open_trace

    with open_trace(args.trace) as tr:
        s = summarize(tr, step=args.step, rank=args.rank)
    if args.json:
        write_json(s.to_json(), args.json)
        if args.json == "-":
            return 0
    con = console()
    m = s.manifest
    fw = f"{m.get('framework', '?')} {m.get('framework_version', '')}".strip()
    con.print(f"[bold]{s.path}[/]  {fw}  device={m.get('device', '?')}  "
              f"schema v{m.get('schema_version')}  world_size={m.get('world_size', 1)}")
    prec = m.get("precision")
    if prec:
        con.print("precision: " + ", ".join(f"{k}={v}" for k, v in prec.items()))
    if m.get("seeds"):
        con.print(f"seeds: {m['seeds']}")
    con.print(f"ranks {s.ranks}  steps {_ranges(s.steps)}  records "
              + ", ".join(f"{k}={v}" for k, v in sorted(s.counts.items()))
              + f"  payload {fmt_bytes(s.payload_bytes)}")
    if s.nonfinite_records:
        con.print(f"[bold red]NaN/Inf in {s.nonfinite_records} record(s); first occurrences:[/]")
        t = Table(show_edge=False, pad_edge=False)
        for c in ("step", "dir", "kind", "where", "role", "nan", "+inf", "-inf", "numel", "source"):
            t.add_column(c)
        for n in s.first_nonfinite:
            t.add_row(str(n.step), n.direction, n.kind, n.where, n.role + (f"[{n.arg}]" if n.arg else ""),
                      str(n.nan), str(n.posinf), str(n.neginf), str(n.numel), n.source)
        con.print(t)
    else:
        con.print("[green]no NaN/Inf values[/]")
    if s.fp16_overflow_records:
        con.print(f"[yellow]{s.fp16_overflow_records} record(s) hold finite values beyond "
                  "float16 range (65504): they would overflow in fp16[/]")
    if s.losses:
        con.print("loss: " + "  ".join(f"step {st}: {fmt_num(v, 6)}" for st, v in s.losses[:12]))
    rows = [r for r in s.modules if args.depth is None or r.depth <= args.depth]
    if rows:
        t = Table(title=f"module outputs, step {s.step} (forward)", show_edge=False)
        for c in ("module", "type", "calls", "dtype", "shape", "mean", "std", "min", "max", "nan/inf"):
            t.add_column(c, no_wrap=c == "module")
        for r in rows[: args.max_rows]:
            st = r.stats
            bad = (st.get("nan") or 0) + (st.get("posinf") or 0) + (st.get("neginf") or 0)
            t.add_row("  " * r.depth + (r.module.rsplit(".", 1)[-1] if r.module else "(root)"),
                      r.native.rsplit(".", 1)[-1], str(r.calls), r.dtype,
                      "x".join(map(str, r.shape)) or "()", fmt_num(st.get("mean")),
                      fmt_num(st.get("std")), fmt_num(st.get("min")), fmt_num(st.get("max")),
                      f"[red]{bad}[/]" if bad else "0")
        con.print(t)
        if len(rows) > args.max_rows:
            con.print(f"... {len(rows) - args.max_rows} more module(s); use --max-rows or --depth")
    return 0


def _ranges(steps: list[int]) -> str:
    if not steps:
        return "-"
    out: list[str] = []
    start = prev = steps[0]
    for s in steps[1:] + [None]:  # type: ignore[list-item]
        if s is not None and s == prev + 1:
            prev = s
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if s is not None:
            start = prev = s
    return ",".join(out)
