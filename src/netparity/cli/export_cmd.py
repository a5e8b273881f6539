"""``netparity export TRACE -o OUT.npz|DIR``: selected tensors to .npz or .npy files."""

from __future__ import annotations

import argparse

from netparity.cli._common import INDEX
from netparity.cli._io import add_input, add_output
from netparity.trace.schema import DIRECTIONS, KINDS


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("export", help="export captured tensors to .npz or a folder of .npy")
    add_input(p, "trace", kind="trace", help="trace directory")
    add_output(p, "-o", "--out", kind="file_or_dir", force="force", required=True,
               help="OUT.npz or a directory (a new folder appears complete, or not at all)")
    p.add_argument("--step", help="steps, e.g. 0 or 0,2-4")
    p.add_argument("--rank", type=INDEX)
    p.add_argument("--kind", action="append", choices=KINDS,
                   help="module, op, param, grad, loss, custom, data")
    p.add_argument("--direction", action="append", choices=DIRECTIONS,
                   help="forward, backward, update")
    p.add_argument("--name", help="glob on module path or op name, e.g. 'layer1.*'")
    p.add_argument("-f", "--force", action="store_true",
                   help="replace an existing OUT.npz or write into a non-empty folder")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from netparity.cli._common import check_traces, close_traces, parse_steps, say
    from netparity.errors import UsageError

    steps = parse_steps(args.step, "--step")
    traces = check_traces(args.trace)
    tr = traces[0]
    try:
        if args.rank is not None and args.rank not in tr.ranks:
            raise UsageError(f"--rank {args.rank}: {args.trace} has ranks {tr.ranks}")
        recs = tr.iter_records(step=steps, rank=args.rank,
                               kind=args.kind, direction=args.direction, name=args.name)
        n = tr.export(recs, args.out, overwrite=args.force)
    finally:
        close_traces(traces)
    if n == 0:
        raise UsageError("no captured tensor payloads match (capture with payload='tensors')")
    say(f"exported {n} tensor(s) to {args.out}")
    return 0
