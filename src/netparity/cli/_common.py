"""Argument groups and small helpers shared by subcommands (Polygraphy-style).

Output goes through the report layer: :func:`netparity.report.terminal.make_console` decides
the width, :func:`netparity.report.json_report.write_json` writes JSON,
:func:`netparity.report.format.fmt` formats numbers, :mod:`netparity.report.progress` shows
progress.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, NoReturn

from netparity.report.progress import Progress, progress_for


class Number:
    """The ``type=`` of every numeric option: a finite number within ``[low, high]`` (``low``
    excluded with ``above=True``), so ``--factor nan`` (which silently turned off explosion
    detection) or ``--rtol inf`` (which passed everything) is a usage error, not a verdict.

    Example:
        >>> Number(1.0, above=True, what="a factor")("10")
        10.0
        >>> Number(0)("nan")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: 'nan' is not a finite number >= 0
    """

    def __init__(self, low: float = 0.0, *, high: float = math.inf, above: bool = False,
                 integer: bool = False, what: str = "") -> None:
        self.low, self.high, self.above, self.integer = low, high, above, integer
        self.kind = int if integer else float
        rng = (f"> {low:g}" if above else f">= {low:g}") + (
            f" and <= {high:g}" if math.isfinite(high) else "")
        self.__name__ = f"{'an integer' if integer else 'a finite number'} {rng}"
        self.what = what

    def __call__(self, text: str) -> float:
        try:
            v: float = int(text) if self.integer else float(text)
        except ValueError:
            v = math.nan
        ok = math.isfinite(v) and (v > self.low if self.above else v >= self.low) and (
            v <= self.high)
        if not ok:
            raise argparse.ArgumentTypeError(
                f"{text!r:.40} is not {self.__name__}" + (f" ({self.what})" if self.what else ""))
        return v

    def __repr__(self) -> str:
        return self.__name__


#: a tolerance: NaN would make every comparison false (every pair "differs"), infinity pass all
TOLERANCE = Number(0.0, what="a tolerance")
#: a count of rows or steps to show or run
COUNT = Number(1, integer=True)
#: a rank or a step index
INDEX = Number(0, integer=True)


class Parser(argparse.ArgumentParser):
    """netparity's argument parser: a bad argument is one line (``netparity: error: ...``) and
    exit status 2, like every other bad input (argparse would print its usage first)."""

    def error(self, message: str) -> NoReturn:
        from netparity.cli import one_line

        self.exit(2, f"netparity: error: {self.prog}: {one_line(ValueError(message))} "
                     f"(see {self.prog} --help)\n")


def add_json_out(p: argparse.ArgumentParser) -> None:
    from netparity.cli._io import add_output

    add_output(p, "--json", stdout=True, metavar="FILE",
               help="also write the result as JSON ('-' = stdout)")


def add_quiet(p: argparse.ArgumentParser, help: str = "no progress display") -> None:
    p.add_argument("-q", "--quiet", action="store_true", help=help)


def console() -> Any:
    """The console of every subcommand (see :func:`netparity.report.terminal.make_console`)."""
    from netparity.report.terminal import make_console

    return make_console()


def say(*lines: str) -> None:
    """Plain lines on stdout, through the console (text made safe for the terminal, see
    :func:`netparity.report.terminal.safe_text`; long lines not wrapped). Commands print
    nothing to stdout any other way."""
    con = console()
    for line in lines:
        con.print(line, soft_wrap=True)


def progress(args: argparse.Namespace, con: Any = None) -> Progress:
    """A progress display for long work: a rich bar on a terminal, nothing when piped or with
    ``--quiet``."""
    return progress_for(bool(getattr(args, "quiet", False)), console=con)


#: the most steps a range on the command line may name (a run of 10^6 steps is already far more
#: than any trace holds; ``0-99999999999`` used to build a list until memory ran out)
MAX_STEPS = 1_000_000


def parse_steps(text: str | None, flag: str = "--steps") -> list[int] | None:
    """``"0,2-4"`` -> ``[0, 2, 3, 4]`` (None stays None), validated: integers, non-negative,
    ``low-high`` with ``low <= high``, at most :data:`MAX_STEPS` steps in all.

    Example:
        >>> parse_steps("3,0-1")
        [0, 1, 3]
        >>> parse_steps("0-99999999999")
        Traceback (most recent call last):
        ...
        netparity.errors.UsageError: --steps '0-99999999999': 100000000000 steps is more than any trace holds (at most 1000000)
    """
    from netparity.errors import UsageError

    if text is None:
        return None
    total = 0
    for part in (x.strip() for x in text.split(",")):
        lo, _, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi or lo)
        except ValueError:
            raise UsageError(f"{flag} {text!r}: expected steps like 0 or 0,2-4") from None
        if a < 0:
            raise UsageError(f"{flag} {text!r}: steps are non-negative")
        if b < a:
            raise UsageError(f"{flag} {text!r}: empty range {part!r} (write low-high)")
        total += b - a + 1
        if total > MAX_STEPS:
            raise UsageError(f"{flag} {text!r}: {total} steps is more than any trace holds "
                             f"(at most {MAX_STEPS})")
    from netparity.capture.policy import parse_int_set

    return sorted(parse_int_set(text) or ())


def check_tolerance(value: float | None, flag: str) -> None:
    """A tolerance must be a finite non-negative number: NaN would make every comparison false
    (and so every pair "differ"), infinity would pass anything."""
    import math

    from netparity.errors import UsageError

    if value is not None and not (math.isfinite(value) and value >= 0):
        raise UsageError(f"{flag} {value!r}: a tolerance must be a finite number >= 0")


def span(steps: list[int]) -> str:
    """Sorted steps as a short range for messages: ``0-9``, ``3`` or ``none``."""
    if not steps:
        return "none"
    return f"{steps[0]}-{steps[-1]}" if len(steps) > 1 else str(steps[0])


def check_traces(*paths: str | None, rows: bool = True) -> list[Any]:
    """Open each trace and check every index row (:meth:`Trace.check_rows
    <netparity.trace.reader.Trace.check_rows>`) before a command reads it: a corrupt row is
    one line naming it, never a traceback from deep inside a comparison.

    Returns the open traces (None for a path not given), for the command to read and then
    close: opening a trace again would read its columnar copy's directory and count its
    index rows a second time. ``rows=False``: open only, the caller checks the rows (a
    multi-rank ``compare`` checks each rank where it is compared, in parallel)."""
    from netparity.trace import open_trace

    out: list[Any] = []
    try:
        for p in paths:
            tr = open_trace(p) if p else None
            out.append(tr)
            if tr is not None and rows:
                tr.check_rows()
    except BaseException:
        close_traces(out)
        raise
    return out


def close_traces(traces: list[Any]) -> None:
    """Close what :func:`check_traces` opened."""
    for tr in traces:
        if tr is not None:
            tr.close()


def add_emulate(p: argparse.ArgumentParser) -> None:
    """``--emulate fp16-ops=CLASSES`` of the commands that run specs (``step``, ``bisect``):
    the candidate's step with those operator classes in float16 (see :func:`cand_options`)."""
    p.add_argument("--emulate", metavar="fp16-ops=CLASSES",
                   help="run the candidate's step with these PyTorch operator classes in "
                   "float16 on the CPU (conv,pool,lstm,matmul,sort; 'fp16-ops' alone: the "
                   "Ascend float16-only list): what a float16-only device does to the loss, "
                   "and where (the same as --cand-opt emulate=fp16-ops=...)")


def cand_options(args: argparse.Namespace) -> dict[str, Any]:
    """``--cand-opt`` pairs with ``--emulate`` added as the ``emulate`` spec option (applied
    where every spec is built: :func:`netparity.workflow.spec.load_spec`)."""
    from netparity.precision import parse_emulate
    from netparity.workflow.spec import parse_options

    out = parse_options(args.cand_opt)
    if getattr(args, "emulate", None):
        parse_emulate(args.emulate)
        out["emulate"] = args.emulate
    return out
