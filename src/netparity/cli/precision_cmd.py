"""``netparity precision TRACE``: every captured operator against a higher-precision reference
of itself (docs/precision.md). Exit 0 when no operator loses more than its dtype must, 1 when
one does, 2 on bad input."""

from __future__ import annotations

import argparse

from netparity.cli._common import COUNT, INDEX, add_json_out
from netparity.cli._io import add_input


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "precision",
        help="per-operator precision: replay each captured op on a float64 CPU reference and "
        "name the ones that lose more than their dtype must",
        description="Replay every operator of an op-level trace captured with tensors (forward "
        "and backward) on its captured inputs on a reference backend, and measure each "
        "output's normwise error in ULP of its dtype, next to what an exact rounding to that "
        "dtype loses. An operator over its dtype's standard (float32 32 ULP, float16 and "
        "bfloat16 1 ULP: msprobe run_ut's ULP thresholds) that also loses more than the same "
        "operator on this CPU, or that computes in a dtype narrower than the run's, is named "
        "with its module, step, phase and source line. Exit status 0 when none is, 1 when one "
        "is, 2 on bad input.",
    )
    add_input(p, "trace", kind="trace", help="trace directory (level='op', payload='tensors')")
    p.add_argument("--reference", choices=("cpu-fp64", "cpu-fp32"), default="cpu-fp64",
                   help="reference backend (default cpu-fp64: float inputs widened to float64)")
    p.add_argument("--step", type=INDEX, action="append", dest="steps",
                   help="only this step (repeatable; default every captured step)")
    p.add_argument("--rank", type=INDEX, default=0, help="rank to check (default 0)")
    p.add_argument("--working-dtype", default="auto", metavar="DTYPE",
                   help="the run's working dtype: auto (its parameters'), a dtype name, or own "
                   "(judge each op in its own dtype: a mixed-precision run)")
    p.add_argument("--emulate", metavar="fp16-ops=CLASSES",
                   help="also run these operator classes in float16 on their captured inputs "
                   "(conv,pool,lstm,matmul,sort; 'fp16-ops' alone: the Ascend float16-only "
                   "list) and name those that would overflow or lose more than 4 ULP of "
                   "float16 (reported; the exit status stays the measured precision's)")
    p.add_argument("--top", type=COUNT, default=10, help="rows of the worst-ops table "
                   "(default 10)")
    add_json_out(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from netparity.cli._common import check_traces, close_traces
    from netparity.errors import UsageError
    from netparity.precision import check_precision, parse_emulate
    from netparity.report.json_report import write_json

    emulate = parse_emulate(args.emulate)
    traces = check_traces(args.trace)
    try:
        r = check_precision(traces[0], reference=args.reference, steps=args.steps,
                            rank=args.rank, working=args.working_dtype, emulate=emulate)
    finally:
        close_traces(traces)
    if not r.measured and not r.flagged:
        raise UsageError(f"{args.trace}: no operator could be measured: "
                         + (r.needed_capture() or "every op call was skipped ("
                            + "; ".join(sorted({o.reason for o in r.ops})[:3]) + ")"))
    status = 0 if r else 1
    if args.json:
        write_json(r.to_json(), args.json)
        if args.json == "-":
            return status
    _render(r, args.top)
    return status


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def _render(r: object, top: int) -> None:
    from netparity.cli._common import say
    from netparity.precision import PrecisionResult
    from netparity.precision.standards import EMULATE_RISK

    assert isinstance(r, PrecisionResult)
    c = r.counts()
    say(f"precision of {r.trace} ({r.framework}, working dtype {r.working}) "
          f"against {r.reference}: {len(r.ops)} op calls, steps {r.steps}, "
          + ", ".join(f"{v} {k}" for k, v in sorted(c.items())) + f" ({r.seconds:.1f} s)")
    for o in r.flagged:
        say(f"  {o.status.upper()}: {o.where()}: {o.reason}"
              + (f"; in float16 (--emulate): {_fmt(o.emulated)} ULP of float16"
                 if o.emulated is not None else ""))
    worst = sorted((o for o in r.ops if o.err is not None), key=lambda o: -(o.err or 0.0))
    if worst and top:
        say(f"  worst {min(top, len(worst))} (normwise error in ULP of the judged dtype; "
              "round = an exact rounding; std = the standard):")
        for o in worst[:top]:
            say(f"    {_fmt(o.err):>8} round {_fmt(o.round):>7} std {_fmt(o.standard):>4} "
                  f"{o.judged:<8} {o.where()}")
    emu = r.emulated
    if r.emulate:
        risky = [o for o in emu if o.emulated_status == "risk"]
        say(f"  --emulate: {len(emu)} op calls of {', '.join(r.emulate)} run in float16, "
              f"{len(risky)} lose more than {EMULATE_RISK:g} ULP of float16 (Inf: overflow)"
              + (f"; worst {_fmt(emu[0].emulated)} at {(emu[0].where())}"
                 if emu else ""))
        for o in risky[:top]:
            say(f"    RISK in float16: {_fmt(o.emulated)} ULP of float16 at "
                  f"{o.where()}")
    need = r.needed_capture()
    if need:
        say(f"  {need}")
    say("PASS: no operator loses more than its dtype must" if r else
          f"FAIL: {len(r.flagged)} operator call(s) lose more than their dtype must")
