"""``netparity run``: capture an unmodified PyTorch training script.

Example:
    netparity run -o runs/ref --level both --steps 0-2 -- python train.py --epochs 1
    netparity run -o runs/ddp -- torchrun --nproc-per-node 2 train.py
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from netparity.cli._common import INDEX
from netparity.cli._io import add_input, add_output
from netparity.errors import UsageError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "run",
        help="run a PyTorch script and capture it (no code change)",
        description="Run COMMAND with netparity capturing every PyTorch process it starts. "
        "Steps are delimited by optimizer steps; the loss is the output of a torch.nn loss "
        "module. The exit status is the command's.",
    )
    add_output(p, "-o", "--output", kind="trace", force="overwrite", required=True,
               help="trace directory to write (new, empty, or a trace with --overwrite)")
    p.add_argument("--level", choices=("module", "op", "both"), default=None,
                   help="what to record (default module; with --stop-on-nonfinite and no "
                   "--level: the light stop, which records losses only)")
    p.add_argument("--payload", choices=("stats", "tensors", "hash"), default="stats")
    p.add_argument("--steps", help="steps to capture, e.g. 0,2-4 (default: all)")
    p.add_argument("--ranks", help="ranks to capture, e.g. 0 (default: all)")
    p.add_argument("--include", action="append", help="glob on module/op/param names (repeatable)")
    p.add_argument("--exclude", action="append", help="glob to leave out (repeatable)")
    p.add_argument("--directions", default="forward,backward",
                   help="comma list of forward, backward (default: both)")
    p.add_argument("--max-bytes", type=INDEX, help="stop storing tensors after this many bytes")
    p.add_argument("--overwrite", action="store_true", help="replace an existing trace")
    p.add_argument("--stop-on-nonfinite", action="store_true",
                   help="stop at the first op whose output holds NaN/Inf (one line naming it; "
                   "its inputs saved under OUTPUT/nonfinite/); without --level it checks "
                   "module outputs and gradients only and replays the module that made one")
    p.add_argument("--profile", action="store_true",
                   help="light step timing instead of a capture (read it with netparity perf); "
                   "PyTorch and MindSpore (PyNative; GRAPH_MODE: steps and compile time) scripts")
    add_input(p, "command", kind="command", nargs=argparse.REMAINDER,
              help="-- python train.py ARGS")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from netparity.capture.policy import CapturePolicy
    from netparity.cli._common import parse_steps
    from netparity.frameworks.torch.launcher import run_captured

    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("no command given (use: netparity run -o DIR -- python train.py ...)")
    directions = tuple(d.strip() for d in args.directions.split(",") if d.strip())
    step_list, rank_list = parse_steps(args.steps), parse_steps(args.ranks, "--ranks")
    steps = set(step_list) if step_list is not None else None
    ranks = set(rank_list) if rank_list is not None else None
    # validate here so a bad flag fails before the script starts
    CapturePolicy(level=args.level or "module", payload=args.payload, steps=steps, ranks=ranks,
                  include=args.include, exclude=args.exclude, directions=directions,
                  max_bytes=args.max_bytes)
    options = {
        "level": args.level,
        "payload": args.payload,
        "steps": sorted(steps) if steps is not None else None,
        "ranks": sorted(ranks) if ranks is not None else None,
        "include": args.include,
        "exclude": args.exclude,
        "directions": list(directions),
        "max_bytes": args.max_bytes,
        "overwrite": args.overwrite,
        "stop_on_nonfinite": args.stop_on_nonfinite,
        "profile": args.profile or None,
    }
    _check_writable(Path(args.output))
    from netparity.frameworks.mindspore.autodump import run_with_graph_dump

    # MindSpore's graph-compiled kernels: its own dump, turned on and imported (OUTPUT-graph)
    return run_with_graph_dump(cmd, args.output, options, run_captured)


def _check_writable(out: Path) -> None:
    """Fail before the script starts when the trace cannot be written (an ``-o`` under a
    regular file, on a read-only disk): inside the captured process such an error could only
    disable the capture."""
    import tempfile

    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as e:
        raise UsageError(f"{out}: cannot write the trace here ({e.strerror or e})") from None
