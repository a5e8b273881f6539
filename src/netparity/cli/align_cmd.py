"""``netparity align REF CAND``: pair the calls of two traces and show what is left over."""

from __future__ import annotations

import argparse

from netparity.cli._common import INDEX, add_json_out, console
from netparity.cli._io import add_input, add_output
from netparity.report.json_report import write_json

SHOW = 5


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("align", help="pair module/op calls of two traces (1:1 and N:M groups)")
    add_input(p, "ref", kind="trace", help="reference trace directory")
    add_input(p, "cand", kind="trace", help="candidate trace directory")
    p.add_argument("--level", choices=("module", "op", "both"), default="module",
                   help="which calls to pair (default: module)")
    p.add_argument("--steps", help="steps to align, e.g. 0 or 0,2-4 (default: all)")
    p.add_argument("--rank", type=INDEX, default=None,
                   help="rank of both traces (default 0; naming it narrows the coverage check)")
    p.add_argument("--direction", choices=("forward", "backward", "update"),
                   help="only this direction (default: all)")
    add_input(p, "--mapping", metavar="FILE",
              help="YAML/JSON mapping that overrides the automatic one")
    add_output(p, "--emit-mapping", metavar="FILE",
                   help="write the mapping found (YAML for .yaml/.yml, else JSON) to correct and pass back")
    add_json_out(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.text import Text

    from netparity.align import align_traces, load_mapping, save_mapping
    from netparity.align.reading import check_rank
    from netparity.cli._common import check_traces, close_traces, parse_steps, span
    from netparity.compare.coverage import coverage
    from netparity.errors import UsageError

    steps = parse_steps(args.steps) if args.steps else None
    mapping = load_mapping(args.mapping) if args.mapping else None
    traces = check_traces(args.ref, args.cand)
    ref, cand = traces
    try:
        if steps is not None:  # naming steps neither trace holds would align nothing
            have = set(ref.steps()) & set(cand.steps())
            if not have.intersection(steps):
                raise UsageError(f"--steps {args.steps}: no such step in both traces (they "
                                 f"share steps {span(sorted(have))})")
        rank = args.rank if args.rank is not None else 0
        check_rank(ref, rank)
        check_rank(cand, rank)
        # what each side holds (index only): nothing on one side is nothing to align (exit 2),
        # a gap is said first and the exit status is 1 (as compare's INCOMPLETE)
        cov = coverage(ref, cand, rank=rank, rank_given=args.rank is not None,
                       level=args.level, steps=steps,
                       directions=[args.direction] if args.direction else None)
        for side, path in (("ref", args.ref), ("cand", args.cand)):
            if not cov[side]["steps"]:
                raise UsageError(f"nothing to align: {path} holds no {args.level}-level, "
                                 "param, grad or loss records"
                                 + (f" at step(s) {args.steps}" if steps else "")
                                 + (f" ({args.direction})" if args.direction else ""))
        al = align_traces(ref, cand, level=args.level, step=steps, rank=rank,
                          direction=args.direction, mapping=mapping)
        fws = (ref.framework, cand.framework)
    finally:
        close_traces(traces)
    if args.emit_mapping:
        save_mapping(al.to_mapping(), args.emit_mapping)
    gaps = cov["incomplete"]
    status = 1 if gaps else 0
    if args.json:
        write_json({**al.to_json(), "incomplete": gaps, "coverage": cov}, args.json)
        if args.json == "-":
            return status
    con = console()
    for g in gaps:
        con.print(Text.assemble(("INCOMPLETE:", "bold yellow"), f" {g}"))
    s = al.summary()
    methods: dict[str, int] = {}
    for m in al.matches:
        methods[m.method] = methods.get(m.method, 0) + 1
    con.print(Text.assemble(("align", "bold"), f" {args.ref} ({fws[0]}) <-> {args.cand} "
                            f"({fws[1]})  level={args.level}"))
    con.print(f"matched {s['matched']}  groups {s['groups']}  unmatched ref {s['unmatched_ref']}  "
              f"unmatched cand {s['unmatched_cand']}   by method: "
              + (", ".join(f"{k}={v}" for k, v in sorted(methods.items())) or "-"))
    renamed = [(r, c) for r, c in al.module_map.items() if r != c]
    if renamed:
        con.print(f"modules renamed: {len(renamed)}  e.g. "
                  + ", ".join(f"{r or '<root>'} -> {c or '<root>'}" for r, c in renamed[:SHOW]))
    for g in al.groups[:SHOW]:
        con.print(f"  group  {' + '.join(c.name for c in g.ref)}  <->  "
                  f"{' + '.join(c.name for c in g.cand)}")
    if len(al.groups) > SHOW:
        con.print(f"  ... {len(al.groups) - SHOW} more groups")
    for label, calls in (("ref", al.unmatched_ref), ("cand", al.unmatched_cand)):
        if calls:
            names = ", ".join(f"{c.name} ({c.direction} step {c.step})" for c in calls[:SHOW])
            more = f" ... +{len(calls) - SHOW}" if len(calls) > SHOW else ""
            con.print(Text.assemble((f"unmatched {label}:", "yellow"), f" {names}{more}"))
    con.print(f"params/grads/loss paired {s['params']}  unmatched ref {s['unmatched_params_ref']}  "
              f"unmatched cand {s['unmatched_params_cand']}")
    for label, recs in (("ref", al.unmatched_params_ref), ("cand", al.unmatched_params_cand)):
        if recs:
            names = ", ".join(f"{r.kind}:{r.module or r.op}" for r in recs[:SHOW])
            more = f" ... +{len(recs) - SHOW}" if len(recs) > SHOW else ""
            con.print(Text.assemble((f"unmatched {label} params:", "yellow"), f" {names}{more}"))
    if args.emit_mapping:
        con.print(f"mapping written to {args.emit_mapping}")
    return status
