"""``netparity perf TRACE [CAND]``: where each training step's time goes (data wait, forward,
backward, optimizer, the rest; first step apart), findings with advice, hot modules, and with
two traces where the candidate spends more time. Exit 0 for any analysis, 2 on bad input."""

from __future__ import annotations

import argparse

from netparity.cli._common import COUNT, INDEX, add_json_out, console
from netparity.cli._io import add_input, add_output


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "perf",
        help="performance of a run (netparity.profile trace): step breakdown, data starvation, "
        "hot modules; side by side with a reference",
        description="Analyse the timing records of one trace (written by netparity.profile): "
        "seconds per phase per step, shares, the first step against the steady median, "
        "findings (data starvation, first step, hot module, host overhead) with advice. With "
        "two traces (REF CAND): where the candidate spends more time, per phase and per "
        "module, costliest first. Exit status 0 for any analysis, 2 on bad input.",
    )
    add_input(p, "trace", kind="trace", help="trace directory (the reference when CAND is given)")
    add_input(p, "cand", kind="trace", nargs="?", help="candidate trace directory: side by side")
    p.add_argument("--rank", type=INDEX, default=0, help="rank to read (default 0)")
    add_input(p, "--mapping", metavar="FILE",
                   help="module mapping (YAML/JSON 'modules'/'rules') for the side by side")
    p.add_argument("--top", type=COUNT, default=10, help="rows of the module tables (default 10)")
    add_json_out(p)
    add_output(p, "--html", metavar="FILE", help="also write an HTML report")
    add_output(p, "--chrome", metavar="FILE",
                   help="also write a Chrome trace-event JSON (opens in Perfetto)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from netparity.analyzers.kineto import is_kineto
    from netparity.analyzers.perf import analyze, chrome_trace, compare
    from netparity.cli._common import check_traces, close_traces, progress
    from netparity.report.html import write_html
    from netparity.report.json_report import write_json
    from netparity.report.sections import sections_for
    from netparity.report.terminal import render_sections

    paths = (args.trace, args.cand)
    # a PyTorch profiler (Kineto) file is not a trace: read by its own reader
    traces = check_traces(*(None if p is None or is_kineto(p) else p for p in paths))
    try:
        ref, cand = (t if t is not None else p for t, p in zip(traces, paths))
        prog = progress(args, console())
        try:
            r = analyze(ref, rank=args.rank, progress=prog) if cand is None else \
                compare(ref, cand, rank=args.rank, mapping=args.mapping)
        finally:
            prog.done()
    finally:
        close_traces(traces)
    if args.html:
        write_html(r, args.html, title=f"netparity perf: {args.trace}"
                   + (f" vs {args.cand}" if args.cand else ""))
    if args.chrome:
        write_json(chrome_trace(r), args.chrome, indent=0)
    if args.json:
        write_json(r.to_json(), args.json)
        if args.json == "-":
            return 0
    render_sections(sections_for(r, top=max(args.top, 1)), console())
    return 0
