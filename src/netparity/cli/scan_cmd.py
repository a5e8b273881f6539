"""``netparity scan``: what porting a PyTorch script to MindSpore takes, before porting.

Example:
    netparity scan train.py model/ --to mindspore --json scan.json --html scan.html
    netparity scan --run -- python train.py --epochs 1

Exit status: 0 nothing blocks the port, 1 something blocks it (an API with no MindSpore
counterpart on the device and no composition to write, or an executed aten op with no primitive;
``torch.cuda.is_available`` and other APIs with a suggested composition do not block),
2 bad input (unreadable file, syntax error: one line with the file and line).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from netparity.cli._io import add_input, add_output
from netparity.errors import UsageError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "scan",
        help="list the PyTorch APIs a script uses and their MindSpore counterparts (static)",
        description="Parse PyTorch scripts (never import or run them), list every PyTorch API "
        "they use with file and line, and say for each whether MindSpore has a counterpart "
        "(mapped), has none (missing, with a suggested composition) or has one that changes the "
        "numbers unless something is set (trap). Every counterpart is checked against the "
        "installed MindSpore: it exists, is not deprecated and runs on --device (else the one "
        "that does is given). Local modules the scripts import are scanned too. The terminal "
        "shows one row per API (count, verdict, first lines); --detail lists every line. "
        "Exit 0: nothing blocks the port; 1: something blocks it (no counterpart on the device "
        "and no composition to write, e.g. an op with no kernel; an API with a suggested "
        "composition such as torch.cuda.is_available does not block); 2: bad input.",
    )
    add_input(p, "paths", kind="path", nargs="*", metavar="PATH",
              help="script(s) or package directories")
    p.add_argument("--to", default="mindspore", choices=("mindspore",), help="target framework")
    add_output(p, "--json", metavar="FILE", help="write the findings as JSON")
    add_output(p, "--html", metavar="FILE", help="write a self-contained HTML report")
    p.add_argument("--device", choices=("cpu", "gpu", "ascend"), default=None,
                   help="the device the port will run on: counterparts are checked to run there "
                   "(default: the device the installed MindSpore runs)")
    p.add_argument("--detail", action="store_true",
                   help="one row per line of code instead of one per API")
    p.add_argument("--no-follow", action="store_true",
                   help="scan only the files named, not the local modules they import")
    p.add_argument("--no-verify", action="store_true",
                   help="do not check the table against the installed MindSpore")
    p.add_argument("-v", "--verbose", action="store_true", help="full notes in the mapped table")
    add_input(p, "--run", kind="command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                   help="run COMMAND captured at op level (step 0) and list the aten ops it "
                   "executes; the .py files in COMMAND are scanned statically too; must come "
                   "last (netparity scan --run -- python train.py)")
    p.set_defaults(func=run)


def _scripts_in(cmd: list[str]) -> list[str]:
    """The ``.py`` files named in a command, scanned statically alongside ``--run``."""
    return [a for a in cmd if a.endswith(".py") and Path(a).is_file()]


def run(args: argparse.Namespace) -> int:
    from netparity.cli._common import console
    from netparity.scan.analyze import scan_paths
    from netparity.scan.render import print_terminal, write_html, write_json

    cmd = list(args.run) if args.run is not None else None
    paths = list(args.paths)
    if cmd is not None and not cmd:
        # ``--run -- python train.py``: argparse ends options at ``--`` and hands the command to
        # the positional PATHs, so with --run the positionals are the command
        cmd, paths = paths, []
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if cmd is not None and not cmd:
        raise UsageError("--run needs a command (use: netparity scan --run -- python train.py)")
    if cmd and not paths:
        paths = _scripts_in(cmd)
    if not paths and cmd is None:
        raise UsageError("nothing to scan (use: netparity scan PATH... or --run -- COMMAND)")
    result = scan_paths(paths, to=args.to, verify=not args.no_verify, device=args.device,
                        follow=not args.no_follow)
    if cmd:
        from netparity.scan.runtime import run_coverage

        result.runtime, result.runtime_note = run_coverage(cmd, verify=not args.no_verify)
    print_terminal(result, console(), verbose=args.verbose, detail=args.detail)
    if args.json:
        write_json(result, Path(args.json))
    if args.html:
        write_html(result, Path(args.html))
    return 1 if result.has_blocking else 0
