"""``netparity bisect REF_SPEC CAND_SPEC``: the smallest region of the candidate's model that
carries the loss difference, by switching halves of its modules back to the reference's
configuration (docs/bisect.md). Exit 0 when the losses agree, 1 when they do not (a region is
named, or the difference is spread), 2 on bad input."""

from __future__ import annotations

import argparse
from typing import Any

from netparity.cli._common import COUNT, INDEX, add_emulate, add_json_out, add_quiet


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "bisect",
        help="bisect the candidate's modules between its configuration and the reference's "
        "until the smallest region that makes the loss difference is found",
        description="Run one training step of both specs (the files `netparity step` uses) on "
        "the reference's first batch, with random layers pinned (dropout off on both sides), "
        "and measure the reference's own noise (a run with the last bit of everything "
        "jittered). When the candidate's loss differs by more, switch halves of its modules "
        "back to the reference's configuration (the reference's module computes their output: "
        "in its dtype with autocast off, or across frameworks) and re-run, descending the "
        "module tree until the smallest module that fixes the difference is found; then a run "
        "with only that module in the candidate's configuration checks it reproduces it. "
        "Exit status 0 when the losses agree, 1 when they do not, 2 on bad input.",
    )
    from netparity.cli._io import add_input

    add_input(p, "ref", kind="spec", help="reference spec: a .py file or module with "
              "build(**options)")
    add_input(p, "cand", kind="spec", help="candidate spec")
    p.add_argument("--opt", action="append", metavar="KEY=VALUE", help="option for both specs")
    p.add_argument("--ref-opt", action="append", metavar="KEY=VALUE", help="reference-only option")
    p.add_argument("--cand-opt", action="append", metavar="KEY=VALUE", help="candidate-only option")
    p.add_argument("--seed", type=INDEX, default=0)
    p.add_argument("--batch", type=INDEX, default=0,
                   help="which of the reference's batches the step runs on (default 0)")
    p.add_argument("--max-runs", type=COUNT, default=64,
                   help="the most bisection runs (default 64)")
    p.add_argument("--no-ops", action="store_true",
                   help="stop at the module: do not bisect its operator calls")
    add_emulate(p)
    add_json_out(p)
    add_quiet(p, "no line per run while the bisection runs")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from netparity.bisect import run_bisect
    from netparity.cli._common import cand_options, say
    from netparity.report.json_report import write_json
    from netparity.workflow.spec import parse_options

    quiet = args.quiet or args.json == "-"
    r = run_bisect(args.ref, args.cand, options=parse_options(args.opt),
                   ref_options=parse_options(args.ref_opt),
                   cand_options=cand_options(args), seed=args.seed, batch=args.batch,
                   max_runs=args.max_runs, on_run=None if quiet else say, ops=not args.no_ops)
    status = 0 if r else 1
    if args.json:
        write_json(r.to_json(), args.json)
        if args.json == "-":
            return status
    say(*render(r))
    return status


def render(r: Any) -> list[str]:
    """The terminal view of a :class:`netparity.bisect.BisectResult`."""
    d = r.cand_loss - r.ref_loss
    lines = [f"reference {r.ref['spec']} ({r.ref['framework']}): loss {r.ref_loss:.9g}",
             f"candidate {r.cand['spec']} ({r.cand['framework']}): loss {r.cand_loss:.9g} "
             f"(difference {d:+.3g}; the reference's noise {r.tol:.3g})"]
    pinned = len(r.pinned.get("ref", [])) + len(r.pinned.get("cand", []))
    if pinned:
        lines.append(f"pinned: {pinned} random layer(s) set to probability 0 on both sides")
    if r.verdict == "agree":
        lines.append("AGREE: the losses differ by no more than the reference's noise: nothing "
                     "to bisect")
        return lines
    lines.append("")
    lines.append(f"{'run':>4}  {'what':<10} {'regions in the reference configuration':<48} "
                 f"{'loss':>14} {'share':>7}  decision")
    for run in r.runs:
        if run.purpose == "reproduce":
            what = f"all but {', '.join(run.kept)}"
        else:
            what = ", ".join(run.switched) if len(run.switched) <= 2 else \
                f"{run.switched[0]} .. {run.switched[-1]} ({len(run.switched)})"
        lines.append(f"{run.index:>4}  {run.purpose:<10} {what[:48]:<48} {run.loss:>14.9g} "
                     f"{run.share:>7.0%}  {run.decision}")
    lines.append("")
    if r.verdict == "found":
        where = r.region + (f" (reference: {r.ref_region})" if r.ref_region not in
                            (None, r.region) else "")
        lines.append(f"FOUND: {where}: switching it back removes {r.fix_share:.0%} of the "
                     f"difference; alone in the candidate's configuration it recreates "
                     f"{r.reproduce_share:.0%}")
    elif r.verdict == "spread":
        lines.append("SPREAD: no single module fixes the difference")
    else:
        lines.append("INCOMPLETE: the run budget ran out before a region was found")
    lines += [f"note: {n}" for n in r.notes]
    lines.append(f"runs: {r.runs_total} ({len(r.runs)} bisection + the reference, its noise "
                 f"run and the candidate) for {r.modules} modules; bound "
                 f"2*log2(modules)+2 = {r.budget:.1f}")
    return lines + _render_ops(r.ops)


def _render_ops(ops: dict[str, Any]) -> list[str]:
    """The operator stage's lines: its runs, the calls found (name, index, source line)."""
    if not ops:
        return []
    if not ops.get("switchable"):
        return [ops.get("note", "operators: not switchable")]
    lines = ["", f"operators of {ops['module']}: {ops['units']} of its {ops['calls']} calls "
             "compute in low precision; halves of them run in the reference's dtype"]
    for run in ops["runs"]:
        names = run.kept if run.purpose == "reproduce" else run.switched
        what = ("all but " if run.purpose == "reproduce" else "") + \
            (", ".join(names) if len(names) <= 3 else f"{names[0]} .. {names[-1]} ({len(names)})")
        lines.append(f"{run.index:>4}  {run.purpose:<10} {what[:48]:<48} {run.loss:>14.9g} "
                     f"{run.share:>7.0%}  {run.decision}")
    for c in ops.get("found", []):
        feeds = f" -> {', '.join(c['feeds'])}" if c.get("feeds") else ""
        lines.append(f"OPERATOR: {c['name']} (call #{c['index']} in {ops['module']}, "
                     f"{'/'.join(c['dtypes'] and [d for d in c['dtypes'] if d] or ['-'])} -> "
                     f"{'/'.join(c['out']) or '-'}) at {c['where'] or '?'}{feeds}")
    if ops.get("fix_share") is not None:
        lines.append(f"operators: switching {'it' if len(ops['found']) == 1 else 'them'} back "
                     f"removes {ops['fix_share']:.0%}; alone in the candidate's dtype "
                     f"{ops['reproduce_share']:.0%} recreated")
    if ops.get("note"):
        lines.append(ops["note"])
    lines.append(f"operator runs: {len(ops['runs'])}; bound 2*log2(calls)+2 = "
                 f"{ops['budget']:.1f}")
    return lines
