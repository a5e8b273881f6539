"""``netparity recheck RESULT.json --rtol R --atol A``: re-judge a saved result, no tensors read.

What can be recomputed exactly from the saved evidence: every stats-basis and hash-basis pair;
NaN/Inf mismatches; and, for tensor pairs, any new tolerance that the saved points of the convex
"required tolerance" curve decide (``max_abs`` at rtol 0, ``min_atol`` at the old rtol,
``min_rtol`` at the old atol) -- in particular loosening either tolerance past the reported
minimum. Otherwise the verdict and the "fraction within" come from the saved 2-D error
histogram (estimates; marked as such). fp64-reference verdicts are kept as they were (the
tolerances do not enter them). Pairs judged by the cross profile's normwise rule keep it when
no tolerance is given (the normwise error is exact; a recheck without options reproduces the
saved verdicts); ``--rtol``/``--atol`` switch to the elementwise rule, as they do in
``compare``. Call origins and the first divergences are recomputed.

Exit status: 0 all pass, 1 divergence, 2 usage/input error.
"""

from __future__ import annotations

import argparse
from typing import Any

from netparity.cli._io import add_input
from netparity.cli.compare_cmd import add_output_args, add_tolerance_args


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "recheck",
        help="re-judge a saved compare result with new tolerances (no tensors read)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input(p, "result", help="JSON written by `netparity compare --json`")
    add_tolerance_args(p)
    add_output_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from netparity.analyzers.divergence import recheck
    from netparity.cli.compare_cmd import emit
    from netparity.errors import UsageError
    from netparity.report.json_report import read_json

    data = read_json(args.result)
    try:
        result = recheck(data, rtol=args.rtol, atol=args.atol)
    except (KeyError, TypeError, ValueError) as e:  # a saved result is input like any other
        raise UsageError(f"{args.result}: not a valid saved compare result "
                         f"({type(e).__name__}: {str(e)[:200]})") from None
    return emit(result, args)
