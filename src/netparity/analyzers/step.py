"""Step diagnosis: which phase of one training step diverges first, where, and why.

The one-step parity workflow (:mod:`netparity.workflow.step`) *runs* both sides -- builds the
specs, maps and loads the weights, trains a few steps and evaluates under capture -- and hands
what it ran to :func:`diagnose_step` as a :class:`StepRun`. This analyzer judges the phases in
the order the migration guides check them, from the two runs' facts and traces:

==============  ==============================================================================
phase           checked by
==============  ==============================================================================
setup           parameter counts and shapes match; weights converted from the reference and
                loaded into the candidate reproduce the reference's values exactly
data            the two data pipelines yield the same batches (after this check both sides are
                fed the reference's batches, so later phases are judged on equal inputs)
forward         step 0 module outputs (culprit: first module whose inputs agree but outputs don't)
loss            the step-0 loss, when every forward output agrees
backward        gradients flowing back through modules and parameter gradients
update          parameters (and BatchNorm statistics) after the optimizer step; a uniform ratio
                between the two sides' updates is reported as a learning-rate difference
later-steps     losses and parameters of steps 1..N-1
eval            evaluation outputs after training (e.g. BatchNorm left in training mode)
==============  ==============================================================================

Every judgement is a function of data (NumPy arrays, traces, comparison results): no framework
is imported here.

Example:
    >>> judge_data([(np.zeros((2, 3)), np.array([0, 1]))],
    ...            [(np.zeros((2, 3)), np.array([0, 1]))], steps=1, atol=1e-5).status
    'pass'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from netparity.analyzers.divergence import compare
from netparity.compare.noise import FLOOR_EPS, NOISE_K, coarser, unit_roundoff
from netparity.compare.results import CompareResult, PairResult
from netparity.dtypes import decode, round_to
from netparity.trace import open_trace

PHASES = ("setup", "data", "forward", "loss", "backward", "update", "later-steps", "eval")
RESULT_VERSION = 1

#: update differences below this (normwise, relative to the update) are gradient noise (the
#: backward bound of the cross-framework comparison: updates carry the gradients' noise)
UPDATE_NOISE = 5e-2
#: with a noise run, updates may still differ by this much: one noise run samples Adam's
#: heavy-tailed sensitivity (elements whose gradient is near its eps) once, and a faithful float64
#: candidate of timm's ViT differs by 2.3e-4 where the noise run's update moved 5x less; real
#: optimizer differences (Adam beta2 0.98 vs 0.999 at step 1: 3.5e-3) are above it
MEASURED_UPDATE_FLOOR = 1e-3
#: an update may differ by this many times the relative difference of the gradients it was
#: made from (``grad_noise``) and the rounding of the stored parameter (``rounding_noise``): the
#: optimizer carries gradient noise into the update, and momentum adds that of earlier steps
GRAD_NOISE_FACTOR = 3.0
#: a difference proportional to the parameter must explain this much of the update difference
DECAY_EXPLAINED = 0.9
#: ...and be at least this large relative to the update, to be called a weight-decay difference
DECAY_SIGNAL = 2e-3
#: free-running, the candidate's loss may drift this many times the envelope of the reference's
#: jittered noise run (every layer rounding one ulp off at every step; the envelope is its largest
#: drift so far, at least float32's unit roundoff). Measured (5 steps; ``docs/corpus.md``):
#: faithful rows at most 4.3x (eager vs compiled ResNet-18 at 32 px, chaotic), 1.4x (ResNet-18
#: PyTorch vs MindSpore), 1.9x (ViT vs an independent MindSpore port); rows with one mistake
#: leave it at 152x (Adam eps 1e-6, step 1; 1.5e4x by step 4) to 1e5x (per-tensor clipping:
#: 2.2e4x at step 1, 1.1e5x at step 3)
DRIFT_K = 100.0
#: ...and a drift of less than this (relative) is never a finding on its own, however quiet the
#: noise run happened to be: one noise run is one sample of the envelope, and a faithful
#: cross-framework forward can sit at 1e-4 at step 0 (ResNet-18 PyTorch vs MindSpore) where a
#: jittered run may land at 1e-7. The measured mistakes leave it by step 1 (per-tensor clipping
#: 2.7e-3, accumulation 5.3e-3) or later (Adam eps: 1.7e-3 at step 4), and the resynchronised
#: per-step phases judge each step on their own
DRIFT_MIN = 1e-3
#: position of parameters of modules never seen in forward (e.g. unused heads): last
_UNSEEN = 10**9

Batch = tuple[np.ndarray, np.ndarray]


@dataclass
class Phase:
    """The verdict on one phase, with the evidence."""

    name: str
    status: str = "pass"  # pass | fail | warn | skipped
    where: str = ""  # module or parameter that diverges first
    step: int | None = None
    summary: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.status != "fail"


@dataclass
class StepResult:
    """What the one-step parity workflow found. Truthy when every phase passes."""

    phases: list[Phase]
    ref: dict[str, Any]
    cand: dict[str, Any]
    losses: dict[str, list[float]]
    lr: dict[str, list[float] | None]
    out_dir: str
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    compare_step0: Any = None  # CompareResult of step 0 (not serialised here: see its JSON)
    # side ("ref", "cand") -> NumericsResult of its trace (NaN/Inf origin, loss scale, weights
    # not updating, ranks); serialised as a summary
    numerics: dict[str, Any] = field(default_factory=dict)

    @property
    def first(self) -> Phase | None:
        return next((p for p in self.phases if p.status == "fail"), None)

    @property
    def first_phase(self) -> str | None:
        f = self.first
        return f.name if f is not None else None

    @property
    def where(self) -> str | None:
        f = self.first
        return f.where if f is not None else None

    def phase(self, name: str) -> Phase:
        return next(p for p in self.phases if p.name == name)

    def __bool__(self) -> bool:
        return self.first is None

    def to_json(self) -> dict[str, Any]:
        """Versioned JSON-ready dict (``step.json``)."""
        f = self.first
        return {
            "netparity_step_result_version": RESULT_VERSION,
            "status": "pass" if f is None else "fail",
            "first_divergence": None if f is None else {
                "phase": f.name, "where": f.where, "step": f.step, "summary": f.summary},
            "phases": [asdict(p) for p in self.phases],
            "ref": self.ref,
            "cand": self.cand,
            "losses": self.losses,
            "lr": self.lr,
            "out_dir": self.out_dir,
            "notes": self.notes,
            "seconds": round(self.seconds, 2),
            "numerics": {side: numerics_summary(n) for side, n in self.numerics.items()},
        }


@dataclass
class SetupFacts:
    """What the workflow found while mapping and loading the weights (input of the setup phase).

    ``name_map`` is a :class:`netparity.ckpt.mapping.NameMap` (``pairs``, ``counts()``,
    ``unmatched_ref``/``_cand``, ``ambiguous``, ``shape_mismatches()``, ...); ``None`` with
    ``mapping_error`` when the spec's own map could not be applied. ``weights_loaded`` stays
    ``None`` until the converted weights were loaded into the candidate.
    """

    ref_counts: dict[str, Any]
    cand_counts: dict[str, Any]
    name_map: Any = None
    how: str = "automatic"
    mapping_error: str | None = None
    spec_name_map: dict[str, str] | None = None
    weights_loaded: int | None = None
    worst_weight: tuple[str, float] = ("", 0.0)

    def ref_to_cand(self) -> dict[str, str]:
        return dict(self.name_map.ref_to_cand()) if self.name_map is not None else {}


@dataclass
class StepRun:
    """Everything the workflow ran, for :func:`diagnose_step` (paths, arrays, plain dicts)."""

    out_dir: str
    steps: int
    level: str
    ref: dict[str, Any]  # side descriptions: spec, framework, description (params added here)
    cand: dict[str, Any]
    setup: SetupFacts
    ref_batches: Sequence[Batch] = ()
    cand_batches: Sequence[Batch] = ()
    data_atol: float = 1e-5
    losses: dict[str, list[float]] = field(default_factory=dict)
    lr: dict[str, list[float] | None] = field(default_factory=dict)
    ref_trace: str | None = None  # None: nothing was trained (setup failed)
    cand_trace: str | None = None
    #: weights before step 0 (the workflow's are kept on disk: netparity.statestore)
    ref_before: Mapping[str, np.ndarray] = field(default_factory=dict)
    cand_before: Mapping[str, np.ndarray] = field(default_factory=dict)
    optimizer_settings: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
    ref_eval_trace: str | None = None
    cand_eval_trace: str | None = None
    #: the reference's evaluation again, weights one ulp off and every layer rounding one ulp
    #: off: the eval phase is judged against its noise as training is
    eval_noise_trace: str | None = None
    eval_metrics: dict[str, Any] = field(default_factory=dict)  # {"ref": ..., "cand": ...}
    eval_skipped: str = ""  # why eval was not run ("" when it was)
    rtol: float | None = None
    atol: float | None = None
    #: the reference's noise run (``netparity.compare.noise``), judged against when present
    noise_trace: str | None = None
    #: the reference's state at the start of every step (step 0: the initial weights)
    ref_starts: list[Any] = field(default_factory=list)
    #: the candidate's state at the start of steps 1.. (the reference's, converted and loaded)
    cand_starts: dict[int, Any] = field(default_factory=dict)
    #: optimizer replay, ``{step: (update entries with replay bounds, why not, info)}``
    #: (:func:`netparity.workflow.replay.replay_optimizer`); empty when not run
    opt_replay: dict[int, tuple[list[dict[str, Any]], str, dict[str, Any]]] = field(
        default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: ``(step, comparison of that step, "forward" | "backward") -> evidence | None``: replays a
    #: resynchronised later step's diverging modules (the workflow holds the models); evidence
    #: ``{"cleared": bool, "summary", "replay"}`` (:func:`netparity.analyzers.replay.refine`)
    replay_clear: Any = None
    #: ``() -> path | None``: the reference's float64 run (run on first use), the golden floor of
    #: parameter gradients replay cannot judge (:mod:`netparity.analyzers.golden`); why there
    #: is none in ``golden_why``
    golden: Any = None
    golden_why: str = ""
    #: both optimizers' update ignores the gradient's scale (Adam-type: they have betas)
    adam: bool = False


# ---- helpers ---------------------------------------------------------------------------------
def module_of(param: str) -> str:
    """The module path of a parameter name (``layer1.0.bn1.weight`` -> ``layer1.0.bn1``)."""
    return param.rsplit(".", 1)[0] if "." in param else ""


def max_difference(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Largest absolute difference of two arrays and that divided by ``rms(a)`` (float64)."""
    a64 = np.asarray(a, dtype=np.float64)
    b64 = np.asarray(b, dtype=np.float64)
    if a64.shape != b64.shape:
        return math.inf, math.inf
    d = np.abs(a64 - b64)
    max_abs = float(d.max()) if d.size else 0.0
    scale = float(np.sqrt(np.mean(a64 * a64))) if a64.size else 0.0
    return max_abs, (max_abs / scale if scale else max_abs)


def load_difference(ref_state: Any, cand_state: Any, pairs: Sequence[Any]) -> tuple[str, float]:
    """The reference parameter whose value differs most after loading it into the candidate
    from the value that conversion must store: the reference's, rounded to the candidate's
    dtype where that is coarser (a float32 -> bfloat16 port stores rounded weights by design)."""
    worst = ("", 0.0)
    cand_dtypes = getattr(cand_state, "dtypes", {})
    for p in pairs:
        want = np.asarray(ref_state[p.ref]).reshape(-1)
        dt = cand_dtypes.get(p.cand, "")
        if dt in ("float32", "float16", "bfloat16"):
            want = round_to(want, dt)
        got = np.asarray(cand_state[p.cand]).reshape(-1)
        if dt == "bfloat16" and got.dtype == np.uint16:  # stored as its bits
            got = decode(got, dt)
        d, _ = max_difference(want, got)
        if d > worst[1]:
            worst = (p.ref, d)
    return worst


def param_order(result: CompareResult) -> dict[str, int]:
    """Execution order of modules in the reference forward (params sort by their module)."""
    order: dict[str, int] = {}
    for c in sorted(result.calls, key=lambda c: c.order):
        if c.direction == "forward" and c.level == "module" and c.module not in order:
            # A parent returns after its children; use the first time a path is seen so that
            # layer1.0.conv1 sorts before layer1.0.
            order[c.module] = len(order)
    return order


def _first_param(pairs: list[PairResult], order: dict[str, int]) -> PairResult:
    def key(p: PairResult) -> tuple[int, int, str]:
        return (order.get(module_of(p.module), _UNSEEN), 0 if p.status == "fail" else 1, p.module)

    return min(pairs, key=key)


def _grad_culprit(pairs: list[PairResult], order: dict[str, int]) -> PairResult:
    """The diverging parameter gradient backward reached first: the one nearest the loss
    (latest in forward order; backward runs from the loss back), parameters of modules never
    seen in forward last. Forward order named a BatchNorm deep in a decoder ahead of the head
    nearer the loss and further over its bound (issue 28)."""
    def key(p: PairResult) -> tuple[int, int, str]:
        pos = order.get(module_of(p.module), -1)
        return (-pos, 0 if p.status == "fail" else 1, p.module)

    return min(pairs, key=key)


def name_mapping(ref_to_cand: dict[str, str]) -> dict[str, Any]:
    """The comparison mapping (modules and params) implied by a parameter name map."""
    return {
        "modules": {module_of(r): module_of(c) for r, c in ref_to_cand.items()
                    if module_of(r) and module_of(c)},
        "params": ref_to_cand,
    }


# ---- phases ----------------------------------------------------------------------------------
def judge_setup(f: SetupFacts) -> Phase:
    """Counts, name map, and (once loaded) whether the converted weights landed exactly."""
    phase = Phase("setup")
    rc, cc = f.ref_counts, f.cand_counts
    info: dict[str, Any] = {"ref_counts": rc, "cand_counts": cc}
    phase.evidence = info
    if f.mapping_error is not None:  # e.g. the spec's own map pairs tensors of different shapes
        phase.status, phase.summary = "fail", f.mapping_error
        phase.where = f.mapping_error.split(": ", 1)[-1].split(" ", 1)[0]
        return phase
    nm = f.name_map
    info["name_map"] = {"how": f.how, "pairs": len(nm.pairs), "by": nm.counts(),
                        "unmatched_ref": nm.unmatched_ref[:20],
                        "unmatched_cand": nm.unmatched_cand[:20],
                        "ambiguous": dict(list(nm.ambiguous.items())[:20]),
                        "dropped": len(nm.dropped_ref) + len(nm.dropped_cand)}
    if f.spec_name_map and f.how == "automatic":
        disagree = [(c, r) for c, r in f.spec_name_map.items()
                    if nm.cand_to_ref().get(c, r) != r]
        if disagree:
            info["name_map"]["disagrees_with_spec"] = disagree[:10]
    problems: list[str] = []
    if rc["trainable"] != cc["trainable"]:
        problems.append(f"trainable parameters differ: {rc['trainable']:,} vs {cc['trainable']:,}")
    if nm.unmatched_ref or nm.unmatched_cand or nm.ambiguous:
        problems.append(f"{len(nm.unmatched_ref)} reference and {len(nm.unmatched_cand)} candidate "
                        f"parameter(s) unmatched, {len(nm.ambiguous)} ambiguous")
    bad = nm.shape_mismatches()
    if bad:
        p = bad[0]
        problems.append(f"shape mismatch: {p.ref} {tuple(p.ref_shape)} vs {p.cand} "
                        f"{tuple(p.cand_shape)}" + (f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""))
    if problems:
        phase.status = "fail"
        phase.where = bad[0].ref if bad else (nm.unmatched_ref[:1] or nm.unmatched_cand[:1] or [""])[0]
        phase.summary = "; ".join(problems)
        return phase
    if f.weights_loaded is None:
        phase.summary = f"{len(nm.pairs)} tensors mapped ({f.how}); weights not loaded yet"
        return phase
    info["weights_loaded"] = f.weights_loaded
    info["max_weight_diff_after_load"] = f.worst_weight[1]
    if f.worst_weight[1] > 0:
        phase.status = "fail"
        phase.where = f.worst_weight[0]
        phase.summary = (f"converted weights did not load exactly ({f.worst_weight[0]} differs "
                         f"by {f.worst_weight[1]:.3g})")
    else:
        phase.summary = (f"{rc['trainable']:,} trainable parameters on both sides; "
                         f"{len(nm.pairs)} tensors mapped ({f.how}: "
                         + ", ".join(f"{k} {v}" for k, v in nm.counts().items())
                         + "), converted and loaded exactly")
    return phase


def judge_data(ref_batches: Sequence[Batch], cand_batches: Sequence[Batch], steps: int,
               atol: float) -> Phase:
    """Whether the two data pipelines yield the same first ``steps`` batches."""
    phase = Phase("data")
    rows: list[dict[str, Any]] = []
    for i in range(steps):
        (rx, ry), (cx, cy) = ref_batches[i], cand_batches[i]
        x_abs, x_rel = max_difference(rx, cx)
        labels_equal = rx.shape[:1] == cx.shape[:1] and np.array_equal(
            np.asarray(ry).astype(np.int64), np.asarray(cy).astype(np.int64))
        rows.append({"batch": i, "inputs_max_abs": x_abs, "inputs_rel": x_rel,
                     "shape_ref": list(rx.shape), "shape_cand": list(cx.shape),
                     "labels_equal": bool(labels_equal)})
        if phase.status == "pass" and (x_abs > atol or not labels_equal):
            phase.status = "fail"
            phase.step = i
            phase.where = "labels" if x_abs <= atol else "inputs"
            phase.summary = (
                f"batch {i} differs: " + (f"inputs max abs {x_abs:.3g} (shapes {list(rx.shape)} vs "
                                          f"{list(cx.shape)})" if x_abs > atol else "labels differ")
                + "; later phases use the reference's batches on both sides")
    phase.evidence = {"batches": rows, "atol": atol}
    if phase.status == "pass":
        worst = max(r["inputs_max_abs"] for r in rows)
        phase.summary = f"{steps} batch(es) identical (max abs difference {worst:.3g})"
    return phase


def judge_forward(r0: CompareResult) -> Phase:
    """Step-0 forward: the first module whose output diverges (introduced or propagated)."""
    fwd = Phase("forward")
    d = r0.first_divergence
    if d is not None and d.status == "fail":
        fwd.status, fwd.where, fwd.step = "fail", d.module or d.op, d.step
        fwd.summary = (f"{d.module or '<root>'} ({d.op}) is the first module whose output diverges "
                       f"while its inputs agree ({d.verdict} here)"
                       if d.verdict == "introduced" else
                       f"{d.module or '<root>'} ({d.op}) diverges first ({d.verdict})")
        fwd.evidence = {"verdict": d.verdict, "metrics": d.metrics, "source": d.source,
                        "cand_module": d.cand_module, "in_error": d.in_error,
                        "out_error": d.out_error}
    else:
        n = sum(1 for p in r0.pairs if p.direction == "forward")
        fwd.summary = f"{n} forward tensor pairs agree at step 0"
    return fwd


def loss_gradient_scale(run: StepRun, step: int) -> float | None:
    """What the reference's captured output gradients are multiplied by at ``step``: a loss
    scale the training code applies before ``backward`` (and undoes by hand) scales every
    gradient. Optimizer replay finds it (``ref_factor``, a power of two; a factor that is not
    one is clipping, which acts after the gradients are captured); None when that replay did
    not run or did not reproduce the reference (the scale is then unknown)."""
    info = run.opt_replay.get(step, ([], "", {}))[2]
    f = info.get("ref_factor") if isinstance(info, dict) else None
    if not isinstance(f, (int, float)) or not f > 0:
        return None
    return float(f) if float(f) == 2.0 ** round(math.log2(f)) else 1.0


def loss_carried(r: CompareResult, step: int, grad_scale: float | None = 1.0
                 ) -> tuple[bool, float | None]:
    """Does the loss differ beyond what the model's (agreeing) outputs carry into it?

    The loss is one number, so the noise run gives a single draw of its noise, which may be
    far below its typical size; and a loss function computed another way (MindSpore's
    ``SoftmaxCrossEntropyWithLogits`` vs PyTorch's ``cross_entropy``) turns the outputs'
    accepted rounding differences into a loss difference. To first order the loss moves by
    ``<dL/dz, dz>``, at most ``||dL/dz|| * ||dz||`` (Cauchy-Schwarz) for the root module's
    outputs ``z``: the reference's own output gradients (the root's backward inputs) and the
    outputs' measured difference give that bound. Returns ``(fails, bound)``: the loss pair
    fails and its difference exceeds its own tolerance plus the bound (``bound`` None when
    the outputs or their gradients were not captured as tensors, or ``grad_scale`` -- what the
    captured gradients are multiplied by, see :func:`loss_gradient_scale` -- is unknown)."""
    lp = [p for p in r.loss if p.step == step]
    if not lp or lp[0].status != "fail":
        return False, None
    if grad_scale is None:
        return True, None
    def by_arg(direction: str, role: str) -> dict[str, dict[str, Any]]:
        return {p.arg: p.metrics for p in r.pairs if p.module == "" and p.kind == "module"
                and p.step == step and p.direction == direction and p.role == role
                and p.metrics.get("basis") == "tensors"}

    outs, grads = by_arg("forward", "output"), by_arg("backward", "input")
    both = [a for a in outs if a in grads]
    if not both:
        return True, None
    bound = 0.0
    for a in both:
        z, g = outs[a], grads[a]
        n = float(z.get("numel") or 0)
        bound += math.sqrt(n) * float(z.get("rmse") or 0.0) * math.sqrt(n) * float(
            g.get("ref_rms") or 0.0) / grad_scale
    m = lp[0].metrics
    own = float(m.get("noise_bound") or m.get("norm_tol") or 0.0) * float(m.get("ref_rms") or 0.0)
    return float(m.get("max_abs") or 0.0) > own + bound, bound


def judge_loss(r0: CompareResult, ref_loss: float, cand_loss: float,
               grad_scale: float | None = 1.0) -> Phase:
    """The step-0 loss pair (see :func:`loss_carried`)."""
    ph = Phase("loss")
    ph.evidence = {"ref": ref_loss, "cand": cand_loss, "abs_diff": abs(ref_loss - cand_loss)}
    fails, bound = loss_carried(r0, 0, grad_scale)
    if bound is not None:
        ph.evidence["carried_bound"] = bound
    if fails:
        ph.status, ph.step, ph.where = "fail", 0, "loss"
        ph.summary = (f"step-0 loss {ref_loss:.7g} vs {cand_loss:.7g} (difference "
                      f"{abs(ref_loss - cand_loss):.3g}"
                      + (f", beyond the {bound:.3g} the outputs' difference can carry)"
                         if bound is not None else ")"))
    else:
        ph.summary = f"step-0 loss {ref_loss:.7g} vs {cand_loss:.7g}"
        if bound is not None and any(p.step == 0 and p.status == "fail" for p in r0.loss):
            ph.summary += (f" (difference {abs(ref_loss - cand_loss):.3g}: beyond the loss's "
                           f"own noise estimate, within the {bound:.3g} the outputs' agreeing "
                           "difference can carry into it)")
    return ph


def judge_backward(r0: CompareResult, order: dict[str, int]) -> Phase:
    """Gradients flowing back through modules, then the parameter gradients."""
    bwd = Phase("backward")
    grads = r0.divergent_params("grad")
    db = r0.first_backward
    if db is not None and db.status == "fail":
        bwd.status, bwd.where, bwd.step = "fail", db.module or db.op, db.step
        bwd.summary = f"gradient flowing back diverges first at {db.module or '<root>'} ({db.verdict})"
        bwd.evidence = {"verdict": db.verdict, "metrics": db.metrics}
    if grads and any(g.status == "fail" for g in grads):
        g = _grad_culprit([g for g in grads if g.status == "fail"], order)
        if bwd.status != "fail":
            bwd.status, bwd.where, bwd.step = "fail", module_of(g.module), 0
            bwd.summary = (f"parameter gradient {g.module} diverges first (nearest the loss: "
                           "backward reaches it first)")
        bwd.evidence.update({"first_grad": g.module, "grads_diverging": len(grads),
                             "grad_metrics": g.metrics})
    if bwd.status == "pass":
        n = sum(1 for p in r0.params if p.kind == "grad")
        bwd.summary = f"{n} parameter gradients agree" + ("" if n else " (no gradients captured)")
    return bwd


def update_deltas(ref_before: Mapping[str, np.ndarray], cand_before: Mapping[str, np.ndarray],
                  ref_tr: Any, cand_tr: Any, ref_to_cand: dict[str, str],
                  step: int, noise_tr: Any = None) -> list[dict[str, Any]]:
    """Compare the optimizer's *updates* (after - before) parameter by parameter.

    Optimizer bugs barely move parameter values (an extra weight decay of 1/32768 changes a
    BatchNorm gamma by ~3e-7 in one step) but change the update by a visible fraction. For each
    parameter: the normwise error of the update, its ratio to the reference's update (uniform
    ratios across parameters mean a learning-rate difference), and how much of the difference is
    proportional to the parameter itself (a weight-decay difference).

    With ``noise_tr`` (the reference's noise run, which started this step from the reference's
    state moved one ulp) each entry also gets ``update_noise``: how far the noise run's update
    is from the reference's, relative to the update -- the update's own measured noise, which
    for Adam is large where gradients are noise-level and tiny elsewhere.
    """
    ref_after = {r.module: r for r in ref_tr.records(step=step, kind="param")}
    noise_after = ({r.module: r for r in noise_tr.records(step=step, kind="param")}
                   if noise_tr is not None else {})
    cand_after = {r.module: r for r in cand_tr.records(step=step, kind="param")}
    noise = grad_noise(ref_tr, cand_tr, ref_to_cand, step)
    ref_g = {r.module: r for r in ref_tr.records(step=step, kind="grad")}
    cand_g = {r.module: r for r in cand_tr.records(step=step, kind="grad")}
    out: list[dict[str, Any]] = []
    for name, rec in ref_after.items():
        cname = ref_to_cand.get(name)
        if any(k in name for k in ("running_", "moving_", "num_batches")):
            continue  # statistics, not optimizer updates
        if cname is None or cname not in cand_after or name not in ref_before \
                or cname not in cand_before:
            continue
        crec = cand_after[cname]
        if not rec.has_payload or not crec.has_payload:
            continue
        p0 = _values(ref_before[name], rec.dtype)
        d_ref = np.asarray(ref_tr.tensor(rec), np.float64).ravel() - p0
        d_cand = np.asarray(cand_tr.tensor(crec), np.float64).ravel() - _values(
            cand_before[cname], crec.dtype)
        if d_ref.size != d_cand.size:
            continue
        nr = float(np.linalg.norm(d_ref))
        upd_noise = None
        elem_noise = _elementwise_update_noise(d_ref, ref_g.get(name), cand_g.get(cname),
                                               ref_tr, cand_tr)
        q = noise_after.get(name)
        if q is not None and q.has_payload and nr > 0:
            after = np.asarray(ref_tr.tensor(rec), np.float64).ravel()
            noisy = np.asarray(noise_tr.tensor(q), np.float64).ravel()
            if noisy.size == after.size:
                # measured at the reference's precision: a coarser candidate rounds the same
                # computation at its own (see compare.noise.calibrate)
                upd_noise = float(np.linalg.norm(noisy - after)) / nr * max(
                    1.0, unit_roundoff(crec.dtype) / unit_roundoff(rec.dtype))
        out.append({**delta_entry(name, cname, p0, d_ref, d_cand, rec.dtype, crec.dtype),
                    "update_noise": upd_noise, "grad_noise": noise.get(name, 0.0),
                    "elementwise_noise": elem_noise})
    return out


def delta_entry(name: str, cname: str, p0: np.ndarray, d_ref: np.ndarray, d_cand: np.ndarray,
                ref_dtype: str, cand_dtype: str) -> dict[str, Any]:
    """How one parameter's candidate update ``d_cand`` differs from the reference's ``d_ref``
    (both from the common value ``p0``): normwise relative error, ratio, the part explained by
    a multiple of the parameter (weight decay), rounding terms. See :func:`update_deltas`."""
    nr = float(np.linalg.norm(d_ref))
    dd = d_cand - d_ref
    ndd = float(np.linalg.norm(dd))
    pp = float(np.dot(p0, p0))
    c = float(np.dot(dd, p0) / pp) if pp > 0 else 0.0
    explained = 1.0 - float(np.linalg.norm(dd - c * p0)) ** 2 / ndd**2 if ndd > 0 else 0.0
    return {
        "param": name, "cand_param": cname,
        "rel_err": ndd / nr if nr > 0 else (0.0 if ndd == 0 else math.inf),
        "ratio": float(np.dot(d_cand, d_ref) / nr**2) if nr > 0 else math.nan,
        "decay_coef": c,  # d_cand - d_ref ~= c * param_before
        "decay_explained": explained,
        "decay_signal": abs(c) * math.sqrt(pp) / nr if nr > 0 else 0.0,
        # elements the reference moved and the candidate's dtype could not: an update below
        # half an ulp of the stored value is lost (bfloat16 weights ~1 at lr 1e-3)
        "lost": float(np.mean((d_cand == 0) & (d_ref != 0))) if d_ref.size else 0.0,
        "round_noise": rounding_noise(p0, coarser(ref_dtype, cand_dtype)) / nr
        if nr > 0 else 0.0,
        # the optimizer's own arithmetic rounds each element a few times in either dtype
        "arith_floor": FLOOR_EPS * unit_roundoff(coarser(ref_dtype, cand_dtype)),
    }


def _elementwise_update_noise(d_ref: np.ndarray, g_rec: Any, h_rec: Any, ref_tr: Any,
                              cand_tr: Any) -> float:
    """How much this step's update may differ given how each *element* of its gradient differs.

    An optimizer maps each gradient element to an update element; the update's relative change
    is at most about the gradient element's own relative change for SGD (the update is
    proportional to it) and for Adam-type optimizers (which divide by the gradient's running
    magnitude), and at most 2 when the gradient's sign flips (Adam: +lr becomes -lr). Normwise
    gradient noise misses this: a bfloat16 candidate changes timm ViT gradients by 1 % normwise,
    yet flips the signs of their smallest elements, which Adam turns into full-size updates.
    Returns ``|| |d_ref| * min(2, 2 rel_g) || / || d_ref ||`` (0 without both gradients)."""
    if g_rec is None or h_rec is None or not g_rec.has_payload or not h_rec.has_payload:
        return 0.0
    g = np.asarray(ref_tr.tensor(g_rec), np.float64).ravel()
    h = np.asarray(cand_tr.tensor(h_rec), np.float64).ravel()
    nr = float(np.linalg.norm(d_ref))
    if g.size != h.size or g.size != d_ref.size or nr == 0:
        return 0.0
    scale = np.maximum(np.abs(g), np.abs(h))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(scale > 0, np.abs(h - g) / scale, 0.0)
    return float(np.linalg.norm(np.abs(d_ref) * np.minimum(2.0, 2.0 * rel))) / nr


def _values(arr: Any, dtype: str) -> np.ndarray:
    """A model-state array as flat float64 values (bfloat16 states hold their bits)."""
    a = np.asarray(arr)
    if dtype == "bfloat16" and a.dtype == np.uint16:
        a = decode(a, dtype)
    return np.asarray(a, np.float64).ravel()


def rounding_noise(values: np.ndarray, dtype: str) -> float:
    """Normwise size of the rounding a stored parameter update suffers: each side rounds
    ``p + update`` to the parameter's dtype (half an ulp, uniformly distributed: ulp/sqrt(12)),
    and the two sides' roundings are independent (sqrt(2)). When the learning rate is small the
    update is a few ulps of the parameter (ResNet demo, step 2: lr 4.4e-6, BatchNorm gamma ~1),
    so this alone makes two faithful updates differ by several percent."""
    v = np.abs(values)
    if dtype == "float64":
        ulp = np.spacing(v)
    else:
        ulp = np.spacing(v.astype(np.float32)).astype(np.float64)
        ulp *= {"bfloat16": 2.0**16, "float16": 2.0**13}.get(dtype, 1.0)
    return float(np.linalg.norm(ulp)) * math.sqrt(2.0 / 12.0)


def grad_noise(ref_tr: Any, cand_tr: Any, ref_to_cand: dict[str, str],
               step: int) -> dict[str, float]:
    """Per parameter, the largest normwise relative difference between the two sides' gradients
    over steps 0..``step`` -- the noise the optimizer's state and update carry.

    An update is a function of this step's gradient and (momentum, Adam moments) of earlier ones:
    when the gradients differ by rounding noise of a few percent (they do: ReLU decisions flip
    and BatchNorm's backward spreads it), the updates differ by as much; Adam even turns a
    gradient that is pure noise (zero in exact arithmetic) into a full-size update. Judging the
    update against the noise its own gradients carry keeps that from becoming a verdict; the
    gradients themselves are judged (against their measured noise) in the backward phase.
    """
    worst: dict[str, float] = {}
    for s in range(step + 1):
        cand = {r.module: r for r in cand_tr.records(step=s, kind="grad")}
        for rec in ref_tr.records(step=s, kind="grad"):
            crec = cand.get(ref_to_cand.get(rec.module, ""))
            if crec is None or not rec.has_payload or not crec.has_payload:
                continue
            g = np.asarray(ref_tr.tensor(rec), np.float64).ravel()
            h = np.asarray(cand_tr.tensor(crec), np.float64).ravel()
            if g.size != h.size:
                continue
            ng = float(np.linalg.norm(g))
            err = float(np.linalg.norm(h - g)) / ng if ng > 0 else (0.0 if not h.any() else 1.0)
            worst[rec.module] = max(worst.get(rec.module, 0.0), err)
    return worst


def optimizer_mismatch(ref_settings: dict[str, Any], cand_settings: dict[str, Any],
                       ref_to_cand: dict[str, str],
                       order: dict[str, int]) -> dict[str, Any] | None:
    """Per-parameter optimizer settings (weight decay, momentum) that differ between the sides.

    The settings are ``{param: {"weight_decay", "momentum", ...}}`` as
    ``frameworks.models.optimizer_settings`` reads them from each side's optimizer.
    """
    bad = []
    for rname, cname in ref_to_cand.items():
        a, b = ref_settings.get(rname), cand_settings.get(cname)
        if a is None or b is None:
            continue
        for key in ("weight_decay", "momentum"):
            if not math.isclose(a[key], b[key], rel_tol=1e-5, abs_tol=1e-12):
                bad.append({"param": rname, "cand_param": cname, "setting": key.replace("_", " "),
                            "ref": a[key], "cand": b[key]})
                break
    if not bad:
        return None
    first = min(bad, key=lambda d: (order.get(module_of(d["param"]), _UNSEEN), d["param"]))
    return {"kind": "settings", "first": first, "params": [d["param"] for d in bad],
            "checked": len(ref_settings)}


def update_allowance(d: dict[str, Any]) -> float:
    """How much one parameter's update (``update_deltas`` entry) may differ, relative to the
    update: ``GRAD_NOISE_FACTOR`` x the (normwise) difference of the gradients it was made from
    or the difference their elementwise differences allow (``_elementwise_update_noise``),
    plus the rounding of the stored parameter and of the optimizer's arithmetic, and at least
    ``NOISE_K`` x the update's measured noise (noise run) -- or, without a noise run, at least
    the fixed ``UPDATE_NOISE``.

    The measured noise replaces the fixed floor because that floor hid real optimizer
    differences: Adam's beta2 0.98 instead of 0.999 changes step 1's update of every weight by
    ~0.5 %, ten times under 0.05 and a hundred times over the noise run's update noise."""
    if "replay_bound" in d:  # optimizer replay: both sides stepped on the same gradients
        return float(d["replay_bound"])
    grads = max(GRAD_NOISE_FACTOR * d.get("grad_noise", 0.0), d.get("elementwise_noise", 0.0))
    rounding = GRAD_NOISE_FACTOR * d.get("round_noise", 0.0)
    measured = d.get("update_noise")
    floor = UPDATE_NOISE if measured is None else max(NOISE_K * measured, MEASURED_UPDATE_FLOOR)
    return max(floor, grads) + rounding + d.get("arith_floor", 0.0)


def _update_basis(deltas: list[dict[str, Any]]) -> str:
    """What the updates were held to, in words."""
    if deltas and all("replay_bound" in d for d in deltas):
        return ("optimizer replay: the candidate's optimizer on the reference's gradients and "
                f"state, {NOISE_K:g}x the reference's own replay noise + rounding")
    if any(d.get("update_noise") is not None for d in deltas):
        return f"{NOISE_K:g}x the noise run's update or the noise of their gradients"
    return f"{UPDATE_NOISE:g} or the noise of their gradients"


def update_within_noise(d: dict[str, Any]) -> bool:
    """Whether one parameter's update differs by no more than :func:`update_allowance`."""
    return bool(d["rel_err"] <= update_allowance(d))


def judge_updates(deltas: list[dict[str, Any]], order: dict[str, int],
                  lr_ref: float | None) -> dict[str, Any] | None:
    """Name the optimizer difference the update deltas show, or None when they agree."""
    if not deltas:
        return None

    def pos(d: dict[str, Any]) -> tuple[int, str]:
        return (order.get(module_of(d["param"]), _UNSEEN), d["param"])

    ratios = np.array([d["ratio"] for d in deltas if math.isfinite(d["ratio"])])
    if ratios.size >= 3:
        med = float(np.median(ratios))
        spread = float(np.median(np.abs(ratios - med)))
        outside = sum(1 for d in deltas if not update_within_noise(d))
        if abs(med - 1.0) > UPDATE_NOISE and spread < 0.05 * max(abs(med), 1e-3) \
                and outside * 2 >= len(deltas):
            first = min(deltas, key=pos)
            return {"kind": "learning-rate", "first": first, "median_ratio": med,
                    "spread": spread, "params": int(ratios.size)}
    # A difference proportional to the parameter is weight decay only where it stands out of
    # the update's own noise: a bfloat16 candidate loses every update below half an ulp of its
    # parameter (LayerNorm weights ~1 at lr 1e-3), which is "proportional" to a constant vector.
    decay = [d for d in deltas if d["decay_explained"] > DECAY_EXPLAINED
             and d["decay_signal"] > max(DECAY_SIGNAL, GRAD_NOISE_FACTOR * d.get("round_noise", 0.0),
                                         NOISE_K * (d.get("update_noise") or 0.0))]
    if decay:
        first = min(decay, key=pos)
        extra = -first["decay_coef"] / lr_ref if lr_ref else None
        return {"kind": "weight-decay", "first": first, "params": [d["param"] for d in decay],
                "extra_weight_decay": extra}
    bad = [d for d in deltas if not update_within_noise(d)]
    if bad:
        return {"kind": "update", "first": min(bad, key=pos), "params": [d["param"] for d in bad]}
    return None


def params_differing_after(r: CompareResult, deltas: list[dict[str, Any]],
                           explained: list[dict[str, Any]] | None = None) -> list[PairResult]:
    """Parameters whose values after the optimizer step fail, less those whose difference is
    their update's: a parameter's value after the step is its (common) value before plus its
    update, so when the update is within the noise its gradients carry (Adam turns noise-level
    gradients into full-size updates: timm's ViT, key biases, float32 vs float64) the value's
    difference is that same noise, not a second finding. Likewise a BatchNorm running
    statistic within what its layer's forward input difference makes
    (:func:`running_stat_bound`); those are appended to ``explained`` when given."""
    excused = {d["param"] for d in deltas if update_within_noise(d)}
    params = [p for p in r.divergent_params("param") if p.status == "fail"
              and p.module not in excused]
    stats = [p for p in params if _running_kind(p.module) is not None]
    if not stats:
        return params
    inputs = _layer_inputs(r, {module_of(p.module) for p in stats})
    out = []
    for p in params:
        bound = (running_stat_bound(p, inputs.get(module_of(p.module)))
                 if _running_kind(p.module) else None)
        diff = _norm_diff(p)
        if bound is None or diff is None or diff > bound:
            out.append(p)
        elif explained is not None:
            explained.append({"param": p.module, "step": p.step, "difference": diff,
                              "bound": bound})
    return out


#: BatchNorm running statistics by the names frameworks give them -> which batch statistic
_RUNNING = {"running_mean": "mean", "moving_mean": "mean", "running_var": "var",
            "moving_variance": "var"}


def _running_kind(param: str) -> str | None:
    return _RUNNING.get(param.rsplit(".", 1)[-1])


def _norm_diff(p: PairResult) -> float | None:
    """A tensor pair's normwise absolute difference ``||cand - ref||`` (tensors basis only)."""
    m = p.metrics
    if m.get("basis") != "tensors" or m.get("rmse") is None:
        return None
    return float(m["rmse"]) * math.sqrt(max(1, math.prod(p.ref_shape or [1])))


def _layer_inputs(r: CompareResult, modules: set[str]) -> dict[str, PairResult]:
    """The first forward input pair of each module in ``modules`` (its first call)."""
    want: dict[str, str] = {}
    for c in sorted(r.calls, key=lambda c: c.order):
        if c.direction == "forward" and c.module in modules and c.module not in want \
                and c.inputs:
            want[c.module] = c.inputs[0]
    keys = {k: m for m, k in want.items()}
    return {keys[p.key]: p for p in r.pairs if p.key in keys} if keys else {}


def running_stat_bound(p: PairResult, x: PairResult | None) -> float | None:
    """How far (normwise) a BatchNorm running statistic ``p`` may differ after a step given
    the difference of its layer's forward input ``x`` at that step; None when it cannot be
    bounded (no input pair, statistics basis, shapes that do not fit).

    Each side updates it as ``(1 - m) * old + m * b`` from the same ``old`` (the common start),
    with ``b`` the batch's per-channel mean or unbiased variance over ``n`` values per channel
    and ``0 < m <= 1``. For a per-channel input difference ``d_c`` (Cauchy-Schwarz):
    ``|mean(x_c + d_c) - mean(x_c)| <= ||d_c|| / sqrt(n)``, so ``||d mean|| <= ||d|| / sqrt(n)``;
    and ``|var(x_c + d_c) - var(x_c)| <= (2 ||x_c - mean_c|| ||d_c|| + ||d_c||^2) / (n - 1)``,
    which summed over channels is at most ``(2 ||x|| ||d|| + ||d||^2) / (n - 1)``. A layer
    normalising few values per channel (batch 2 at 1x1: n = 2) turns last-bit noise into large
    differences of its input and so of its running statistics: amplified noise the forward
    already showed, not a second finding. The stored values' rounding is added (4 units of
    the coarser dtype)."""
    kind = _running_kind(p.module)
    if kind is None or x is None or len(x.ref_shape) < 2:
        return None
    d, mx = _norm_diff(x), x.metrics.get("ref_rms")
    channels, numel = x.ref_shape[1], math.prod(x.ref_shape)
    if d is None or mx is None or not p.ref_shape or channels != math.prod(p.ref_shape):
        return None
    n = numel / channels
    xnorm = float(mx) * math.sqrt(numel)
    if kind == "mean":
        bound = d / math.sqrt(n)
    elif n > 1:
        bound = (2.0 * xnorm * d + d * d) / (n - 1.0)
    else:
        return None
    stored = float(p.metrics.get("ref_rms") or 0.0) * math.sqrt(channels)
    return bound + 4.0 * unit_roundoff(coarser(p.ref_dtype, p.cand_dtype)) * stored


def _bias_correction_hint(ratio: float) -> str:
    """Adam's first update is lr * sign(g) with bias correction and lr * (1 - beta1) /
    sqrt(1 - beta2) * sign(g) without: 3.16x at the usual betas (0.9, 0.999). MindSpore's
    ``nn.AdamWeightDecay`` does not correct, PyTorch's ``AdamW`` does; the reverse gives 0.316x."""
    for r, side in ((0.1 / math.sqrt(0.001), "the candidate"), (math.sqrt(0.001) / 0.1,
                                                                "the reference")):
        if abs(ratio / r - 1.0) < 0.03:
            return (f" -- or {side} uses Adam without bias correction (e.g. MindSpore's "
                    "nn.AdamWeightDecay against PyTorch's AdamW: 3.16x at betas 0.9/0.999)")
    return ""


@dataclass
class RateFacts:
    """What is known of the two sides' learning rates, to name a uniform ratio of every
    parameter's update (:meth:`name`): the specs' declared schedules (``{"ref", "cand"}``),
    whether the optimizers' own rates (read after the run) differ, and whether the optimizers
    are Adam-type (their update does not scale with the gradient)."""

    lr: dict[str, list[float] | None]
    optimizers_differ: bool = False
    adam: bool = False

    def name(self, ratio: float, step: int) -> tuple[str, str]:
        """``(where, why)`` for every update being ``ratio`` x the reference's at ``step``.

        A learning rate is named only when it is one: the specs' rates for the step differ,
        the ratio is the schedule's rate of a neighbouring step over this one's (a schedule
        off by a step), or the optimizers' own rates differ. With equal declared rates it is
        what the optimizer was given (gradient handling: a loss scale, clipping, accumulation)
        or, for Adam-type optimizers (whose update ignores the gradient's scale), the update
        rule. Nothing declared or read: the learning rate, hedged."""
        ref, cand = self.lr.get("ref"), self.lr.get("cand")
        r_k = ref[step] if ref and len(ref) > step else None
        c_k = cand[step] if cand and len(cand) > step else None
        lr_where = "optimizer (learning rate)"
        head = f"every parameter's update is {ratio:.4g}x the reference's"
        if r_k is not None and c_k is not None and not _same(r_k, c_k):
            return lr_where, (f"{head}: the learning rate differs (the specs declare "
                              f"{r_k:.6g} vs {c_k:.6g} for step {step})")
        for side, sched in (("candidate", cand), ("reference", ref)):
            for j in (step - 1, step + 1):
                if not sched or not 0 <= j < len(sched) or len(sched) <= step \
                        or sched[step] == 0 or _same(sched[j], sched[step]):
                    continue
                want = sched[j] / sched[step] if side == "candidate" else sched[step] / sched[j]
                if abs(ratio / want - 1.0) <= 2e-2:
                    return lr_where, (f"{head}: the learning rate follows the schedule off by "
                                      f"one step (the {side}'s rate of step {j} over step "
                                      f"{step}'s is {want:.4g})")
        if self.optimizers_differ:
            return lr_where, (f"{head}: the learning rate differs (the optimizers' own rates "
                              "differ, though not as the specs declare)")
        if r_k is None or c_k is None:
            return lr_where, (f"{head}: the learning rate differs (no rate declared for this "
                              "step: or the gradients the optimizer is given differ)"
                              + _bias_correction_hint(ratio) + _loss_scale_hint(ratio))
        if self.adam:
            return "optimizer (update rule)", (
                f"{head} though both specs declare the learning rate {r_k:.6g} for it: "
                "an Adam-type update ignores the gradient's scale, so the update rule differs "
                "(bias correction, eps, a scale on the update)" + _bias_correction_hint(ratio))
        return "gradient handling", (
            f"{head} though both specs declare the learning rate {r_k:.6g} for it: not the "
            "rate -- the gradients the optimizer is given differ (a loss scale, clipping, "
            "accumulation between backward and the step), or its update rule differs "
            "(momentum convention, dampening)" + _loss_scale_hint(ratio))


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)


def _same_lr_hint(lr_ref: float | None, lr_cand: float | None) -> str:
    """When both specs declare the same learning rate for the step, a uniform ratio of the
    updates more likely comes from the update rule than from the rate."""
    if lr_ref is None or lr_cand is None or not math.isclose(lr_ref, lr_cand, rel_tol=1e-6,
                                                             abs_tol=1e-12):
        return ""
    return (f" -- though both specs declare {lr_ref:.6g} for it: if the optimizers use that, "
            "their update rule differs (momentum convention, dampening, bias correction, a "
            "scale on the gradients)")


def _loss_scale_hint(ratio: float) -> str:
    """A uniform ratio that is a power of two (2 or more either way) is more likely a loss
    scale undone differently than a learning rate."""
    if not ratio > 0:
        return ""
    k = round(math.log2(ratio))
    if k and abs(ratio / 2.0**k - 1.0) < 1e-2:
        return (f" -- or the loss scale is undone differently (the ratio is 2^{k}: gradients "
                "scaled for the backward pass and not divided back, or divided twice)")
    return ""


def judge_update(r0: CompareResult, deltas: list[dict[str, Any]], order: dict[str, int],
                 lr: dict[str, list[float] | None] | RateFacts,
                 settings: dict[str, Any] | None) -> Phase:
    """Parameter values after the optimizer step, then the updates themselves (``lr``: the
    specs' schedules, or :class:`RateFacts` to name a uniform ratio)."""
    upd = Phase("update")
    rates = lr if isinstance(lr, RateFacts) else RateFacts(lr)
    lr = rates.lr
    explained: list[dict[str, Any]] = []
    params = params_differing_after(r0, deltas, explained)
    lr_ref_s, lr_cand_s = lr.get("ref"), lr.get("cand")
    verdict = judge_updates(deltas, order, lr_ref_s[0] if lr_ref_s else None)
    lr_note = ""
    if lr_ref_s and lr_cand_s and not math.isclose(lr_ref_s[0], lr_cand_s[0], rel_tol=1e-6,
                                                   abs_tol=1e-12):
        lr_note = (f"; the specs' learning rates for step 0 differ: {lr_ref_s[0]:.6g} vs "
                   f"{lr_cand_s[0]:.6g}")
    if verdict is None and settings is not None:
        verdict = settings
    first_value = _first_param(params, order) if params else None
    if verdict is None and first_value is None:
        n = sum(1 for p in r0.params if p.kind == "param")
        noisy = sum(1 for p in r0.divergent_params("param") if p.status == "fail")
        upd.summary = (f"{n} parameters agree after the optimizer step"
                       + (f" ({noisy} by their updates' gradient noise)" if noisy else "")
                       + f"; {len(deltas)} updates agree (within {_update_basis(deltas)})")
        upd.evidence["values_within_update_noise"] = noisy
        if explained:
            upd.evidence["running_stats_by_input"] = explained
            upd.summary += (f"; {len(explained)} BatchNorm running statistic(s) differ within "
                            f"what their layer's input difference makes (first: "
                            f"{explained[0]['param']})")
        lost = [d["param"] for d in deltas if d.get("lost", 0.0) > 0.5]
        if lost:
            upd.evidence["updates_lost"] = lost
            upd.summary += (f"; note: the candidate loses most of the update of {len(lost)} "
                            f"parameter(s) to rounding (first: {lost[0]}): its dtype cannot "
                            "store a change that small")
        return upd
    upd.status, upd.step = "fail", 0
    # the earliest parameter (in forward order) with either kind of difference
    cands = []
    if first_value is not None:
        cands.append((order.get(module_of(first_value.module), _UNSEEN), "value"))
    if verdict is not None:
        cands.append((order.get(module_of(verdict["first"]["param"]), _UNSEEN), "delta"))
    which = min(cands)[1] if verdict is None or verdict["kind"] != "learning-rate" else "delta"
    if which == "value":
        assert first_value is not None
        p = first_value
        upd.where = module_of(p.module)
        stat = any(k in p.module for k in ("running_", "moving_"))
        upd.summary = (f"{len(params)} parameter(s) differ after the optimizer step; first: "
                       f"{p.module}" + (" (BatchNorm running statistics: updated in forward "
                                        "with the layer's momentum)" if stat else ""))
        upd.evidence = {"first_param": p.module, "cand_param": p.cand_module,
                        "diverging": [q.module for q in params][:20], "metrics": p.metrics}
    else:
        assert verdict is not None
        f = verdict["first"]
        if verdict["kind"] == "learning-rate":
            upd.where, upd.summary = rates.name(verdict["median_ratio"], 0)
            upd.summary += f" ({verdict['params']} parameters)"
            if upd.where != "optimizer (learning rate)":
                lr_note = ""
        elif verdict["kind"] == "settings":
            upd.where = module_of(f["param"])
            upd.summary = (f"optimizer settings differ for {len(verdict['params'])} "
                           f"parameter(s); first: {f['param']} {f['setting']} "
                           f"{f['ref']:.6g} (reference) vs {f['cand']:.6g} (candidate)")
        elif verdict["kind"] == "weight-decay":
            upd.where = module_of(f["param"])
            wd = verdict.get("extra_weight_decay")
            upd.summary = (f"the update of {f['param']} differs by a multiple of the parameter "
                           "itself: weight decay differs" + (
                               f" (candidate applies {wd:.3g} more)" if wd else "")
                           + f"; {len(verdict['params'])} parameter(s) affected")
        else:
            upd.where = module_of(f["param"])
            upd.summary = (f"the update of {f['param']} differs by {f['rel_err']:.3g} "
                           "(normwise, relative to the update)")
        upd.evidence = {k: v for k, v in verdict.items() if k != "first"}
        upd.evidence["first_param"] = f
    upd.summary += lr_note
    upd.evidence["deltas_checked"] = len(deltas)
    return upd


def ops_only(r: CompareResult, direction: str) -> bool:
    """True when every module-level pair of ``direction`` (backward: and every parameter
    gradient) agrees: an operator-level divergence there is then no culprit (issue 28, deliver
    4: op level is never worse than module level; a culprit is reported only inside a module
    that itself diverges). False without module-level pairs (an op-only trace)."""
    mods = [p for p in r.pairs if p.kind == "module" and p.direction == direction]
    grads = [p for p in r.pairs if p.kind == "grad"] if direction == "backward" else []
    return bool(mods) and not any(p.status == "fail" for p in (*mods, *grads))


def later_step_divergence(r: CompareResult, step: int, deltas: list[dict[str, Any]],
                          order: dict[str, int], lr_ref: float | None,
                          lr_cand: float | None = None,
                          cleared: frozenset[str] = frozenset(), grad_scale: float | None = None,
                          explained: list[dict[str, Any]] | None = None,
                          rates: RateFacts | None = None) -> tuple[str, str, str] | None:
    """The first phase of a resynchronised later step that diverges: (phase, where, why);
    phases in ``cleared`` (replay showed their difference is no one's own) are passed over;
    running statistics explained by their layer's input go to ``explained``."""
    d = r.first_divergence
    if d is not None and d.status == "fail" and "forward" not in cleared \
            and not ops_only(r, "forward"):
        return ("forward", d.module or d.op,
                f"forward diverges first at {d.module or '<root>'} ({d.op}, {d.verdict})")
    if loss_carried(r, step, grad_scale)[0]:
        return "loss", "loss", "the loss differs while every forward output agrees"
    db = r.first_backward
    if db is not None and db.status == "fail" and "backward" not in cleared \
            and not ops_only(r, "backward"):
        return ("backward", db.module or db.op,
                f"gradient flowing back diverges first at {db.module or '<root>'} ({db.verdict})")
    grads = [g for g in r.divergent_params("grad") if g.status == "fail"]
    if grads and "backward" not in cleared:
        g = _grad_culprit(grads, order)
        return "backward", module_of(g.module), f"parameter gradient {g.module} diverges"
    verdict = judge_updates(deltas, order, lr_ref)
    if verdict is not None:
        f = verdict["first"]
        via = (" -- optimizer replay: both optimizers stepped on the reference's gradients from "
               "the same state" if all("replay_bound" in d for d in deltas) else "")
        if verdict["kind"] == "learning-rate" and rates is not None:
            where, why = rates.name(verdict["median_ratio"], step)
            return "update", where, why + via
        if verdict["kind"] == "learning-rate":
            return ("update", "optimizer (learning rate)",
                    f"every parameter's update is {verdict['median_ratio']:.4g}x the reference's: "
                    "the learning rate differs at this step"
                    + _same_lr_hint(lr_ref, lr_cand) + _loss_scale_hint(verdict["median_ratio"])
                    + via)
        return ("update", module_of(f["param"]),
                f"the update of {f['param']} differs by {f['rel_err']:.3g} (normwise, relative "
                f"to the update; {verdict['kind']}){via}")
    params = params_differing_after(r, deltas, explained)
    if params:
        p = _first_param(params, order)
        return "update", module_of(p.module), f"{p.module} differs after the optimizer step"
    return None


def judge_later_steps(run: StepRun, mapping: dict[str, Any], order: dict[str, int]) -> Phase:
    """Steps 1..N-1, each judged like step 0: both sides started it from the reference's state
    (the workflow loads it into the candidate), so a difference there is made at that step."""
    later = Phase("later-steps")
    steps = run.steps
    if steps <= 1:
        later.status, later.summary = "skipped", "only one step was run"
        return later
    assert run.ref_trace is not None and run.cand_trace is not None
    lr_, lc_ = run.losses["ref"], run.losses["cand"]
    rel = [abs(c - r) / max(abs(r), 1e-12) for r, c in zip(lr_, lc_)]
    later.evidence = {"loss_rel_diff": rel, "resynchronised": True}
    ref_tr, cand_tr = open_trace(Path(run.ref_trace)), open_trace(Path(run.cand_trace))
    noise_tr = open_trace(Path(run.noise_trace)) if run.noise_trace else None
    ref_to_cand = run.setup.ref_to_cand()
    lr_sched = run.lr.get("ref")
    rates = rate_facts(run)
    free, noise = run.losses.get("cand_free"), run.losses.get("ref_noise")
    drift = judge_drift(lr_, free, noise, _precision_scale(run)) if free and noise else None
    if drift is not None:
        later.evidence["free_running"] = drift
        if drift["left_at"] is not None:
            later.evidence["drift_finding"] = _drift_text(drift)
    for k in range(1, steps):
        if k >= len(run.ref_starts) or k not in run.cand_starts:
            later.status, later.summary = "skipped", "later steps were not started from a common state"
            return later
        rk = compare(run.ref_trace, run.cand_trace, mapping=mapping, level=run.level, steps=[k],
                     rtol=run.rtol, atol=run.atol, noise_run=run.noise_trace)
        replayed = run.opt_replay.get(k, ([], "", {}))[0]
        if replayed:
            later.evidence.setdefault("optimizer_replay_steps", []).append(k)
        deltas = replayed or update_deltas(run.ref_starts[k], run.cand_starts[k], ref_tr,
                                           cand_tr, ref_to_cand, k, noise_tr)
        lr_c = run.lr.get("cand")
        lr_k = lr_sched[k] if lr_sched and len(lr_sched) > k else None
        lr_ck = lr_c[k] if lr_c and len(lr_c) > k else None
        cleared: frozenset[str] = frozenset()
        scale = loss_gradient_scale(run, k)
        explained: list[dict[str, Any]] = []
        found = later_step_divergence(rk, k, deltas, order, lr_k, lr_ck, grad_scale=scale,
                                      explained=explained, rates=rates)
        while (found is not None and found[0] in ("forward", "backward")
               and found[0] not in cleared and run.replay_clear is not None):
            ev = run.replay_clear(k, rk, found[0])
            if ev is None or not ev.get("cleared"):
                if ev is not None:  # what replay showed, for the report
                    later.evidence["replay"] = ev.get("replay", [])
                    later.evidence["replay_summary"] = ev.get("summary", "")
                break
            later.evidence.setdefault("cleared_by_replay", []).append(
                {"step": k, "phase": found[0], **ev})
            cleared |= {found[0]}
            explained.clear()
            found = later_step_divergence(rk, k, deltas, order, lr_k, lr_ck, cleared, scale,
                                          explained, rates)
        if found is not None and found[0] == "backward" and run.golden is not None \
                and "backward" not in cleared:
            # parameter gradients replay could not judge: the float64 golden floor
            from netparity.analyzers.golden import clear_by_golden

            judged = {o.get("module") for o in later.evidence.get("replay", [])
                      if o.get("param_local") is not None}
            gold = clear_by_golden(rk, k, run.golden, run.ref_trace, run.cand_trace,
                                   run.noise_trace, ref_to_cand, judged)
            if gold is not None:
                later.evidence.setdefault("golden", []).append(gold)
                explained.clear()
                found = later_step_divergence(rk, k, deltas, order, lr_k, lr_ck, cleared,
                                              scale, explained, rates)
                if found is not None and found[0] == "backward" and gold["beyond"]:
                    e = next(x for x in gold["params"] if not x["within"])
                    found = (*found[:2], f"{found[2]} (beyond its float64 golden floor: "
                                         f"{e['cand_err']:.3g} from ref64 against "
                                         f"{e['bound']:.3g})")
        if (found is not None and found[0] == "update" and run.golden is not None
                and any(_running_kind(p.module) for p in rk.divergent_params("param")
                        if p.status == "fail" and p.step == k)):
            # a BatchNorm running statistic its layer's inputs could not bound: the float64
            # golden floor, as for the gradients that made it
            from netparity.analyzers.golden import clear_by_golden

            gold = clear_by_golden(rk, k, run.golden, run.ref_trace, run.cand_trace,
                                   run.noise_trace, ref_to_cand, kind="running")
            if gold is not None:
                later.evidence.setdefault("golden", []).append(gold)
                explained.clear()
                found = later_step_divergence(rk, k, deltas, order, lr_k, lr_ck, cleared,
                                              scale, explained, rates)
        if explained:
            later.evidence.setdefault("running_stats_by_input", []).extend(explained)
        if found is not None:
            what, where, why = found
            later.status, later.step, later.where = "fail", k, where
            later.summary = (f"step {k} ({what}), both sides started from the reference's state "
                             f"after step {k - 1}: {why}; loss {lr_[k]:.7g} vs {lc_[k]:.7g}")
            later.evidence["phase"] = what
            if later.evidence.get("drift_finding"):
                later.summary += f"; free-running, {later.evidence['drift_finding']}"
            return later
    later.summary = (f"steps 1-{steps - 1} agree in every phase, each started from the "
                     f"reference's state (largest loss difference {max(rel[1:]):.2g}, relative)")
    if later.evidence.get("cleared_by_replay"):
        c = later.evidence["cleared_by_replay"]
        later.summary += (f"; at {len(c)} step/phase(s) (first: step {c[0]['step']} "
                          f"{c[0]['phase']}) modules differed beyond their noise estimate but "
                          "replay showed each reproduces the reference: amplified rounding noise")
    by_input = later.evidence.get("running_stats_by_input")
    if by_input:
        later.summary += (f"; {len(by_input)} BatchNorm running statistic(s) differ within what "
                          f"their layer's input difference makes (first: {by_input[0]['param']}, "
                          f"step {by_input[0]['step']})")
    golds = [g for g in later.evidence.get("golden", []) if g["cleared"]]
    if golds:
        later.summary += (f"; {sum(len(g['cleared']) for g in golds)} parameter gradient(s) "
                          f"replay could not judge (first: {golds[0]['cleared'][0]}, step "
                          f"{golds[0]['step']}) are within the float64 golden floor "
                          "(|cand - ref64| against the reference's |ref - ref64|)")
    replayed_steps = later.evidence.get("optimizer_replay_steps")
    if replayed_steps:
        later.summary += ("; updates judged by optimizer replay at step(s) "
                          + ", ".join(map(str, replayed_steps)))
    if drift is not None and drift["left_at"] is not None:
        # every resynchronised step agrees, yet the candidate's own run leaves the envelope:
        # a difference the per-step comparison excused (issue 28: per-tensor clipping)
        later.status, later.step, later.where = "fail", drift["left_at"], "free-running loss"
        later.evidence["phase"] = "free-running"
        later.summary = (f"every resynchronised step agrees, but free-running "
                         f"{later.evidence['drift_finding']}")
    elif drift is not None:
        later.summary += (f"; free-running, the candidate's loss drifts up to "
                          f"{drift['cand_drift']:.2%} from the reference's, within "
                          f"{drift['bound_factor']:g}x the envelope of the reference's jittered "
                          f"noise run ({drift['noise_drift']:.2%}; largest ratio "
                          f"{drift['largest_ratio']:.3g}x)")
    return later


def _drift_text(drift: dict[str, Any]) -> str:
    """Where the candidate's free-running loss leaves the noise run's envelope, in words."""
    row = drift["per_step"][drift["left_at"]]
    return (f"the candidate's loss leaves the noise run's envelope at step {row['step']}: it "
            f"drifts {row['cand']:.3g} (relative) from the reference's where the reference's "
            f"jittered noise run drifted at most {row['envelope']:.3g} ({row['ratio']:.3g}x, "
            f"over {drift['bound_factor']:g}x)")


def rate_facts(run: StepRun) -> RateFacts:
    """What the run knows of both sides' learning rates (see :class:`RateFacts`)."""
    ref_s, cand_s = run.optimizer_settings
    ref_to_cand = run.setup.ref_to_cand()
    differ = any(
        isinstance(a := ref_s.get(r, {}).get("lr"), (int, float))
        and isinstance(b := cand_s.get(c, {}).get("lr"), (int, float)) and not _same(a, b)
        for r, c in ref_to_cand.items())
    return RateFacts(dict(run.lr), optimizers_differ=differ, adam=run.adam)


def judge_drift(ref: Sequence[float], cand: Sequence[float], noise: Sequence[float],
                scale: float = 1.0) -> dict[str, Any]:
    """The candidate's free-running loss drift from the reference's against the noise run's
    envelope (see :data:`DRIFT_K`): per step the relative drifts, the envelope so far (times
    ``scale``: a coarser candidate rounds at its own precision) and the ratio; ``left_at`` is
    the first step where the candidate's drift exceeds ``DRIFT_K`` x the envelope and
    :data:`DRIFT_MIN` (None: it stays inside).

    Example:
        >>> judge_drift([1.0, 0.9, 0.8], [1.0, 0.9, 0.88], [1.0, 0.9000001, 0.8])["left_at"]
        2
    """
    def rel(x: float, r: float) -> float:
        if not math.isfinite(x):
            return 0.0 if x == r else math.inf
        return abs(x - r) / max(abs(r), 1e-12)

    env = 0.0
    rows: list[dict[str, float]] = []
    left: int | None = None
    for k, (r, c, n) in enumerate(zip(ref, cand, noise)):
        dc, dn = rel(c, r), rel(n, r)
        env = max(env, dn)
        floor = max(env, unit_roundoff("float32")) * scale
        rows.append({"step": k, "cand": dc, "noise": dn, "envelope": floor,
                     "ratio": dc / floor})
        if left is None and dc > max(DRIFT_K * floor, DRIFT_MIN):
            left = k
    return {"cand_drift": max((x["cand"] for x in rows), default=0.0),
            "noise_drift": max((x["noise"] for x in rows), default=0.0),
            "largest_ratio": max((x["ratio"] for x in rows), default=0.0),
            "bound_factor": DRIFT_K, "left_at": left, "per_step": rows}


def _precision_scale(run: StepRun) -> float:
    """How much coarser the candidate's float parameters are than the reference's (1 when not
    coarser or unknown)."""
    def unit(st: Any) -> float:
        dts = [d for d in getattr(st, "dtypes", {}).values() if d in ("float16", "bfloat16",
                                                                      "float32", "float64")]
        return max((unit_roundoff(d) for d in dts), default=0.0)

    r = unit(run.ref_starts[0]) if run.ref_starts else 0.0
    c = max((unit(st) for st in run.cand_starts.values()), default=0.0)
    return max(1.0, c / r) if r > 0 and c > 0 else 1.0


def judge_eval(run: StepRun, mapping: dict[str, Any]) -> Phase:
    """Evaluation of the converted initial weights on both sides (forward-only traces)."""
    ev = Phase("eval")
    if run.eval_skipped or run.ref_eval_trace is None or run.cand_eval_trace is None:
        ev.status, ev.summary = "skipped", run.eval_skipped or "not run"
        return ev
    m_ref, m_cand = run.eval_metrics.get("ref"), run.eval_metrics.get("cand")
    re = compare(run.ref_eval_trace, run.cand_eval_trace, mapping=mapping, level="module",
                 rtol=run.rtol, atol=run.atol, noise_run=run.eval_noise_trace)
    if run.eval_noise_trace is not None:
        ev.evidence["calibrated_by"] = "the reference's evaluation noise run"
    ev.evidence.update({"ref": m_ref, "cand": m_cand})
    de = re.first_divergence
    if de is not None and de.status == "fail":
        ev.status, ev.where = "fail", de.module or de.op
        ev.evidence.update({"verdict": de.verdict, "metrics": de.metrics})
        losses = (m_ref or {}).get("loss"), (m_cand or {}).get("loss")
        ev.summary = (f"evaluation diverges first at {de.module or '<root>'} ({de.verdict})"
                      + (f"; eval loss {losses[0]:.5g} vs {losses[1]:.5g}"
                         if all(isinstance(x, float) for x in losses) else ""))
    else:
        ev.summary = "evaluation outputs agree"
    return ev


def numerics_summary(n: Any) -> dict[str, Any]:
    """The part of a side's numerics verdict the step report keeps: healthy, the problems,
    where the first NaN/Inf came from (``netparity numerics TRACE`` has the rest)."""
    d = n.to_json()
    return {"healthy": bool(n), "problems": list(n.problems),
            "first_nonfinite": d.get("first_nonfinite"), "live_stop": d.get("live_stop")}


def step_numerics(run: StepRun) -> dict[str, Any]:
    """Each side's numerics verdict (trace analysis of NaN/Inf, overflow, loss scale, weights
    not updating); a side whose trace cannot be analysed is left out, with a note."""
    from netparity.analyzers.numerics import analyze
    from netparity.errors import NetparityError

    out: dict[str, Any] = {}
    for side, path in (("ref", run.ref_trace), ("cand", run.cand_trace)):
        if path is None:
            continue
        try:
            out[side] = analyze(path)
        except NetparityError as e:
            run.notes.append(f"numerics of the {side} trace not analysed: {e}")
    return out


def diagnose_step(run: StepRun) -> StepResult:
    """Judge every phase of what the workflow ran; the first failing phase is the answer.

    Phases after the setup are skipped when the setup fails (nothing was trained then).
    """
    phases = {name: Phase(name) for name in PHASES}
    phases["setup"] = judge_setup(run.setup)
    result = StepResult(
        phases=[], ref={**run.ref, "params": run.setup.ref_counts},
        cand={**run.cand, "params": run.setup.cand_counts},
        losses=dict(run.losses), lr=dict(run.lr), out_dir=run.out_dir, notes=list(run.notes),
    )
    if phases["setup"].status == "fail" or run.ref_trace is None or run.cand_trace is None:
        for name in PHASES[1:]:
            phases[name].status = "skipped"
            phases[name].summary = "not run: the two sides do not start from the same weights"
        result.phases = list(phases.values())
        return result
    phases["data"] = judge_data(run.ref_batches, run.cand_batches, run.steps, run.data_atol)
    ref_to_cand = run.setup.ref_to_cand()
    mapping = name_mapping(ref_to_cand)
    r0 = compare(run.ref_trace, run.cand_trace, mapping=mapping, level=run.level, steps=[0],
                 rtol=run.rtol, atol=run.atol, noise_run=run.noise_trace)
    result.compare_step0 = r0
    result.numerics = step_numerics(run)
    result.notes = list(run.notes)
    order = param_order(r0)
    phases["forward"] = judge_forward(r0)
    phases["loss"] = judge_loss(r0, run.losses["ref"][0], run.losses["cand"][0],
                                loss_gradient_scale(run, 0))
    phases["backward"] = judge_backward(r0, order)
    deltas = update_deltas(run.ref_before, run.cand_before, open_trace(Path(run.ref_trace)),
                           open_trace(Path(run.cand_trace)), ref_to_cand, 0,
                           open_trace(Path(run.noise_trace)) if run.noise_trace else None)
    settings = optimizer_mismatch(*run.optimizer_settings, ref_to_cand, order)
    phases["update"] = judge_update(r0, deltas, order, rate_facts(run), settings)
    if run.opt_replay:
        from netparity.analyzers.replay import refine_update

        replayed, why, info = run.opt_replay.get(0, ([], "", {}))
        phases["update"] = refine_update(phases["update"], r0, replayed, why, order,
                                         rate_facts(run), settings, info)
    phases["later-steps"] = judge_later_steps(run, mapping, order)
    phases["eval"] = judge_eval(run, mapping)
    result.phases = list(phases.values())
    # Phases after the first failure usually fail because of it: say so instead of hiding them.
    first = result.first
    if first is not None:
        for p in result.phases[result.phases.index(first) + 1:]:
            if p.status == "fail":
                p.summary += f" (may follow from the {first.name} divergence)"
    return result
