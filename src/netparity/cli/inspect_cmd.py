"""``netparity inspect TRACE``: run facts, steps, counts, module tree, NaN/Inf first, and the
numerics verdict (where the first NaN/Inf came from; ``netparity numerics`` has the full report)."""

from __future__ import annotations

import argparse

from netparity.cli._common import COUNT, INDEX, add_json_out, console
from netparity.cli._io import add_input
from netparity.report.json_report import write_json


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("inspect", help="summarise a trace: run info, counts, module tree, NaN/Inf")
    add_input(p, "trace", kind="trace", help="trace directory")
    p.add_argument("--step", type=INDEX, help="step whose module tree is shown (default: first)")
    p.add_argument("--rank", type=INDEX, help="only this rank")
    p.add_argument("--depth", type=INDEX, default=None, help="deepest module level shown")
    p.add_argument("--max-rows", type=COUNT, default=60, help="module rows shown (default 60)")
    add_json_out(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from netparity.analyzers.numerics import analyze, nothing_to_judge
    from netparity.analyzers.summary import summarize
    from netparity.cli._common import check_traces, close_traces, span
    from netparity.errors import UsageError
    from netparity.report.sections import sections_for
    from netparity.report.terminal import render_sections

    traces = check_traces(args.trace)
    tr = traces[0]
    try:
        if args.rank is not None and args.rank not in tr.ranks:  # (was: rank 0's counts)
            raise UsageError(f"--rank {args.rank}: {args.trace} has ranks {tr.ranks}")
        if args.step is not None and args.step not in tr.steps():
            raise UsageError(f"--step {args.step}: {args.trace} has steps "
                             f"{span(tr.steps())}")
        s = summarize(tr, step=args.step, rank=args.rank)
        # (an empty or profile-only trace is summarised, with no numerics verdict)
        num = analyze(tr, rank=args.rank) if nothing_to_judge(tr, args.rank) is None else None
    finally:
        close_traces(traces)
    if args.json:
        write_json({**s.to_json(), "numerics": num.to_json() if num is not None else None},
                   args.json)
        if args.json == "-":
            return 0
    # the numerics verdict, and on a problem where the first NaN/Inf came from
    names = ("verdict",) if num else ("verdict", "origin")
    render_sections(sections_for(s, depth=args.depth, max_rows=args.max_rows)
                    + (sections_for(num, names=names) if num is not None else []), console())
    return 0
