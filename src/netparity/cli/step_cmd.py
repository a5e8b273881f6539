"""``netparity step REF_SPEC CAND_SPEC``: the one-step parity workflow."""

from __future__ import annotations

import argparse

from netparity.cli._common import COUNT, INDEX, TOLERANCE, add_emulate, add_quiet, console, progress
from netparity.cli._io import add_input, add_output
from netparity.workflow import STEP_FILES, STEP_TRACES


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "step",
        help="one training step on both sides, phase by phase: data, forward, loss, backward, "
        "update, later steps, eval",
        description="Run the one-step parity workflow on two spec files (see README 'Writing a "
        "spec'). Exit status 0 when every phase agrees, 1 on a divergence, 2 on bad input.",
    )
    add_input(p, "ref", kind="spec",
              help="reference spec: a .py file or module with build(**options)")
    add_input(p, "cand", kind="spec", help="candidate spec")
    add_output(p, "-o", "--out", kind="workdir", traces=STEP_TRACES, files=STEP_FILES,
               default="netparity-step",
               help="output directory (its traces are replaced only once the new ones are "
               "complete; a folder netparity did not write is refused)")
    p.add_argument("--steps", type=COUNT, default=3, help="training steps (default 3)")
    p.add_argument("--opt", action="append", metavar="KEY=VALUE", help="option for both specs")
    p.add_argument("--ref-opt", action="append", metavar="KEY=VALUE", help="reference-only option")
    p.add_argument("--cand-opt", action="append", metavar="KEY=VALUE", help="candidate-only option")
    p.add_argument("--level", choices=("module", "op", "both"), default="module")
    p.add_argument("--payload", choices=("tensors", "stats"), default="tensors")
    p.add_argument("--seed", type=INDEX, default=0)
    p.add_argument("--rtol", type=TOLERANCE)
    p.add_argument("--atol", type=TOLERANCE)
    p.add_argument("--no-eval", action="store_true", help="skip the evaluation phase")
    add_emulate(p)
    add_quiet(p, "no progress display while the steps run")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from netparity.cli._common import cand_options
    from netparity.report.step import write_reports
    from netparity.report.terminal import render_terminal
    from netparity.workflow.spec import parse_options
    from netparity.workflow.step import run_step_parity

    con = console()
    bar = progress(args, con)
    try:
        r = run_step_parity(
            args.ref, args.cand, args.out, steps=args.steps, options=parse_options(args.opt),
            ref_options=parse_options(args.ref_opt), cand_options=cand_options(args),
            level=args.level, payload=args.payload, seed=args.seed, rtol=args.rtol,
            atol=args.atol, run_eval=not args.no_eval, progress=bar,
        )
    finally:
        bar.done()
    paths = write_reports(r)
    render_terminal(r, console=con)
    con.print(f"report: {paths['html']}\njson:   {paths['json']}")
    return 0 if r else 1
