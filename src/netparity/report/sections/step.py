"""Sections of a one-step parity diagnosis (:class:`~netparity.analyzers.step.StepResult`).

The phase table with the verdict, the culprit's evidence, the loss (and learning-rate) curves,
where the files are, then -- in the HTML page -- every section of the step-0 comparison.

Example:
    >>> from netparity.analyzers.step import Phase, StepResult
    >>> r = StepResult([Phase("setup")], {}, {}, {}, {}, "out")
    >>> headline(r)
    'PASS: one training step and 0 more agree in every phase'
"""

from __future__ import annotations

import dataclasses
from typing import Any

from netparity.analyzers.step import StepResult
from netparity.report.format import fmt
from netparity.report.sections import (
    OUTPUTS,
    Plot,
    Section,
    Table,
    Text,
    TreeView,
    section,
    sections_for,
)

MARK = {"pass": "ok", "fail": "DIVERGES", "warn": "warn", "skipped": "-"}


def headline(r: StepResult) -> str:
    """PASS, or the first diverging phase, where and at which step."""
    f = r.first
    if f is None:
        warns = [p.name for p in r.phases if p.status == "warn"]
        return (f"PASS: one training step and {max(len(r.losses.get('ref', [])) - 1, 0)} more "
                "agree" + (f" (warning: {', '.join(warns)})" if warns else " in every phase"))
    where = f" at {f.where}" if f.where else ""
    step = f" (step {f.step})" if f.step is not None else ""
    return f"FAIL: first divergence in the {f.name.upper()} phase{where}{step}"


def _evidence(r: StepResult) -> list[str]:
    """The first failing phase's evidence, in a few lines."""
    f = r.first
    if f is None:
        return []
    ev = f.evidence
    lines = []
    m = ev.get("metrics") or {}
    keys = [k for k in ("max_abs", "max_rel", "rmse", "cosine", "frac_within", "basis") if k in m]
    if keys:
        lines.append("  evidence: " + ", ".join(f"{k}={fmt(m[k], 4)}" for k in keys))
    if ev.get("source"):
        lines.append(f"  source: {ev['source']}")
    if ev.get("update_ratio"):
        u = ev["update_ratio"]
        lines.append(f"  update ratio cand/ref: median {fmt(u['median_ratio'], 4)} over "
                     f"{u['params']} parameters (uniform: {u['uniform']})")
    return lines


@section("StepResult", "phases")
def phases(r: StepResult, **_: Any) -> Section:
    """The verdict, the two sides, one row per phase, the culprit's evidence."""
    st = "pass" if r.first is None else "fail"
    table = Table(title="", columns=["phase", "verdict", "where", "what netparity found"],
                  rows=[[p.name, MARK[p.status], p.where, p.summary] for p in r.phases],
                  status=[p.status for p in r.phases], id="phases", mono=("where",),
                  wrap=("what netparity found",))
    return Section("phases", title="One-step parity", headline=headline(r), status=st,
                   anchor="step-verdict",
                   rows=[("reference", r.ref.get("description") or r.ref.get("spec")),
                         ("candidate", r.cand.get("description") or r.cand.get("spec"))],
                   blocks=[table, Text(_evidence(r), only=("terminal", "json"))])


@section("StepResult", "view")
def view(r: StepResult, **_: Any) -> Section | None:
    """The network view of step 0, right under the phase table, opened on the step's first
    divergence when it is a module of the tree (HTML only)."""
    if r.compare_step0 is None or not (r.compare_step0.calls or r.compare_step0.params):
        return None
    from netparity.report.tree import compare_tree, focus, overlay_replay

    def build() -> dict[str, Any]:
        assert r.compare_step0 is not None
        model = compare_tree(r.compare_step0)
        for ph in r.phases:  # replay decides who introduced a difference
            entries = (ph.evidence or {}).get("replay")
            if isinstance(entries, list) and ph.name in ("forward", "backward"):
                overlay_replay(model, [e for e in entries if isinstance(e, dict)])
        f = r.first
        if f is not None and f.where:
            focus(model, f.where, phase=f.name, step=f.step)
        return model

    return Section("view", "Network view (step 0): both module trees, aligned",
                   blocks=[TreeView(build)], only=("html",))


@section("StepResult", "numerics")
def numerics(r: StepResult, **_: Any) -> Section | None:
    """Each side's numerics verdict (``netparity numerics``): healthy, or its problems and
    where the first NaN/Inf came from -- a divergence may start there."""
    if not r.numerics:
        return None
    names = {"ref": "reference", "cand": "candidate"}
    rows, lines, bad = [], [], False
    for side, n in r.numerics.items():
        if n:
            rows.append((names.get(side, side), "healthy"))
            continue
        bad = True
        rows.append((names.get(side, side), "; ".join(n.problems)))
        o = n.first_nonfinite
        if o is not None:
            lines.append(f"{names.get(side, side)}: NaN/Inf {o.verdict} at {o.where} "
                         f"({o.direction}, step {o.step})" + (f" at {o.source}" if o.source
                                                               else "")
                         + (f": {o.cause}" if o.cause else ""))
    same = bad and len({r for _, r in rows}) == 1 and len(rows) > 1
    head = ("numerics: " + (
        "the same training-health findings in both runs (the reference's own training shows "
        "them: not a porting difference; netparity numerics TRACE for the full report)"
        if same and not lines else
        "problems found (netparity numerics TRACE for the full report)"
        if bad else "both runs healthy (no NaN/Inf, loss scale and updates in order)"))
    blocks: list[Any] = [Text(lines)] if lines else []
    return Section("numerics", title="Numerics", headline=head,
                   status="warn" if bad and not same else "pass", rows=rows, blocks=blocks)


@section("StepResult", "replay")
def replay(r: StepResult, **_: Any) -> list[Section]:
    """Local vs accumulated error of the replayed modules (culprits by replay), in execution
    order: a module that only carries an upstream difference reproduces the reference on its
    inputs; the culprit does not."""
    out = []
    for ph in r.phases:
        rows = ph.evidence.get("replay")
        if ph.name not in ("forward", "backward") or not rows:
            continue
        status = ["fail" if o["verdict"] == "introduced" else
                  "pass" if o["verdict"] == "reproduces" else "skipped" for o in rows]
        # the reasons (a sentence each) go under the table as numbered notes: inline, they
        # squeezed the verdict column to a few characters beside long module names
        reasons: list[str] = []
        verdicts = []
        for o in rows:
            v = o["verdict"]
            if o["reason"]:
                reasons.append(f"({len(reasons) + 1}) {o['module'] or '<root>'}: {o['reason']}")
                v += f" ({len(reasons)})"
            verdicts.append(v)
        table = Table(title="", columns=["module", "candidate", "accumulated",
                                         "local (replay)", "noise bound", "verdict"],
                      rows=[[o["module"] or "<root>", o["cand_module"] or "<root>",
                             o["accumulated"], o["local"], o["bound"], v]
                            for o, v in zip(rows, verdicts)],
                      status=status, id=f"replay-{ph.name}", mono=("module", "candidate"),
                      numeric=("accumulated", "local (replay)", "noise bound"),
                      wrap=("verdict",))
        fed = "inputs" if ph.name == "forward" else "inputs and output gradients"
        note = Text([f"{ph.name}: normwise relative errors, accumulated in the run vs the "
                     "module's own (local) error on the reference's tensors"], style="muted")
        blocks: list[Any] = [note, table] + ([Text(reasons, style="muted")] if reasons else [])
        # a phase that replay cleared (or that passed anyway) keeps its table out of the
        # terminal's first screen: the evidence stays in the JSON and HTML reports
        quiet = ph.status == "pass"
        out.append(Section(f"replay-{ph.name}",
                           title=f"Replay ({ph.name}): each module fed the reference's {fed}",
                           blocks=blocks,
                           only=tuple(o for o in OUTPUTS if o != "terminal") if quiet
                           else OUTPUTS))
    return out


@section("StepResult", "optimizer-replay")
def optimizer_replay(r: StepResult, **_: Any) -> Section | None:
    """How the updates were judged by optimizer replay: which steps, the form each side's
    optimizer was given the reference's gradients in, the largest difference against the noise,
    the cost. Absent when the optimizers were not replayed."""
    upd = next((p for p in r.phases if p.name == "update"), None)
    rep = upd.evidence.get("optimizer_replay") if upd is not None else None
    if upd is None or rep is None:
        return None
    if isinstance(rep, str):  # not replayed, and why
        return Section("optimizer-replay", title="Optimizer replay",
                       blocks=[Text([f"not replayed: {rep}"], style="muted")])
    later = next((p for p in r.phases if p.name == "later-steps"), None)
    steps = [0, *((later.evidence.get("optimizer_replay_steps") or [])
                  if later is not None else [])]
    g = rep.get("gradients") or {}
    lines = [f"steps {', '.join(map(str, steps))}: both optimizers stepped from the same state "
             f"on the reference's gradients ({rep['params']} parameters at step 0)"]
    if g:
        lines.append(f"  reference's optimizer given: {g.get('reference')}")
        lines.append(f"  candidate's optimizer given: {g.get('candidate')}")
    lines.append(f"  step 0: largest update difference {fmt(rep['largest_rel_err'], 3)}, "
                 f"largest replay noise {fmt(rep['largest_noise'], 3)} (normwise, relative)")
    if rep.get("cand_note"):
        lines.append(f"  note: {rep['cand_note']}")
    if "seconds" in rep:
        lines.append(f"  cost: {rep['seconds']} s ({rep.get('cpu_seconds', '?')} s CPU)")
    return Section("optimizer-replay", title="Optimizer replay", blocks=[Text(lines)])


@section("StepResult", "losses")
def losses(r: StepResult, **_: Any) -> Section | None:
    """Loss per step (and learning rate per step) on both sides."""
    lr, lc = r.losses.get("ref", []), r.losses.get("cand", [])
    if not lr:
        return None
    # "cand" is the candidate with every step started from the reference's state; the
    # free-running candidate and the reference's last-bit noise run show the drift (if run)
    lines = ["loss  ref: " + "  ".join(f"{x:.6g}" for x in lr),
             "     cand: " + "  ".join(f"{x:.6g}" for x in lc)
             + ("   (each step from the reference's state)" if len(lc) > 1 else "")]
    series = [("reference", [float(i) for i in range(len(lr))], list(lr)),
              ("candidate (synced)" if len(lc) > 1 else "candidate",
               [float(i) for i in range(len(lc))], list(lc))]
    for key, label, short in (("cand_free", "candidate (free)", "cand, free"),
                              ("ref_noise", "reference (noise)", "ref, noise")):
        ys = r.losses.get(key)
        if ys:
            lines.append(f"{short:>10}: " + "  ".join(f"{x:.6g}" for x in ys))
            series.append((label, [float(i) for i in range(len(ys))], list(ys)))
    blocks: list[Any] = [Text(lines, only=("terminal",)),
                         Plot(title="loss per step", x_label="step", y_label="loss",
                              series=series)]
    lr_ref, lr_cand = r.lr.get("ref"), r.lr.get("cand")
    if lr_ref and lr_cand:
        blocks.append(Plot(title="learning rate per step", x_label="step", height=200,
                           series=[("reference", [float(i) for i in range(len(lr_ref))], lr_ref),
                                   ("candidate", [float(i) for i in range(len(lr_cand))],
                                    lr_cand)]))
    return Section("losses", title="Loss curves", blocks=blocks)


@section("StepResult", "files")
def files(r: StepResult, **_: Any) -> Section:
    """Where the traces and reports are (terminal)."""
    return Section("files", blocks=[Text([f"traces and reports in {r.out_dir}  "
                                          f"({r.seconds:.1f} s)"])], only=("terminal",))


@section("StepResult", "detail")
def detail(r: StepResult, **options: Any) -> list[Section]:
    """The step-0 comparison, every section of it (HTML page only: its JSON is its own file)."""
    if r.compare_step0 is None:
        return []
    head = Section("detail", title="Step 0 in detail", only=("html",))
    return [head] + [dataclasses.replace(s, only=("html",))
                     for s in sections_for(r.compare_step0, **options)
                     if s.key != "view"]  # shown under the phase table
