"""``netparity demo``: the built-in ResNet-50 PyTorch -> MindSpore migration."""

from __future__ import annotations

import argparse

from netparity.cli._common import COUNT, add_quiet, console, progress, say
from netparity.cli._io import add_output
from netparity.workflow import STEP_FILES, STEP_TRACES


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("demo", help="the ResNet-50 PyTorch -> MindSpore migration, end to end")
    add_output(p, "-o", "--out", kind="workdir", traces=STEP_TRACES, files=STEP_FILES,
               default="netparity-demo", help="output directory")
    p.add_argument("--bug", help="inject a classic migration mistake (see --list-bugs)")
    p.add_argument("--list-bugs", action="store_true", help="list the injectable bugs")
    p.add_argument("--steps", type=COUNT, default=3, help="training steps (default 3)")
    p.add_argument("--depth", type=int, default=50, choices=(18, 34, 50, 101, 152))
    p.add_argument("--image-size", type=COUNT, default=64)
    p.add_argument("--batch-size", type=COUNT, default=4)
    add_quiet(p, "no narration and no progress display; only the report")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from netparity.examples.resnet.bugs import BUGS

    if args.list_bugs:
        for name, text in BUGS.items():
            say(f"{name:12s} {text}")
        return 0
    from netparity.report.terminal import render_terminal
    from netparity.workflow.demo import run_demo

    con = console()
    bar = progress(args, con)
    try:
        r = run_demo(args.out, bug=args.bug, steps=args.steps,
                     options={"depth": args.depth, "image_size": args.image_size,
                              "batch_size": args.batch_size},
                     say=(lambda *a, **k: None) if args.quiet else con.print, progress=bar)
    finally:
        bar.done()
    render_terminal(r, console=con)
    for n in r.notes:
        con.print(n)
    return 0 if r else 1
