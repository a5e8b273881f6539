"""``netparity view REF CAND`` (or ``netparity view RESULT.json``): the interactive network view
as one self-contained HTML file -- both module trees side by side, aligned, each node coloured
by its verdict (pass, noise, introduced, propagated, unmatched, non-finite), collapsible, with
search, filters by verdict and direction, a rank selector for multi-rank traces, "jump to first
divergence" and a detail panel per node (both sides' statistics, error and bound, who judged
it, the source lines). No server and no network: open the file in a browser.

Exit status 0 when the runs agree, 1 when they diverge (or evidence is incomplete), 2 on bad
input. The compare and step HTML reports hold the same view.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from netparity.cli._common import INDEX, console, parse_steps, say
from netparity.cli._io import add_input, add_output


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "view",
        help="interactive side-by-side view of two runs' module trees (one HTML file)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input(p, "ref", kind="path",
              help="reference trace directory, or a result saved by `compare --json`")
    add_input(p, "cand", kind="trace", nargs="?", help="candidate trace directory")
    add_input(p, "--mapping", metavar="FILE", help="YAML/JSON module/param name mapping")
    p.add_argument("--level", choices=("module", "op", "both"), default="module")
    p.add_argument("--steps", metavar="S", help="steps to compare, e.g. 0 or 0,2-4 (default all)")
    p.add_argument("--rank", type=INDEX, help="only this rank (default: every rank)")
    add_output(p, "-o", "--out", metavar="FILE", default="netparity-view.html",
               help="the HTML file to write (default netparity-view.html)")
    p.set_defaults(func=run)


def _results(args: argparse.Namespace) -> list[Any]:
    from netparity.errors import UsageError

    if args.cand is None:
        if Path(args.ref).is_dir():
            raise UsageError(f"{args.ref}: a trace needs a candidate trace beside it "
                             "(netparity view REF CAND), or give a saved compare result")
        from netparity.report.json_report import read_json

        try:
            return [read_json(args.ref)]
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise UsageError(f"{args.ref}: not a valid saved compare result "
                             f"({type(e).__name__}: {str(e)[:200]})") from None
    from netparity.analyzers.divergence import compare
    from netparity.cli._common import check_traces, close_traces

    steps = parse_steps(args.steps) if args.steps else None
    traces = check_traces(args.ref, args.cand)
    try:
        ranks = [args.rank] if args.rank is not None else \
            sorted(set(traces[0].ranks) & set(traces[1].ranks)) or [0]
        return [compare(traces[0], traces[1], mapping=args.mapping, level=args.level,
                        steps=steps, rank=r) for r in ranks]
    finally:
        close_traces(traces)


def run(args: argparse.Namespace) -> int:
    from netparity.outputs import write_text_atomic
    from netparity.report.html import render_page
    from netparity.report.sections import Section, TreeView, sections_for
    from netparity.report.tree import compare_tree

    results = _results(args)
    model = compare_tree(*results)
    worst = max(results, key=lambda r: {"pass": 0, "warn": 1, "incomplete": 2,
                                        "fail": 3}.get(r.status, 0))
    head = sections_for(worst, names=["verdict"])
    view = Section("view", "Network view: both module trees, aligned",
                   blocks=[TreeView(model)], only=("html",))
    title = f"netparity view: {args.ref}" + (f" vs {args.cand}" if args.cand else "")
    write_text_atomic(args.out, render_page([*head, view], title=title), what="view")
    n = sum(1 for node in model["nodes"] if node["type"] == "module")
    say(f"{worst.status.upper()}: {n} modules"
        + (f" on {len(model['ranks'])} ranks" if len(model["ranks"]) > 1 else "")
        + f"; view written to {args.out}")
    console()
    return 0 if all(bool(r) for r in results) else 1
