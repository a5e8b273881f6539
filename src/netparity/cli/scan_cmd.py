"""``netparity scan``: what porting a PyTorch script to MindSpore takes, before porting.

Example:
    netparity scan train.py model/ --to mindspore --json scan.json --html scan.html
    netparity scan --run -- python train.py --epochs 1

Exit status: 0 nothing missing, 1 some API (or executed aten op) has no MindSpore counterpart,
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
        "numbers unless something is set (trap). The table is checked against the installed "
        "MindSpore. Exit 0: nothing missing, 1: something missing, 2: bad input.",
    )
    add_input(p, "paths", kind="path", nargs="*", metavar="PATH",
              help="script(s) or package directories")
    p.add_argument("--to", default="mindspore", choices=("mindspore",), help="target framework")
    add_output(p, "--json", metavar="FILE", help="write the findings as JSON")
    add_output(p, "--html", metavar="FILE", help="write a self-contained HTML report")
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
    result = scan_paths(paths, to=args.to, verify=not args.no_verify)
    if cmd:
        from netparity.scan.runtime import run_coverage

        result.runtime, result.runtime_note = run_coverage(cmd, verify=not args.no_verify)
    print_terminal(result, console(), verbose=args.verbose)
    if args.json:
        write_json(result, Path(args.json))
    if args.html:
        write_html(result, Path(args.html))
    return 1 if result.has_missing else 0
