"""Argument groups and small helpers shared by subcommands (Polygraphy-style).

Output goes through the report layer: :func:`netparity.report.terminal.make_console` decides
the width, :func:`netparity.report.json_report.write_json` writes JSON,
:func:`netparity.report.format.fmt` formats numbers, :mod:`netparity.report.progress` shows
progress.
"""

from __future__ import annotations

import argparse
from typing import Any

from netparity.report.progress import Progress, progress_for


def add_json_out(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", metavar="FILE", help="also write the result as JSON ('-' = stdout)")


def add_quiet(p: argparse.ArgumentParser, help: str = "no progress display") -> None:
    p.add_argument("-q", "--quiet", action="store_true", help=help)


def console() -> Any:
    """The console of every subcommand (see :func:`netparity.report.terminal.make_console`)."""
    from netparity.report.terminal import make_console

    return make_console()


def progress(args: argparse.Namespace, con: Any = None) -> Progress:
    """A progress display for long work: a rich bar on a terminal, nothing when piped or with
    ``--quiet``."""
    return progress_for(bool(getattr(args, "quiet", False)), console=con)


def guard_outputs(args: argparse.Namespace, inputs: tuple[str, ...],
                  outputs: tuple[str, ...]) -> None:
    """Refuse, before any work, an output argument that names an input or a path inside an
    input (a trace directory): ``compare --json A/manifest.json`` used to destroy trace A."""
    from netparity.outputs import check_output

    ins = [v for v in (getattr(args, n, None) for n in inputs) if v]
    for name in outputs:
        dest = getattr(args, name, None)
        if dest and dest != "-":
            check_output(dest, ins, what=f"--{name.replace('_', '-')}" if name not in
                         ("dst", "out") else "output")
