"""``netparity compare REF CAND``: where do two traces stop agreeing?

Exit status: 0 everything passes (warnings allowed), 1 something diverges or the evidence is
incomplete (steps, ranks, levels or directions one side lacks; a capture not finished), 2
usage/input error (nothing to compare included).
"""

from __future__ import annotations

import argparse
from typing import Any

from netparity.cli._common import COUNT, INDEX, TOLERANCE, Number, console, progress, say
from netparity.cli._io import add_input, add_output
from netparity.errors import UsageError


def add_tolerance_args(p: argparse.ArgumentParser) -> None:
    """Tolerance options shared by ``compare`` and ``recheck``."""
    p.add_argument("--rtol", type=TOLERANCE, default=None, help="relative tolerance for every pair")
    p.add_argument("--atol", type=TOLERANCE, default=None, help="absolute tolerance for every pair")


def add_output_args(p: argparse.ArgumentParser) -> None:
    add_output(p, "--json", stdout=True, metavar="FILE",
               help="write the result as JSON (recheck reads it; '-' = stdout)")
    add_output(p, "--html", metavar="FILE", help="write a self-contained HTML report")
    add_output(p, "--csv", metavar="FILE", help="write one CSV row per tensor pair")
    p.add_argument("--top", type=COUNT, default=10, metavar="N", help="worst pairs to list (10)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="print only the summary lines, no progress display")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "compare",
        help="compare two traces: first divergence, culprit, reports",
        description="Compare two traces and say where they start to disagree and what "
        "introduced it. Exit 0 = agree, 1 = diverge or incomplete evidence (INCOMPLETE: "
        "steps/ranks/levels/directions one side lacks; narrow with --steps/--rank), "
        "2 = bad input.",
    )
    add_input(p, "ref", kind="trace", help="reference trace directory")
    add_input(p, "cand", kind="trace", help="candidate trace directory")
    add_input(p, "--mapping", metavar="FILE", help="YAML/JSON module/param name mapping")
    add_input(p, "--shards", metavar="LAYOUT",
              help="YAML/JSON shard layout {module glob: {parallel: column|row|split, dim: k}}: "
              "merge the ranks of a tensor-parallel side into one before comparing (default: "
              "the layout a capture recorded, netparity.shard_layout; docs/compare.md)")
    p.add_argument("--level", choices=("module", "op", "both"), default="module")
    p.add_argument("--steps", metavar="S", help="steps to compare, e.g. 0 or 0,2-4 (default all)")
    p.add_argument("--by-step", action=argparse.BooleanOptionalAction, default=None,
                   help="compare one step at a time and merge (memory of one step, whatever "
                   "the number of steps; the details shown are the lead step's). Default: "
                   "by itself when several steps hold 4M index rows or more (both sides)")
    p.add_argument("--rank", type=INDEX, default=None,
                   help="rank to compare (default: every rank both traces hold, each on its "
                   "own, merged into one verdict); naming it narrows the comparison to it")
    p.add_argument("--workers", type=COUNT, default=None, metavar="N",
                   help="worker processes comparing ranks in parallel (default: min(ranks, "
                   "CPUs); 1 = in this process)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="compare the ranks on this Dask scheduler (tcp://host:8786; needs "
                   "'distributed'; its workers must read the traces at the same paths)")
    add_tolerance_args(p)
    p.add_argument(
        "--tol", action="append", default=[], metavar="PATTERN=RTOL,ATOL",
        help="per-name tolerance (glob on module path/op); '=RTOL,ATOL' sets the default; "
        "repeatable",
    )
    p.add_argument("--profile", choices=("auto", "same", "cross"), default="auto",
                   help="default tolerance table (auto: cross when framework/device differ)")
    add_input(p, "--fp64-ref", kind="trace", metavar="TRACE", help="float64 trace of the reference run")
    p.add_argument("--k", type=Number(0, above=True, what="an error ratio"), default=2.0,
                   help="fp64 mode: allowed error ratio candidate/reference (2)")
    add_input(p, "--noise", kind="trace", metavar="TRACE",
                   help="noise run of the reference (the same run with last-bit perturbed "
                        "weights and inputs, e.g. the ref-noise/ that `netparity step` writes): "
                        "judge each pair against its own measured noise")
    p.add_argument("--noise-k", type=Number(0, above=True, what="a multiple"), default=5.0,
                   help="noise mode: allowed error as a multiple of the noise run's (5)")
    add_output_args(p)
    p.set_defaults(func=run)


def emit(result: Any, args: argparse.Namespace) -> int:
    """Print the terminal report, write the requested files, return the exit status."""
    from netparity.report.terminal import render_terminal, summary_lines

    if args.top < 0:
        raise UsageError("--top must be >= 0")
    if args.json:
        from netparity.report.json_report import write_result

        write_result(result, args.json)
    if args.csv:
        from netparity.report.csv_report import write_csv

        write_csv(result, args.csv)
    if args.html:
        from netparity.report.html import write_html

        write_html(result, args.html)
    if args.quiet:
        say(*summary_lines(result))
    else:
        render_terminal(result, top=args.top, console=console())
    return 0 if result else 1


def run(args: argparse.Namespace) -> int:
    from netparity.analyzers.divergence import compare
    from netparity.analyzers.ranks import by_step, compare_steps
    from netparity.cli._common import check_tolerance, check_traces, close_traces, parse_steps
    from netparity.compare.shards import MANIFEST_KEY, merged_sides, note_merges
    from netparity.compare.tolerances import parse_tol_arg
    from netparity.heap import return_large_blocks

    return_large_blocks()  # the columns' and tables' arrays go back to the system when dropped
    steps = parse_steps(args.steps) if args.steps else None
    overrides = dict(parse_tol_arg(t) for t in args.tol)
    for t, (r, a) in zip(args.tol, overrides.values()):
        check_tolerance(r, f"--tol {t!r}: rtol")
        check_tolerance(a, f"--tol {t!r}: atol")
    traces = check_traces(args.ref, args.cand, args.fp64_ref, args.noise, rows=False)
    ref, cand, fp64_ref, noise = traces
    try:
        # every rank compared on its own: each checks its rows where it is compared (in
        # parallel); else (and the other traces) here, before anything reads them
        # (not when shards are merged: that reads the ranks first)
        per_rank = (args.rank is None and not args.shards
                    and not any(MANIFEST_KEY in t.manifest for t in (ref, cand))
                    and len(set(ref.ranks) & set(cand.ranks)) > 1)
        for tr in traces[2:] if per_rank else traces:
            if tr is not None:
                tr.check_rows()
        if per_rank:  # every rank's files through the opener first; rows in each rank's task
            from netparity.trace.columnar import check_files

            for tr in traces[:2]:
                check_files(tr)
        with merged_sides(ref, cand, args.shards, level=args.level,
                          rank=args.rank) as (ref_v, cand_v, merges):
            options = dict(mapping=args.mapping, level=args.level, steps=steps,
                           rtol=args.rtol, atol=args.atol, tolerances=overrides,
                           fp64_ref=fp64_ref, k=args.k, profile=args.profile,
                           noise_run=noise, noise_k=args.noise_k)
            shared = set(ref_v.ranks) & set(cand_v.ranks)
            if args.rank is None and len(shared) > 1:
                from netparity.analyzers.ranks import compare_ranks

                if args.by_step:
                    raise UsageError("--by-step compares one rank a step at a time: name it "
                                     f"with --rank N (the traces share ranks {sorted(shared)})")

                shown = progress(args, console())
                try:
                    result = compare_ranks(ref_v, cand_v, workers=args.workers,
                                           scheduler=args.scheduler, progress=shown,
                                           check_rows=per_rank, **options)
                finally:
                    shown.done()
            elif by_step(ref_v, cand_v, args.rank, steps, args.by_step, options):
                shown = progress(args, console())
                try:
                    result = compare_steps(ref_v, cand_v, rank=args.rank, progress=shown,
                                           **options)
                finally:
                    shown.done()
            else:
                result = compare(ref_v, cand_v, rank=args.rank,
                                 progress=progress(args, console()), **options)
            note_merges(result, merges)
        return emit(result, args)
    finally:
        close_traces(traces)
