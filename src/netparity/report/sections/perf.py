"""Sections of a performance report (:class:`~netparity.analyzers.perf.PerfResult`) and of a
side by side (:class:`~netparity.analyzers.perf.PerfComparison`).

First screen: the verdict (findings or none), the step breakdown (steady median per phase, its
share, the first step), the findings with their advice, the hot modules; side by side: where
the candidate spends more time, per phase and per module, costliest first.

Example:
    >>> from netparity.analyzers.perf import PerfResult
    >>> verdict(PerfResult("t", "torch", [], {}, {}, [], [])).headline
    'no performance finding: t (0 step(s))'
"""

from __future__ import annotations

from typing import Any

from netparity.analyzers.perf import PHASES, PerfComparison, PerfResult
from netparity.report.format import fmt
from netparity.report.sections import Plot, Section, Table, TreeView, section


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.1f} ms"


def _mib(x: float | None) -> str:
    return "-" if x is None else f"{x / 2**20:.1f} MiB"


@section("PerfResult", "verdict")
def verdict(r: PerfResult, **_: Any) -> Section:
    """One line: the costliest finding, or none."""
    if not r.findings:
        return Section("verdict", title="Verdict", status="pass",
                       headline=f"no performance finding: {r.path} ({len(r.steps)} step(s))")
    f = r.findings[0]
    return Section("verdict", title="Verdict", status="warn",
                   headline=f"{f.kind} at {f.where}: "
                            + (_mib(f.bytes) if f.bytes is not None else
                               f"{_ms(f.seconds)} per step")
                            + (f" ({f.share:.0%} of the step)" if f.share is not None else "")
                            + (f"; {len(r.findings) - 1} more finding(s)"
                               if len(r.findings) > 1 else ""))


@section("PerfResult", "breakdown")
def breakdown(r: PerfResult, **_: Any) -> Section:
    """Steady median per phase, its share, and the first step beside it."""
    if not r.steps:
        return Section("breakdown", title="Step breakdown", headline="no steps")
    st = r.steady
    rows = [[k, _ms(st[k]), f"{r.breakdown.get(k, 0.0):.1%}", _ms(r.first_step.get(k))]
            for k in PHASES]
    rows.append(["step", _ms(st["step"]), "100%", _ms(r.first_step.get("seconds"))])
    ratio = r.first_step.get("ratio")
    return Section("breakdown", title="Step breakdown",
                   headline=f"{len(r.steps)} step(s), steady median {_ms(st['step'])}; first "
                            f"step {_ms(r.first_step.get('seconds'))}"
                            + (f" ({fmt(ratio, 2)}x)" if ratio is not None else ""),
                   blocks=[Table("phases (steady = all steps but the first)",
                                 ["phase", "steady median", "share", "first step"], rows,
                                 numeric=("steady median", "share", "first step")),
                           Plot("seconds per phase, each step",
                                [(k, [float(x["step"]) for x in r.steps],
                                  [float(x[k]) for x in r.steps]) for k in PHASES],
                                x_label="step", y_label="seconds", stacked=True)])


@section("PerfResult", "findings")
def findings(r: PerfResult, **_: Any) -> Section | None:
    """Each finding with its evidence and advice, costliest first."""
    if not r.findings:
        return None
    rows = [[f.kind, f.where, _mib(f.bytes) if f.bytes is not None else _ms(f.seconds),
             "" if f.share is None else f"{f.share:.0%}", f.evidence, f.advice]
            for f in r.findings]
    return Section("findings", title="Findings", status="warn",
                   headline=f"{len(r.findings)} finding(s)",
                   blocks=[Table("findings (seconds per steady step)",
                                 ["kind", "where", "per step", "share", "evidence", "advice"],
                                 rows, status=["warn"] * len(rows), mono=("where",),
                                 wrap=("evidence", "advice"))])


@section("PerfResult", "view")
def view(r: PerfResult, **_: Any) -> Section | None:
    """Time per module on the module tree, coloured by share of the step (HTML only)."""
    if not r.modules or not r.steps:
        return None
    from netparity.report.tree import perf_tree

    return Section("view", "Network view: time per module", only=("html",),
                   blocks=[TreeView(lambda: perf_tree(r))])


@section("PerfResult", "modules")
def modules(r: PerfResult, top: int = 10, **_: Any) -> Section | None:
    """The modules with the most forward self time per steady step."""
    if not r.modules:
        return None
    fwd = r.steady["forward"]
    bwd = any(m.backward_self is not None for m in r.modules)
    mem = any(m.mem_rise is not None for m in r.modules)
    cols = ["module", "class", "self", "total", "of forward", "calls"]
    if bwd:
        cols += ["backward self", "backward"]
    if mem:
        cols += ["memory rise"]
    rows = []
    for m in r.modules[:top]:
        row = [m.module or "(root)", m.cls, _ms(m.self_time), _ms(m.total),
               f"{m.self_time / fwd:.0%}" if fwd > 0 else "", fmt(m.calls)]
        if bwd:
            row += [_ms(m.backward_self), _ms(m.backward)]
        if mem:
            row += [_mib(m.mem_rise)]
        rows.append(row)
    return Section("modules", title="Hot modules",
                   headline=f"top {len(rows)} of {len(r.modules)} modules by forward self time"
                            + ("; backward per module from autograd-node hooks" if bwd else "")
                            + ("; memory rise: the forward's peak above the module's start"
                               if mem else ""),
                   blocks=[Table("modules (median per steady step; memory: highest)",
                                 cols, rows, mono=("module",),
                                 numeric=("self", "total", "calls", "backward self", "backward",
                                          "memory rise"))])


@section("PerfResult", "ops")
def ops(r: PerfResult, top: int = 10, **_: Any) -> Section | None:
    """Profiler traces: the ops with the most self time per steady step, with dtypes, shapes."""
    if not r.ops:
        return None
    rows = [[o.op, o.dtypes, o.shapes, _ms(o.self_time), _ms(o.total), fmt(o.calls),
             o.conversion] for o in r.ops[:top]]
    return Section("ops", title="Hot ops",
                   headline=f"top {len(rows)} of {len(r.ops)} ops (name, dtypes, shapes) by "
                            f"self time",
                   blocks=[Table("ops (per steady step; profiler trace)",
                                 ["op", "dtypes", "shapes", "self", "total", "calls",
                                  "conversion"], rows, mono=("op", "shapes"),
                                 numeric=("self", "total", "calls"))])


@section("PerfResult", "conversions")
def conversions(r: PerfResult, **_: Any) -> Section | None:
    """Profiler traces: casts, copies and layout transforms per step."""
    cv = r.conversions
    if not cv:
        return None
    rows = [[o["kind"], o["op"], o["dtypes"], fmt(o["count"]), _ms(o["seconds"])]
            for o in cv.get("ops", [])[:10]]
    per = cv.get("per_step", {})
    return Section("conversions", title="Conversion ops",
                   headline=f"{fmt(cv.get('count'))} per step, {_ms(cv.get('seconds'))} ("
                            + ", ".join(f"{k} {fmt(v['count'])}" for k, v in per.items())
                            + ")",
                   blocks=[Table("conversion ops per steady step (outermost calls)",
                                 ["kind", "op", "input dtypes", "count", "time"], rows,
                                 mono=("op",), numeric=("count", "time"))] if rows else [])


@section("PerfResult", "memory")
def memory(r: PerfResult, **_: Any) -> Section | None:
    """Peak allocated bytes per phase (profiler memory events)."""
    peaks = (r.memory or {}).get("peak_allocated")
    if not peaks:
        return None
    phases = ("forward", "backward", "optimizer", "step")
    rows = [[dev, *[fmt(d.get(p, 0) / 2**20, 4) + " MiB" if p in d else "-" for p in phases]]
            for dev, d in peaks.items()]
    blocks: list[Any] = [Table("peak allocated", ["device", *phases], rows)]
    mods = sorted((m for m in r.modules if m.mem_rise is not None and m.module),
                  key=lambda m: -(m.mem_rise or 0))[:10]
    if mods:
        blocks.append(Table("modules: forward peak above the module's start (highest over the "
                            "steps read)", ["module", "class", "rise", "peak"],
                            [[m.module, m.cls, _mib(m.mem_rise), _mib(m.mem_peak)]
                             for m in mods], mono=("module",), numeric=("rise", "peak")))
    return Section("memory", title="Memory per phase and per module",
                   headline=f"peak allocated per phase ({r.memory.get('source', '')})"
                            + (f"; top module {mods[0].module} +{_mib(mods[0].mem_rise)}"
                               if mods else ""),
                   blocks=blocks)


@section("PerfResult", "device")
def device(r: PerfResult, **_: Any) -> Section | None:
    """Profiler traces with device events: busy and idle time per device, and what the host
    did while the device idled."""
    devs = (r.device or {}).get("devices")
    if not devs:
        return None
    step = r.steady["step"]
    rows = [[name, _ms(d["busy"]), _ms(d["idle"]), f"{d['idle'] / step:.0%}" if step > 0
             else "", fmt(d["gaps"]), _ms(d["longest_gap"]),
             *[_ms(d["idle_by_host"].get(c, 0.0)) for c in ("data", "sync", "host", "none")]]
            for name, d in devs.items()]
    lat = r.device.get("launch_delay_median")
    return Section("device", title="Device activity",
                   headline=f"{len(devs)} device(s); median launch-to-kernel delay "
                            + ("-" if lat is None else f"{lat * 1e6:.0f} us"),
                   blocks=[Table("per steady step (device events inside the host's step "
                                 "window); idle split by what the host thread was doing",
                                 ["device", "busy", "idle", "idle share", "gaps",
                                  "longest gap", "idle: data", "idle: sync",
                                  "idle: host ops", "idle: untraced"], rows,
                                 numeric=("busy", "idle", "gaps", "longest gap"))])


@section("PerfComparison", "verdict")
def side_verdict(c: PerfComparison, **_: Any) -> Section:
    """The slowdown and the costliest extra."""
    slow = c.slower
    s = f"candidate {fmt(c.slowdown, 3)}x the reference's steady step"
    if not slow:
        return Section("verdict", title="Verdict", status="pass",
                       headline=s + "; it is nowhere slower")
    w = slow[0]
    return Section("verdict", title="Verdict", status="warn",
                   headline=f"{s}; costliest extra: {w['what']} {w['name'] or '(root)'} "
                            f"+{_ms(w['extra'])} per step")


@section("PerfComparison", "phases")
def side_phases(c: PerfComparison, **_: Any) -> Section:
    """Per phase: steady medians of both runs and the candidate's extra seconds."""
    rows = [[p["name"], _ms(p["ref"]), _ms(p["cand"]), _ms(p["extra"]), fmt(p["ratio"], 3)]
            for p in c.phases]
    order = [p for p in PHASES]
    bars = Plot("steady step, median seconds per phase",
                [(k, [0.0, 1.0], [c.ref.steady[k], c.cand.steady[k]]) for k in order],
                labels=["reference", "candidate"], y_label="seconds", stacked=True, height=240)
    return Section("phases", title="Phases side by side",
                   headline=f"reference {_ms(c.ref.steady['step'])}, candidate "
                            f"{_ms(c.cand.steady['step'])} per steady step",
                   blocks=[bars, Table("phases (extra = candidate - reference)",
                                 ["phase", "reference", "candidate", "extra", "ratio"], rows,
                                 status=["warn" if p["extra"] > 0 else "" for p in c.phases],
                                 numeric=("reference", "candidate", "extra", "ratio"))])


@section("PerfComparison", "modules")
def side_modules(c: PerfComparison, top: int = 10, **_: Any) -> Section | None:
    """Per module (self time), costliest extra first; modules of one side only are marked."""
    if not c.modules:
        return None
    rows = [[m["name"] or "(root)", m["cand_name"] if m["cand_name"] != m["name"] else "",
             m["cls"], _ms(m["ref"]), _ms(m["cand"]), _ms(m["extra"]), _ms(m.get("ref_bwd")),
             _ms(m.get("cand_bwd")), _ms(m.get("extra_bwd")),
             {"cand": "candidate only", "ref": "reference only"}.get(m["only"], "")]
            for m in c.modules[:top]]
    return Section("modules", title="Modules side by side",
                   headline=f"{sum(1 for m in c.modules if m['extra'] > 0)} module(s) slower in "
                            f"the candidate",
                   blocks=[Table("modules (self time per steady step: forward, then backward "
                                 "where both runs measured it)",
                                 ["module", "candidate name", "class", "reference", "candidate",
                                  "extra", "ref backward", "cand backward", "extra backward",
                                  "note"], rows, mono=("module", "candidate name"),
                                 status=["warn" if m["extra"] > 0 or (m.get("extra_bwd") or 0) > 0
                                         else "" for m in c.modules[:top]],
                                 numeric=("reference", "candidate", "extra", "ref backward",
                                          "cand backward", "extra backward"))])


@section("PerfComparison", "classes")
def side_classes(c: PerfComparison, **_: Any) -> Section | None:
    """Profiler traces on both sides: self time and calls per step per op class, the
    candidate's extra first."""
    if not c.classes:
        return None
    rows = [[o["name"], _ms(o["ref"]), _ms(o["cand"]), _ms(o["extra"]), fmt(o["ref_calls"]),
             fmt(o["cand_calls"])] for o in c.classes]
    top = c.classes[0]
    return Section("classes", title="Op classes side by side",
                   headline=f"{top['name']}: {_ms(top['extra'])} more per step in the candidate"
                   if top["extra"] > 0 else "no op class costs the candidate more",
                   blocks=[Table("op classes (self time per steady step)",
                                 ["class", "reference", "candidate", "extra", "ref calls",
                                  "cand calls"], rows,
                                 status=["warn" if o["extra"] > 0 else "" for o in c.classes],
                                 numeric=("reference", "candidate", "extra", "ref calls",
                                          "cand calls"))])


@section("PerfComparison", "ops")
def side_ops(c: PerfComparison, top: int = 10, **_: Any) -> Section | None:
    """Profiler traces: per op name, self time and calls per step, costliest extra first."""
    if not c.ops:
        return None
    rows = [[o["name"], _ms(o["ref"]), _ms(o["cand"]), _ms(o["extra"]), fmt(o["ref_calls"]),
             fmt(o["cand_calls"])] for o in c.ops[:top]]
    return Section("ops", title="Ops side by side",
                   headline=f"conversion ops per step: reference "
                            f"{fmt(c.ref.conversions.get('count'))}, candidate "
                            f"{fmt(c.cand.conversions.get('count'))}",
                   blocks=[Table("ops (self time per steady step)",
                                 ["op", "reference", "candidate", "extra", "ref calls",
                                  "cand calls"], rows, mono=("op",),
                                 status=["warn" if o["extra"] > 0 else "" for o in c.ops[:top]],
                                 numeric=("reference", "candidate", "extra", "ref calls",
                                          "cand calls"))])


@section("PerfComparison", "findings")
def side_findings(c: PerfComparison, **_: Any) -> list[Section]:
    """The candidate's own findings."""
    s = findings(c.cand)
    if not isinstance(s, Section):
        return []
    s.title = "Candidate findings"
    return [s]
