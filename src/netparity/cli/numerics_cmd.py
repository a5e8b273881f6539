"""``netparity numerics TRACE``: where the first NaN/Inf came from, float16 range risk, weights
not updating, the loss explosion window. Exit 0 healthy, 1 problem found, 2 bad input."""

from __future__ import annotations

import argparse

from netparity.cli._common import COUNT, INDEX, Number, add_json_out, console
from netparity.cli._io import add_input, add_output


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "numerics",
        help="numerics and training health of one run: NaN/Inf origin, overflow, weights not "
        "updating, loss explosion",
        description="Analyse one trace: the first op/module that produced NaN/Inf from finite "
        "inputs (forward or backward) and why, float16/bfloat16 overflow and underflow risk, "
        "parameters that do not update, the step where the loss explodes. Exit status 0 when "
        "healthy, 1 when a problem is found, 2 on bad input.",
    )
    add_input(p, "trace", kind="trace", help="trace directory")
    p.add_argument("--rank", type=INDEX, help="only this rank")
    add_input(p, "--loss", metavar="FILE",
                   help="loss curve from a CSV ('loss' column) or a training log, instead of "
                   "the trace's recorded losses")
    p.add_argument("--factor", type=Number(1, above=True, what="a factor"), default=10.0,
                   help="a loss this many times the median before it explodes (default 10)")
    p.add_argument("--top", type=COUNT, default=10, help="rows of the risk tables (default 10)")
    add_json_out(p)
    add_output(p, "--html", metavar="FILE", help="also write an HTML report")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from netparity.analyzers.health import read_losses
    from netparity.analyzers.numerics import analyze
    from netparity.cli._common import check_traces, close_traces
    from netparity.report.html import write_html
    from netparity.report.json_report import write_json
    from netparity.report.sections import sections_for
    from netparity.report.terminal import render_sections

    losses = read_losses(args.loss) if args.loss else None
    traces = check_traces(args.trace)
    try:
        r = analyze(traces[0], rank=args.rank, losses=losses, top=max(args.top, 1),
                    explosion_factor=args.factor)
    finally:
        close_traces(traces)
    status = 0 if r else 1
    if args.html:
        write_html(r, args.html, title=f"netparity numerics: {args.trace}")
    if args.json:
        write_json(r.to_json(), args.json)
        if args.json == "-":
            return status
    render_sections(sections_for(r, top=args.top), console())
    return status
