"""Sections of a numerics report (:class:`~netparity.analyzers.numerics.NumericsResult`).

First screen: the NaN/Inf origin (or "no non-finite values"), then the float16/bfloat16 range
risk, the loss-scale history, parameters not updating and the loss explosion window.

Example:
    >>> from netparity.analyzers.numerics import NumericsResult
    >>> origin(NumericsResult("t", [0], [0])).headline
    'no non-finite values'
    >>> verdict(NumericsResult("t", [0], [0])).headline
    'HEALTHY: t (1 step(s))'
"""

from __future__ import annotations

from typing import Any

from netparity.analyzers.numerics import NumericsResult, Origin, rank_diff
from netparity.capture.nonfinite import stop_message
from netparity.report.format import fmt
from netparity.report.sections import Callout, Plot, Section, Table, Text, TreeView, section


def _where(x: Any) -> str:
    """A tensor's place: ``module / op`` for ops, the name for parameters and records."""
    if x.kind == "op":
        return f"{x.module or '(root)'} / {x.op}"
    if x.kind == "module":
        return f"{x.module or '(root)'} ({x.op})"
    return x.module or x.op or x.kind


def _origin_lines(o: Origin) -> list[str]:
    lines = [f"{o.verdict} at {o.where}  ({o.direction}, step {o.step}, rank {o.rank})"]
    if o.source:
        lines.append(f"source: {o.source}")
    if o.cause:
        lines.append(f"cause: {o.cause}")
    if o.forward_op:
        lines.append(f"belongs to forward: {o.forward_op}")
    for x in o.inputs[:4]:
        lines.append(f"input[{x['arg']}] {x['dtype']}: min {fmt(x['min'], 4, none='-')} max "
                     f"{fmt(x['max'], 4, none='-')} zeros {x['zeros']}/{x['numel']}")
    if o.chain:
        lines.append("then carried by: " + " -> ".join(o.chain))
    return lines


@section("NumericsResult", "verdict")
def verdict(r: NumericsResult, **_: Any) -> Section:
    """One line for the whole run: healthy, or its problems."""
    probs = r.problems
    unseen = ("; not seen by this trace (MindSpore graph dump): " + ", ".join(r.unseen)
              if r.unseen else "")
    if not probs:
        return Section("verdict", title="Verdict", status="warn" if unseen else "pass",
                       headline=f"HEALTHY: {r.path} ({len(r.steps)} step(s)){unseen}")
    return Section("verdict", title="Verdict", status="fail",
                   headline=f"PROBLEMS in {r.path}: " + "; ".join(probs) + unseen)


@section("NumericsResult", "origin")
def origin(r: NumericsResult, **_: Any) -> Section:
    """Where the first NaN/Inf came from (forward or backward), and the backward one too."""
    o = r.first_nonfinite
    live = r.live_stop
    live_block: list[Any] = [Callout("stopped live (stop_on_nonfinite)", [stop_message(live)],
                          name=live.get("module") or "(root)", status="fail")] if live else []
    if o is None:
        if live:
            return Section("origin", title="NaN/Inf origin", status="fail",
                           headline=f"FAIL: the run stopped at a NaN/Inf from "
                                    f"{live.get('op')} in {live.get('module') or '(root)'}",
                           blocks=live_block)
        return Section("origin", title="NaN/Inf origin", headline="no non-finite values",
                       status="pass")
    blocks: list[Any] = [Callout("first NaN/Inf", _origin_lines(o), name=o.where,
                                 detail=o.source, verdict=o.verdict, status="fail", main=True)]
    b = r.first_backward
    if b is not None:
        blocks.append(Callout("first non-finite gradient", _origin_lines(b), name=b.where,
                              detail=b.source, verdict=b.verdict, status="fail"))
    blocks += live_block
    return Section("origin", title="NaN/Inf origin", status="fail",
                   headline=f"FAIL: NaN/Inf {o.verdict} at {o.where} ({o.direction}, step "
                            f"{o.step}); {r.nonfinite_records} record(s) hold NaN/Inf",
                   blocks=blocks)


@section("NumericsResult", "view")
def view(r: NumericsResult, **_: Any) -> Section | None:
    """The run's module tree: where the NaN/Inf was made, what carried it, range risks,
    parameters not updating (HTML only)."""
    if not r.modules:
        return None
    from netparity.report.tree import numerics_tree

    return Section("view", "Network view: the run's modules", only=("html",),
                   blocks=[TreeView(lambda: numerics_tree(r, r.modules))])


@section("NumericsResult", "overflow")
def overflow(r: NumericsResult, top: int = 10, **_: Any) -> Section:
    """Float16/bfloat16 overflow and underflow risk per tensor."""
    ov = r.overflow
    lines: list[str] = []
    status = "pass"
    if ov.first_overflow is not None:
        f = ov.first_overflow
        lines.append(f"first low-precision overflow: {f.where} ({f.direction}, step {f.step})"
                     + (f" at {f.source}" if f.source else "") + (f": {f.cause}" if f.cause
                                                                   else ""))
        status = "fail"
    if ov.first_fp16_overflow is not None:
        f16 = ov.first_fp16_overflow
        lines.append(f"{ov.fp16_overflow_records} tensor(s) hold finite values beyond float16's "
                     f"65504; first: {f16.module or '(root)'} {f16.op} {f16.role} "
                     f"({f16.direction}, step {f16.step}, {f16.fp16_overflow} values, max |x| "
                     f"{fmt(f16.amax, 4)})")
        status = "warn" if status == "pass" else status
    head = (f"largest |x| is {fmt(ov.max_of_fp16, 3)}x float16's max over {ov.records} "
            "tensors" if ov.records else "no floating-point tensors")
    blocks: list[Any] = []
    if lines:
        blocks.append(Text(lines))

    def rows(rs: list[Any]) -> list[list[Any]]:
        return [[x.step, x.direction, _where(x), x.role + (f"[{x.arg}]" if x.arg else ""),
                 x.dtype, fmt(x.amax, 4), fmt(x.of_fp16_max, 3), x.fp16_overflow,
                 fmt(x.fp16_underflow, 3), fmt(x.bf16_underflow, 3)] for x in rs]

    cols = ["step", "dir", "where", "role", "dtype", "max|x|", "/fp16 max", "fp16 ovf",
            "fp16 under~", "bf16 under~"]
    if ov.top:
        blocks.append(Table("largest |x| (one row per tensor)", cols, rows(ov.top[:top]),
                            status=["warn" if x.fp16_overflow else "" for x in ov.top[:top]],
                            mono=("where",), wrap=("where",)))
    if ov.underflow:
        blocks.append(Table("would underflow in float16 (estimated share of non-zero values "
                            "below 2^-14)", cols, rows(ov.underflow[:top]), mono=("module",),
                            wrap=("module",)))
    return Section("overflow", title="Overflow and precision risk", headline=head,
                   status=status, blocks=blocks)


@section("NumericsResult", "loss_scale")
def loss_scale(r: NumericsResult, **_: Any) -> Section | None:
    """Loss-scale history: scale, overflow, skipped update per step (only when recorded)."""
    ls = r.loss_scale
    if not ls:
        return None
    rows = [[x["step"], fmt(x["scale"], 6, none="-"), "yes" if x["overflow"] else "",
             {True: "skipped", False: "applied", None: "-"}[x["skipped"]], x["first_grad"]]
            for x in ls["steps"]]
    status = "fail" if ls["warnings"] else ("warn" if ls["overflow_steps"] else "pass")
    head = (f"{ls['overflow_steps']} overflowing step(s) of {len(rows)}"
            + ("; handled by loss scaling (updates skipped)" if ls["overflow_steps"]
               and ls["handled"] and not ls["warnings"] else ""))
    xs = [float(x["step"]) for x in ls["steps"] if x["scale"] is not None]
    ys = [float(x["scale"]) for x in ls["steps"] if x["scale"] is not None]
    blocks: list[Any] = []
    if ls["warnings"]:
        blocks.append(Text(ls["warnings"]))
    blocks += [Table("loss scale per step", ["step", "scale", "overflow", "update",
                                             "first overflowing gradient"], rows,
                     status=["warn" if x["overflow"] else "" for x in ls["steps"]],
                     mono=("first overflowing gradient",)),
               Plot("loss scale", [("scale", xs, ys)], log_y=True, x_label="step")]
    return Section("loss_scale", title="Loss scale", headline=head, status=status,
                   blocks=blocks)


@section("NumericsResult", "updates")
def updates(r: NumericsResult, top: int = 10, **_: Any) -> Section | None:
    """Parameters not updating, and the update ratios."""
    if not r.updates:
        return None
    bad = [p for p in r.not_updating if p.severity == "fail"]
    status = "fail" if bad else ("warn" if r.not_updating else "pass")
    head = (f"{len(r.not_updating)} parameter(s) not updating or out of line"
            if r.not_updating else f"all {len(r.updates)} parameters update")
    blocks: list[Any] = []
    if r.not_updating:
        blocks.append(Table("not updating / out of line", ["parameter", "severity", "reason"],
                            [[p.name, p.severity, p.reason] for p in r.not_updating],
                            status=[p.severity for p in r.not_updating], mono=("parameter",),
                            wrap=("reason",)))
    rows = [[p.name, p.steps, p.grads, fmt(p.grad_norm, 3, none="-"), p.changed,
             fmt(p.ratio, 3, none="-"), "exact" if p.exact else "lower bound"]
            for p in r.updates]
    blocks.append(Table("update ratio ||dw||/||w|| (median over steps)",
                        ["parameter", "values", "grads", "max ||g||", "changed", "ratio",
                         "ratio is"], rows, status=[p.severity for p in r.updates],
                        mono=("parameter",), only=("json", "csv", "html")))
    if len(rows) > top:
        blocks.append(Text([f"{len(rows)} parameters: the full table is in the JSON/HTML "
                            "report"], style="muted", only=("terminal",)))
    else:
        blocks[-1].only = ("terminal", "json", "csv", "html")
    return Section("updates", title="Weight updates", headline=head, status=status,
                   blocks=blocks)


@section("NumericsResult", "explosion")
def explosion(r: NumericsResult, **_: Any) -> Section | None:
    """The loss explosion window: step, weights before it, first layer that blows up."""
    e = r.explosion
    if e is None:
        return None
    xs = [float(s) for s, _ in e.losses]
    ys = [v for _, v in e.losses]
    plot = Plot("loss", [("loss", xs, ys)], log_y=all(v > 0 for v in ys if v == v),
                x_label="step", y_label="loss")
    if not e.found:
        return Section("explosion", title="Loss curve", status="pass",
                       headline=f"no loss explosion over {len(e.losses)} step(s)", blocks=[plot])
    lines = [f"loss {fmt(e.loss_before, 4, none='-')} -> {fmt(e.loss_at, 4, none='-')}",
             e.lr_cause, e.update_cause, e.weights_before]
    if e.layer:
        lines.append(f"first layer blowing up in step {e.step}: {e.layer} (output norm "
                     f"x{fmt(e.layer_ratio, 3)})" + (f" at {e.layer_source}"
                                                     if e.layer_source else ""))
    if e.capture_hint:
        lines.append(e.capture_hint)
    blocks: list[Any] = [Text([ln for ln in lines if ln]), plot]
    if e.lr:
        lo = min(s for s, _ in e.losses) if e.losses else None
        blocks.append(Plot("learning rate (from the optimizer)",
                           [("lr", [float(s) for s, _ in e.lr], [v for _, v in e.lr])],
                           log_y=all(v > 0 for _, v in e.lr), x_label="step", y_label="lr"))
        near = [(s, v) for s, v in e.lr if e.step is not None and e.step - 3 <= s <= e.step]
        if near and lo is not None:
            blocks.append(Table("lr per step", ["step", "lr"],
                                [[s, fmt(v, 4)] for s, v in [e.lr[0]] + near]))
    return Section("explosion", title="Loss curve", status="fail",
                   headline=f"FAIL: loss {e.kind} at step {e.step}", blocks=blocks)


@section("NumericsResult", "ranks")
def ranks(r: NumericsResult, **_: Any) -> Section | None:
    """Parameters across ranks after each update (multi-rank traces)."""
    rc = r.ranks_consistent
    if not rc:
        return None
    f = rc["first"]
    if f is None:
        return Section("ranks", title="Ranks", status="pass",
                       headline=f"ranks {rc['ranks']} use identical gradients after "
                                f"all-reduce and hold identical parameters ({rc['compared']} "
                                "comparisons)")
    return Section("ranks", title="Ranks", status="fail",
                   headline=f"FAIL: rank {f['rank']} {rank_diff(f)}",
                   blocks=[Text([f"{f['stat']}: rank {f['rank']} {fmt(f['value'], 6)} vs rank "
                                 f"0 {fmt(f['rank0'], 6)}; {rc['differing']} differing of "
                                 f"{rc['compared']}; check that every rank starts from the same "
                                 "weights and that gradients are all-reduced"])])


@section("NumericsResult", "notes")
def notes(r: NumericsResult, **_: Any) -> Section | None:
    """What the analysis could not look at."""
    if not r.notes:
        return None
    return Section("notes", title="Notes", blocks=[Text(r.notes, style="muted")])
