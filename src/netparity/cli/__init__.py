"""Command-line interface: ``netparity SUBCOMMAND ...``.

Each subcommand lives in its own module under ``netparity.cli`` and exposes
``register(subparsers) -> None``; the parser it adds sets ``func=run`` where
``run(args) -> int`` returns the exit status. Heavy imports (frameworks) happen inside ``run``.

Exit status: 0 success / agreement, 1 divergence found, 2 usage or input error (one line on
stderr, no traceback). Bugs keep their traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from netparity.cli._io import guard
from netparity.errors import NetparityError

#: subcommand modules, in the order ``--help`` lists them
COMMANDS = (
    "netparity.cli.inspect_cmd",
    "netparity.cli.export_cmd",
    "netparity.cli.run_cmd",
    "netparity.cli.align_cmd",
    "netparity.cli.compare_cmd",
    "netparity.cli.recheck_cmd",
    "netparity.cli.ckpt_cmd",
    "netparity.cli.msdump_cmd",
    "netparity.cli.step_cmd",
    "netparity.cli.demo_cmd",
    "netparity.cli.scan_cmd",
    "netparity.cli.numerics_cmd",
    "netparity.cli.perf_cmd",
    "netparity.cli.view_cmd",
    "netparity.cli.precision_cmd",
    "netparity.cli.bisect_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    from netparity.cli._common import Parser

    parser = Parser(
        prog="netparity",
        description="Find where two runs of the same network stop agreeing.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for modname in COMMANDS:
        # A listed subcommand that cannot be imported is a broken installation, not an optional
        # feature: say which one and why instead of silently offering fewer commands.
        try:
            mod = importlib.import_module(modname)
        except Exception as e:  # noqa: BLE001 - any import failure of the module is reported
            raise NetparityError(
                f"subcommand module {modname} cannot be imported "
                f"({type(e).__name__}: {e}); the installation is incomplete or broken") from e
        register = getattr(mod, "register", None)
        if not callable(register):
            raise NetparityError(f"subcommand module {modname} has no register(subparsers)")
        register(sub)
    return parser


def one_line(e: BaseException) -> str:
    """An error message as one line: characters that are not printable (newlines, and the
    record separators ``str.splitlines`` also breaks at) are shown escaped, so a name read from
    a file can neither split the message nor write control sequences to the terminal, and a
    message quoting a name of megabytes is shortened (:func:`netparity.report.terminal.safe_text`).

    Example:
        >>> one_line(ValueError("bad key '\\x1e' in\\nmap.json"))
        "bad key '\\\\x1e' in\\\\nmap.json"
    """
    from netparity.report.terminal import safe_text

    # (newlines first: safe_text keeps them; a name of megabytes is shortened there too)
    return safe_text(str(e).replace("\n", "\\n"))


class _ClosedPipeStdout:
    """``sys.stdout`` while a command runs: once the reader has gone (``netparity compare A B |
    head -1``), writes are dropped instead of raising ``BrokenPipeError`` in whatever printed
    (rich would exit with status 1; a bare ``print`` would show a traceback), so the command
    finishes and exits with its own status. Everything else is the real stream's."""

    def __init__(self, stream: Any):
        self._stream = stream
        self.closed_pipe = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def _broken(self) -> None:
        self.closed_pipe = True
        # the descriptor onto /dev/null: the interpreter's last flush and any child that
        # inherited it write nowhere instead of failing again
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)
        except (OSError, ValueError, AttributeError):
            pass

    def write(self, text: str) -> int:
        if not self.closed_pipe:
            try:
                return int(self._stream.write(text))
            except BrokenPipeError:
                self._broken()
        return len(text)

    def flush(self) -> None:
        if not self.closed_pipe:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._broken()


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command line; every subcommand's output goes through a stdout that tolerates
    a reader that went away (see :class:`_ClosedPipeStdout`)."""
    real = sys.stdout
    guard = _ClosedPipeStdout(real) if real is not None else None
    if guard is not None:
        sys.stdout = guard  # type: ignore[assignment]
    try:
        status = _main(argv)
        if guard is not None:
            guard.flush()
        return status
    finally:
        sys.stdout = real


def _main(argv: Sequence[str] | None) -> int:
    try:
        parser = build_parser()
    except NetparityError as e:
        print(f"netparity: error: {one_line(e)}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if args.version:
        from netparity.cli._common import say
        from netparity.trace.writer import netparity_version

        say(netparity_version())
        return 0
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        # every output argument checked against every input before the command runs (and so
        # before a framework is imported or a script launched): netparity.cli._io
        guard(args)
        return int(args.func(args) or 0)
    except NetparityError as e:
        print(f"netparity: error: {one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("netparity: interrupted", file=sys.stderr)
        return 130
