"""Culprits by replay: is a module's *own* computation different, free of anything upstream?

Comparing two captured runs tells where their tensors differ, not who made the difference: a
module whose inputs already differ may amplify them (ill-conditioned layers do) or add its own
mistake on top, and a difference made in a container's own code between its children first
shows in a child that merely carries it. Replay answers it directly. The candidate's module is
called on the *reference's* captured inputs (converted to the candidate's framework, same
weights) and its output compared with the reference's captured output: that is the module's
*local* error. Its noise floor is measured the same way as the noise run's
(:mod:`netparity.compare.noise`): the reference's module replayed on its inputs and its own
weights moved one unit in the last place, and every layer inside it rounding one ulp off (the
largest of three such replays). A module *introduces* a divergence when its local
error exceeds ``NOISE_K`` x that noise plus a floor of a few units of the dtype's precision.

This module is the judging half (stateless, numbers in, verdicts out); the step workflow
(:mod:`netparity.workflow.replay`) owns the live models and runs the calls.

Example:
    >>> o = ReplayOutcome("k", "layer1.0.relu", "layer1.0.relu", "relu", accumulated=2e-3)
    >>> judge(o, local=1e-3, noise=1e-7, ref_dtype="float32", cand_dtype="float32")
    >>> o.verdict, o.introduced
    ('introduced', True)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from netparity.compare.noise import replay_bound
from netparity.compare.results import CallResult, CompareResult

__all__ = ["REPLAY_LIMIT", "SELF_TOLERANCE", "ReplayOutcome", "describe_factor",
           "gradient_factor", "independent_culprits", "judge", "normwise_error", "plan", "refine",
           "refine_forward", "refine_update"]

#: at most this many calls are replayed per step (each costs one forward of that module)
REPLAY_LIMIT = 16
#: a module whose replay by the reference itself misses its captured output by more than this
#: (normwise, relative) computes something the captured tensors do not determine (random
#: numbers, a non-tensor argument, hidden state): it cannot be judged by replay
SELF_TOLERANCE = 1e-3
#: a gradient factor within this (relative) of a power of two is a loss scale, exactly that power
POW2_TOLERANCE = 1e-2
#: every parameter's own factor must agree with the common one within this (relative)
FACTOR_SPREAD = 1e-2
#: a parameter takes part in the factor's check when the gradient's part of its update is at
#: least this many times the rounding of the stored parameter
FACTOR_SIGNAL = 100.0


@dataclass
class ReplayOutcome:
    """One replayed call: the candidate's local error against the reference's own noise."""

    key: str  # the CallResult key
    module: str  # reference module path
    cand_module: str
    op: str
    accumulated: float  # the call's normwise output error in the comparison (upstream included)
    direction: str = "forward"
    local: float | None = None  # candidate module on the reference's inputs vs reference output
    noise: float | None = None  # reference module, inputs/weights/inner outputs one ulp off
    bound: float | None = None
    verdict: str = ""  # "introduced" | "reproduces" | "not replayed"
    reason: str = ""
    cand_op: str = ""  # op level: the candidate's op(s), ``mul+add+...`` for an N:M group
    # backward: the gradients the call adds to the module's parameters, judged the same way
    param_local: float | None = None
    param_noise: float | None = None
    param_bound: float | None = None

    @property
    def introduced(self) -> bool:
        return self.verdict == "introduced"

    @property
    def unit(self) -> str:
        """What was replayed, in words: an ``operator`` (op-level call keys start ``op|``)
        or a ``module``."""
        return "operator" if self.key.startswith("op|") else "module"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def plan(r0: CompareResult, direction: str = "forward",
         limit: int = REPLAY_LIMIT, level: str = "module") -> list[CallResult]:
    """The calls to replay: the first step's ``level`` calls (module, or op: single calls and
    N:M groups) of ``direction`` that fail or warn, in execution order (a child finishes before its parent,
    so a container comes after the children that carried its own difference; backward runs
    from the loss back), with the module around each *introduced* call (see below). When more
    than ``limit`` are wanted, the introduced calls and the containers around them come first:
    they decide whether the phase's difference is anyone's own."""
    same = _first_step_calls(r0, direction, level)
    calls = sorted((c for c in same if c.status in ("fail", "warn")), key=lambda c: c.order)
    if level != "module":
        return calls[:limit]
    owners = _grad_owners(r0) if direction == "backward" else set()
    if owners:  # a diverging parameter gradient is judged by replaying its module's backward
        calls = sorted({id(c): c for c in (*calls, *(c for c in same if c.module in owners))}
                       .values(), key=lambda c: c.order)
    intro = [c for c in calls if c.origin == "introduced"]

    def ancestors(i: CallResult, among: list[CallResult]) -> list[CallResult]:
        return [a for a in among if a.module != i.module and _contains(a.module, i.module)]

    def depth(a: CallResult) -> int:
        return a.module.count(".") if a.module else -1

    # First the module around each introduced call (diverging or not: a ReLU called several
    # times per block cannot be replayed alone, its block can), and the outermost diverging
    # container of each: one replay of a container covers every call inside it, so a difference
    # of no one's own is cleared in a few replays. Then the introduced calls themselves (the
    # culprit, when there is one, is among them: they run before their containers), then the
    # other diverging containers, then the rest.
    parents = [max(anc, key=depth) for i in intro if (anc := ancestors(i, same))]
    if len(calls) + len(parents) <= limit:
        return sorted({id(c): c for c in (*calls, *parents)}.values(), key=lambda c: c.order)
    outer = [min(anc, key=depth) for i in intro if (anc := ancestors(i, calls))]
    inner = [a for a in calls if any(_contains(a.module, i.module) for i in intro)]
    chosen: list[CallResult] = []
    for c in (*parents, *outer, *intro, *inner, *calls):
        if len(chosen) == limit:
            break
        if all(c is not x for x in chosen):
            chosen.append(c)
    return sorted(chosen, key=lambda c: c.order)


def _first_step_calls(r0: CompareResult, direction: str, level: str) -> list[CallResult]:
    """The calls of ``direction`` and ``level`` in the comparison's first step."""
    first = min((x.step for x in r0.calls), default=0)
    return [c for c in r0.calls if c.direction == direction and c.level == level
            and c.step == first]


def _grad_owners(r0: CompareResult) -> set[str]:
    """The modules owning a parameter whose gradient fails or warns (its direct parent)."""
    from netparity.analyzers.step import module_of

    return {module_of(g.module) for g in r0.divergent_params("grad")}


def _contains(outer: str, inner: str) -> bool:
    """Module ``outer`` is ``inner`` or one of its ancestors (``""`` is the root)."""
    return outer == inner or outer == "" or inner.startswith(outer + ".")


def normwise_error(ref: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> float:
    """``||got - ref|| / ||ref||`` over all outputs together (float64); ``inf`` when the
    outputs do not correspond (count or shapes) or hold NaN where the other does not."""
    if len(ref) != len(got) or not ref:
        return float("inf")
    num = den = 0.0
    for a, b in zip(ref, got):
        a64 = np.asarray(a, np.float64).ravel()
        b64 = np.asarray(b, np.float64).ravel()
        if a64.size != b64.size:
            return float("inf")
        both = np.isfinite(a64) & np.isfinite(b64)
        if not np.array_equal(np.isfinite(a64), np.isfinite(b64)):
            return float("inf")
        d = a64[both] - b64[both]
        num += float(np.dot(d, d))
        den += float(np.dot(a64[both], a64[both]))
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return float(np.sqrt(num / den))


def judge(o: ReplayOutcome, local: float, noise: float, ref_dtype: str, cand_dtype: str) -> None:
    """Fill in ``o``: introduced when ``local`` exceeds ``NOISE_K`` x ``noise`` (scaled to the
    candidate's precision where it is coarser, as in :func:`netparity.compare.noise.calibrate`)
    plus ``FLOOR_EPS`` units of the coarser dtype's precision."""
    o.local, o.noise = local, noise
    o.bound = replay_bound(noise, ref_dtype, cand_dtype)
    o.verdict = "introduced" if local > o.bound else "reproduces"


def gradient_factor(probes: Sequence[tuple[np.ndarray, np.ndarray, float]]
                    ) -> tuple[float | None, str]:
    """The factor ``f`` by which the captured gradients exceed those the optimizer was given
    (static loss scaling undone by hand: a power of two; clipping by global norm: a factor
    above 1 shared by every parameter), from one optimizer step that is affine in the
    gradient (SGD with or without momentum and weight decay; Adam is not).

    Each probe is one parameter's ``(a, b, rounding)``: ``a`` the change the optimizer's
    update makes when fed the captured gradient instead of zero, ``b`` the change the run's
    own update made against the same zero-gradient update, ``rounding`` the normwise rounding
    of ``b`` (the stored parameter's half ulps). Then ``b = a / f`` on every parameter whose
    gradient moved it beyond its rounding. Returns ``(f, how)``; ``(None, why)`` when no
    common factor explains the updates.

    Example:
        >>> a = np.array([1.0, -2.0, 4.0])
        >>> gradient_factor([(a, a / 1024, 0.0), (2 * a, 2 * a / 1024, 0.0)])
        (1024.0, 'a loss scale of 1024 (a power of two) undone before the optimizer')
    """
    num = den = 0.0
    for a, b, _ in probes:
        num += float(np.dot(a, b))
        den += float(np.dot(a, a))
    if den == 0.0 or num <= 0.0:
        return None, "the gradients do not move the optimizer's update"
    f = den / num
    checked = 0
    for a, b, rounding in probes:
        na = float(np.linalg.norm(a))
        if na / f <= FACTOR_SIGNAL * rounding:
            continue
        checked += 1
        if float(np.linalg.norm(b - a / f)) > FACTOR_SPREAD * na / f:
            return None, (f"no common factor: the update of one parameter is not the captured "
                          f"gradient's / {f:.4g} (the optimizer is not affine in the gradient, "
                          "or the training code changes gradients unevenly)")
    if not checked:
        return None, "no parameter's update is large enough against its rounding"
    k = round(float(np.log2(f)))
    if abs(f / 2.0**k - 1.0) <= POW2_TOLERANCE:
        f = 2.0**k
    return f, describe_factor(f)


def describe_factor(f: float) -> str:
    """What a gradient factor means, in words."""
    k = round(float(np.log2(f))) if f > 0 else 0
    if f == 1.0:
        return "the captured gradients as they are"
    if f == 2.0**k:
        return f"a loss scale of {f:g} (a power of two) undone before the optimizer"
    return (f"the captured gradients / {f:.6g} (not a power of two: clipping by global norm, "
            "or a loss scale and clipping)")


def refine(phase: Any, outcomes: list[ReplayOutcome], r0: CompareResult | None = None) -> None:
    """Re-decide a phase's culprit (a :class:`netparity.analyzers.step.Phase`, forward or
    backward) from replay: the first replayed call that introduces a difference is named; the
    table of local vs accumulated errors goes into the evidence. Without a replayed culprit the
    comparison's answer stands, with a note saying what replay showed -- unless, given the
    comparison ``r0``, replay clears every call that could have started the difference
    (:func:`_explained`): then the phase passes."""
    if not outcomes:
        return
    phase.evidence["replay"] = [o.to_json() for o in outcomes]
    culprit = next((o for o in outcomes if o.introduced), None)
    replayed = [o for o in outcomes if o.verdict != "not replayed"]
    what = ("fed the reference's inputs and weights" if culprit is None
            or culprit.direction == "forward" else
            "fed the reference's inputs, weights and output gradients"
            if culprit.unit == "module" else
            "fed the reference's captured gradients and saved tensors")
    if culprit is not None:
        before = phase.where
        phase.status, phase.where, phase.step = "fail", culprit.module or "<root>", 0
        kind = "" if culprit.direction == "forward" else " backward"
        unit = culprit.unit
        theirs = f"candidate's {unit}"
        if culprit.cand_op.count("+"):
            theirs = (f"candidate's {culprit.cand_op.count('+') + 1} operators "
                      f"({culprit.cand_op}) together")
        phase.summary = (
            f"{culprit.module or '<root>'} ({culprit.op}) introduces the{kind} divergence: "
            f"{what}, the {theirs} differ{'' if culprit.cand_op.count('+') else 's'} by "
            f"{culprit.local:.3g} (its noise bound "
            f"{culprit.bound:.3g}; accumulated error there {culprit.accumulated:.3g})")
        passed = [o.module or "<root>" for o in replayed if o is not culprit
                  and outcomes.index(o) < outcomes.index(culprit)]
        if passed:
            phase.summary += (f"; {len(passed)} earlier diverging {unit}(s) reproduce the "
                              f"reference on its inputs (first: {passed[0]})")
        if before and before != phase.where:
            phase.evidence["compare_pointed_at"] = before
        phase.evidence["verdict"] = "introduced (replay)"
        others = independent_culprits(outcomes)[1:]
        if others:
            phase.evidence["also_introduced"] = [o.to_json() for o in others]
            phase.summary += ("; also introducing a difference of its own: " + ", ".join(
                f"{o.module or '<root>'} ({o.op}: {o.local:.3g} against {o.bound:.3g})"
                for o in others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5
                                        else ""))
        return
    if replayed and phase.status == "fail":
        if r0 is not None and _explained(phase, outcomes, r0):
            return
        where = ("between modules (code outside any replayed module)"
                 if replayed[0].unit == "module" else
                 "in code no replayed operator covers (an operator the capture does not see, "
                 "a group of several operators)")
        phase.summary += (f"; replay: none of the {len(replayed)} diverging "
                          f"{replayed[0].unit}(s) replayed differs beyond its noise on the "
                          f"reference's tensors -- the difference enters {where} or with the "
                          "inputs")


def independent_culprits(outcomes: list[ReplayOutcome]) -> list[ReplayOutcome]:
    """The replayed calls that introduce a difference of their own, in execution order, less
    those that contain or lie inside an earlier one (a block around a wrong LayerNorm is
    "introduced" because of it): every independent mistake replay found, first the culprit."""
    out: list[ReplayOutcome] = []
    for o in outcomes:
        if o.introduced and not any(_contains(p.module, o.module) or _contains(o.module, p.module)
                                    for p in out):
            out.append(o)
    return out


def _explained(phase: Any, outcomes: list[ReplayOutcome], r0: CompareResult) -> bool:
    """Pass a failing phase when replay clears every call that could have made its difference.

    A call the comparison calls *introduced* (its inputs agree, its outputs do not) is cleared
    when it, or a module containing it, reproduces the reference on the reference's tensors: the
    candidate's code computes what the reference's does, so its output difference is the
    (agreeing) input difference amplified -- e.g. a ReLU whose forward input sits within
    rounding noise of 0 flips its gradient mask, a discrete event a last-bit noise run rarely
    reproduces. Every other diverging call then only carries that difference. In backward, a
    parameter gradient diverging while its module's incoming gradient agrees is a difference of
    its own (replay does not check weight gradients), so it keeps the phase failing; one whose
    module's incoming gradient already differs carries the difference. Returns
    whether the phase was passed (summary and evidence say why)."""
    from netparity.analyzers.step import module_of

    direction = phase.name
    same = _first_step_calls(r0, direction, "module")
    bad = [c for c in same if c.status in ("fail", "warn")]
    intro = [c for c in bad if c.origin == "introduced"]
    ok = [o.module for o in outcomes if o.verdict == "reproduces" and o.direction == direction]
    # parameter gradients whose module's replay reproduced them (the reference's backward
    # tensors fed to the candidate's module, its parameter gradients within their noise)
    params_ok = {o.module for o in outcomes if o.verdict == "reproduces"
                 and o.param_local is not None}
    grads = [g for g in r0.divergent_params("grad") if g.status == "fail"
             and module_of(g.module) not in params_ok] if direction == "backward" else []
    cleared_grads = direction == "backward" and any(
        g.status == "fail" for g in r0.divergent_params("grad"))
    if not intro and not (cleared_grads and not grads):
        return False
    if not all(any(_contains(m, c.module) for m in ok) for c in intro):
        return False
    status = {p.key: p.status for p in r0.pairs if p.direction == direction}
    first = same[0].step if same else 0
    carried = {c.module for c in r0.calls if c.direction == direction and c.step == first
               and any(status.get(k) in ("fail", "warn") for k in (*c.inputs, *c.outputs))}
    if any(module_of(g.module) not in carried for g in grads):
        return False
    phase.evidence["compare_said"] = phase.summary
    phase.evidence["verdict"] = "amplified noise (replay)"
    phase.status, phase.where, phase.step = "pass", "", None
    what = "gradients" if direction == "backward" else "outputs"
    head = (intro[0].module or "<root>") if intro else "(parameter gradients only)"
    phase.summary = (
        f"{what} agree up to amplified rounding noise: {len(bad)} module call(s) differ beyond "
        f"their noise estimate, first {head}, but replay clears every "
        f"place a difference could start ({len(intro)}): each reproduces the reference on the "
        "reference's tensors (itself or a module containing it), so the difference is the "
        "agreeing inputs' rounding noise amplified (e.g. a ReLU input within noise of 0)")
    if params_ok:
        phase.summary += (f"; the parameter gradients of {len(params_ok)} module(s) reproduce "
                          "the reference's by replay of their backward")
    if grads:
        phase.summary += f"; {len(grads)} parameter gradient(s) carry it"
    return True


#: the forward phase's refinement (the name the workflow and tests use)
refine_forward = refine


def refine_update(phase: Any, r0: CompareResult, deltas: list[dict[str, Any]],
                  why_not: str, order: dict[str, int], lr: Any,
                  settings: dict[str, Any] | None, info: dict[str, Any] | None = None) -> Any:
    """The update phase judged from optimizer replay (both optimizers stepped on the
    reference's gradients from the same state): a difference there is the optimizer's own,
    free of gradient noise; agreement there means any difference of the run's updates came with
    the gradients (judged by the backward phase). ``info`` (the gradient factors each side's
    optimizer was fed with) goes into the evidence. Returns the phase to use (``phase`` itself,
    with a note, when there is no replay)."""
    from netparity.analyzers.step import judge_update

    if not deltas:
        if why_not:
            phase.evidence["optimizer_replay"] = why_not
        return phase
    new = judge_update(r0, deltas, order, lr, settings)
    info = info or {}
    ev: dict[str, Any] = {
        "params": len(deltas),
        "largest_rel_err": max(d["rel_err"] for d in deltas),
        "largest_noise": max(d["replay_noise"] for d in deltas)}
    if info:
        ev["gradients"] = {"reference": info.get("ref_gradients", ""),
                           "candidate": info.get("cand_gradients", ""),
                           "ref_factor": info.get("ref_factor"),
                           "cand_factor": info.get("cand_factor")}
        for key in ("cand_note", "seconds", "cpu_seconds"):
            if key in info:
                ev[key] = info[key]
    new.evidence["optimizer_replay"] = ev
    f = info.get("ref_factor")
    if f not in (None, 1.0):
        new.summary += f"; the reference's optimizer was given {describe_factor(float(f))}"
    if new.status == "fail" and info.get("cand_note"):
        new.summary += f"; {info['cand_note']}"
    handling = info.get("handling")
    if handling:
        # the gradients reach the candidate's optimizer at another scale: a finding of its own,
        # before the optimizer (which replay judged on what a faithful hand-over gives it)
        ev["handling"] = handling
        own = ("fed what the reference's handling gives it, the candidate's optimizer "
               + ("reproduces the reference's update" if new.status != "fail" else
                  f"also differs: {new.summary}"))
        new.status, new.step, new.where = "fail", 0, "gradient handling"
        new.summary = f"{handling['summary']}; {own}"
        return new
    if phase.status == "fail" and new.status != "fail":
        new.evidence["compare_said"] = phase.summary
        new.summary += ("; the run's own updates differed beyond their noise estimate, but the "
                        "candidate's optimizer reproduces the reference's update on the same "
                        "gradients: the difference came with the gradients")
    return new
