"""The one-step parity workflow: "reproduce a single step first", automated.

The migration guides' method for a network whose training does not match is to make one
training step agree before anything else: same weights, same data, then forward, loss,
backward and the optimizer update, checked in that order; then a few more steps; then
evaluation. :func:`run_step_parity` does exactly that for two specs (see
:mod:`netparity.workflow.spec`) and names the first phase that diverges, where, and why:

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

Example:
    >>> from netparity.workflow.step import run_step_parity                    # doctest: +SKIP
    >>> r = run_step_parity("ref_spec.py", "cand_spec.py", "runs/step")        # doctest: +SKIP
    >>> r.first_phase, r.where                                                 # doctest: +SKIP
    ('forward', 'layer2.0.conv2')
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from netparity.errors import UsageError
from netparity.workflow.spec import Spec, load_spec

PHASES = ("setup", "data", "forward", "loss", "backward", "update", "later-steps", "eval")
RESULT_VERSION = 1


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
    """What :func:`run_step_parity` found. Truthy when every phase passes."""

    phases: list[Phase]
    ref: dict[str, Any]
    cand: dict[str, Any]
    losses: dict[str, list[float]]
    lr: dict[str, list[float] | None]
    out_dir: str
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    compare_step0: Any = None  # CompareResult of step 0 (not serialised here: see its JSON)

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
        }


# ---------------------------------------------------------------------------------------------
def _module_of(param: str) -> str:
    return param.rsplit(".", 1)[0] if "." in param else ""


def _max_rel(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    a64 = np.asarray(a, dtype=np.float64)
    b64 = np.asarray(b, dtype=np.float64)
    if a64.shape != b64.shape:
        return math.inf, math.inf
    d = np.abs(a64 - b64)
    max_abs = float(d.max()) if d.size else 0.0
    scale = float(np.sqrt(np.mean(a64 * a64))) if a64.size else 0.0
    return max_abs, (max_abs / scale if scale else max_abs)


def _setup_phase(ref: Spec, cand: Spec, phase: Phase) -> tuple[dict[str, str], dict[str, Any]]:
    """Counts, name map, weight conversion and its verification. Returns (ref->cand, info)."""
    from netparity.ckpt.mapping import map_names, state_of
    from netparity.frameworks.models import param_counts, set_weights

    rc, cc = param_counts(ref.model), param_counts(cand.model)
    info: dict[str, Any] = {"ref_counts": asdict(rc), "cand_counts": asdict(cc)}
    nm = map_names(ref.model, cand.model)
    how = "automatic"
    if not nm and cand.name_map:
        # The spec knows better than a guess: use its map, but say so.
        from netparity.errors import MappingError

        user = {r: c for c, r in cand.name_map.items()}
        try:
            nm = map_names(ref.model, cand.model, mapping={"params": user})
            how = "spec name_map"
        except MappingError as e:  # e.g. the spec's own map pairs tensors of different shapes
            phase.status, phase.summary = "fail", str(e)
            phase.where = str(e).split(": ", 1)[-1].split(" ", 1)[0]
            phase.evidence = {"ref_counts": asdict(rc), "cand_counts": asdict(cc)}
            return {}, phase.evidence
    info["name_map"] = {"how": how, "pairs": len(nm.pairs), "by": nm.counts(),
                        "unmatched_ref": nm.unmatched_ref[:20],
                        "unmatched_cand": nm.unmatched_cand[:20],
                        "ambiguous": dict(list(nm.ambiguous.items())[:20]),
                        "dropped": len(nm.dropped_ref) + len(nm.dropped_cand)}
    if cand.name_map and how == "automatic":
        disagree = [(c, r) for c, r in cand.name_map.items()
                    if nm.cand_to_ref().get(c, r) != r]
        if disagree:
            info["name_map"]["disagrees_with_spec"] = disagree[:10]
    problems: list[str] = []
    if rc.trainable != cc.trainable:
        problems.append(f"trainable parameters differ: {rc.trainable:,} vs {cc.trainable:,}")
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
        phase.evidence = info
        return nm.ref_to_cand(), info
    # Convert and load the reference's weights into the candidate; then check they landed.
    rs = state_of(ref.model)
    arrays: dict[str, np.ndarray] = {}
    for p in nm.pairs:
        a = np.asarray(rs[p.ref])
        if tuple(a.shape) != tuple(p.cand_shape):
            a = a.reshape(p.cand_shape)  # layout conversions the map allows (e.g. Conv1d)
        arrays[p.cand] = a
    set_weights(cand.model, arrays, {p.cand: rs.dtypes[p.ref] for p in nm.pairs
                                      if rs.dtypes.get(p.ref) == "bfloat16"})
    cs = state_of(cand.model)
    worst = ("", 0.0)
    for p in nm.pairs:
        d, _ = _max_rel(np.asarray(rs[p.ref]).reshape(-1), np.asarray(cs[p.cand]).reshape(-1))
        if d > worst[1]:
            worst = (p.ref, d)
    info["weights_loaded"] = len(arrays)
    info["max_weight_diff_after_load"] = worst[1]
    if worst[1] > 0:
        phase.status = "fail"
        phase.where = worst[0]
        phase.summary = f"converted weights did not load exactly ({worst[0]} differs by {worst[1]:.3g})"
    else:
        phase.summary = (f"{rc.trainable:,} trainable parameters on both sides; "
                         f"{len(nm.pairs)} tensors mapped ({how}: "
                         + ", ".join(f"{k} {v}" for k, v in nm.counts().items())
                         + "), converted and loaded exactly")
    phase.evidence = info
    return nm.ref_to_cand(), info


def _data_phase(ref: Spec, cand: Spec, steps: int, phase: Phase, atol: float) -> None:
    n = min(len(ref.batches), len(cand.batches))
    if n < steps:
        raise UsageError(f"the specs provide {n} batch(es) but {steps} step(s) were asked for")
    rows: list[dict[str, Any]] = []
    for i in range(steps):
        (rx, ry), (cx, cy) = ref.batches[i], cand.batches[i]
        x_abs, x_rel = _max_rel(rx, cx)
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


def _train(spec: Spec, batches: list[tuple[np.ndarray, np.ndarray]], path: Path, steps: int,
           level: str, payload: str, *,
           before_step: Callable[[int, Any], None] | None = None,
           after_step: Callable[[int], None] | None = None) -> list[float]:
    """Run ``steps`` training steps under capture; returns the losses.

    ``before_step(i, cap)`` runs before step ``i`` (the candidate loads the reference's state
    there, under ``cap.paused()``); ``after_step(i)`` after it (the reference's state is taken).
    """
    import netparity
    from netparity.frameworks.models import as_tensor, scalar_tensor

    losses: list[float] = []
    with netparity.capture(spec.model, str(path), level=level, payload=payload,
                           optimizer=spec.optimizer, overwrite=True,
                           manifest={"spec": spec.source, "spec_options": _jsonable(spec.options)},
                           **_framework_options(spec)) as cap:
        for i in range(steps):
            if before_step is not None:
                before_step(i, cap)
            x, y = batches[i]
            cap.record("inputs", as_tensor(x, spec.framework), kind="data")
            cap.record("labels", as_tensor(np.asarray(y).astype(np.int64), spec.framework),
                       kind="data")
            loss = float(spec.train_step(x, y))
            losses.append(loss)
            cap.record_loss(scalar_tensor(loss, spec.framework))
            cap.step()
            if after_step is not None:
                after_step(i)
    return losses


def _to_candidate(state: Any, ref_to_cand: dict[str, str],
                  cand_shapes: dict[str, tuple[int, ...]]) -> tuple[dict[str, np.ndarray],
                                                                    dict[str, str]]:
    """The reference's state under the candidate's names and shapes (+ bf16 dtypes to decode)."""
    arrays: dict[str, np.ndarray] = {}
    bf16: dict[str, str] = {}
    for r, c in ref_to_cand.items():
        if r not in state or c not in cand_shapes:
            continue
        a = np.asarray(state[r])
        if tuple(a.shape) != cand_shapes[c]:
            a = a.reshape(cand_shapes[c])  # layout conversions the map allows (e.g. Conv1d)
        arrays[c] = a
        if state.dtypes.get(r) == "bfloat16":
            bf16[c] = "bfloat16"
    return arrays, bf16


def _evaluate(spec: Spec, path: Path, level: str, payload: str) -> dict[str, Any] | None:
    """Run the spec's evaluation under a forward-only capture."""
    import netparity

    if spec.eval is None:
        return None
    with netparity.capture(spec.model, str(path), level=level, payload=payload,
                           directions=("forward",), overwrite=True,
                           **_framework_options(spec)) as cap:
        metrics = spec.eval()
        cap.step()
    return {k: (float(v) if isinstance(v, (int, float, np.floating, np.integer)) else v)
            for k, v in (metrics or {}).items()}


def _framework_options(spec: Spec) -> dict[str, Any]:
    """Capture options for one framework. MindSpore on CPU runs operators synchronously under
    capture (``launch_blocking``): each statistics read would otherwise wait for the
    asynchronous executor, and this process is the workflow's own."""
    if spec.framework != "mindspore":
        return {}
    import mindspore as ms

    return {"launch_blocking": ms.get_context("device_target") == "CPU"}


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (v if isinstance(v, (int, float, str, bool, type(None))) else str(v))
            for k, v in d.items()}


def _param_order(result: Any) -> dict[str, int]:
    """Execution order of modules in the reference forward (params sort by their module)."""
    order: dict[str, int] = {}
    for c in sorted(result.calls, key=lambda c: c.order):
        if c.direction == "forward" and c.level == "module" and c.module not in order:
            # A parent returns after its children; use the first time a path is seen so that
            # layer1.0.conv1 sorts before layer1.0.
            order[c.module] = len(order)
    return order


def _first_param(pairs: list[Any], order: dict[str, int]) -> Any:
    def key(p: Any) -> tuple[int, int, str]:
        mod = _module_of(p.module)
        # Parameters of modules never seen in forward (e.g. unused heads) sort last.
        return (order.get(mod, 10**9), 0 if p.status == "fail" else 1, p.module)

    return min(pairs, key=key)


def _update_deltas(ref_before: dict[str, np.ndarray], cand_before: dict[str, np.ndarray],
                   ref_tr: Any, cand_tr: Any, ref_to_cand: dict[str, str],
                   step: int) -> list[dict[str, Any]]:
    """Compare the optimizer's *updates* (after - before) parameter by parameter.

    Optimizer bugs barely move parameter values (an extra weight decay of 1/32768 changes a
    BatchNorm gamma by ~3e-7 in one step) but change the update by a visible fraction. For each
    parameter: the normwise error of the update, its ratio to the reference's update (uniform
    ratios across parameters mean a learning-rate difference), and how much of the difference is
    proportional to the parameter itself (a weight-decay difference).
    """
    ref_after = {r.module: r for r in ref_tr.records(step=step, kind="param")}
    cand_after = {r.module: r for r in cand_tr.records(step=step, kind="param")}
    grad_noise = _grad_noise(ref_tr, cand_tr, ref_to_cand, step)
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
        p0 = np.asarray(ref_before[name], np.float64).ravel()
        d_ref = np.asarray(ref_tr.tensor(rec), np.float64).ravel() - p0
        d_cand = np.asarray(cand_tr.tensor(crec), np.float64).ravel() - np.asarray(
            cand_before[cname], np.float64).ravel()
        if d_ref.size != d_cand.size:
            continue
        nr = float(np.linalg.norm(d_ref))
        dd = d_cand - d_ref
        ndd = float(np.linalg.norm(dd))
        pp = float(np.dot(p0, p0))
        c = float(np.dot(dd, p0) / pp) if pp > 0 else 0.0
        explained = 1.0 - float(np.linalg.norm(dd - c * p0)) ** 2 / ndd**2 if ndd > 0 else 0.0
        out.append({
            "round_noise": _rounding_noise(p0, rec.dtype) / nr if nr > 0 else 0.0,
            "param": name, "cand_param": cname,
            "rel_err": ndd / nr if nr > 0 else (0.0 if ndd == 0 else math.inf),
            "ratio": float(np.dot(d_cand, d_ref) / nr**2) if nr > 0 else math.nan,
            "decay_coef": c,  # d_cand - d_ref ~= c * param_before
            "decay_explained": explained,
            "decay_signal": abs(c) * math.sqrt(pp) / nr if nr > 0 else 0.0,
            "grad_noise": grad_noise.get(name, 0.0),
        })
    return out


def _rounding_noise(values: np.ndarray, dtype: str) -> float:
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


def _grad_noise(ref_tr: Any, cand_tr: Any, ref_to_cand: dict[str, str],
                step: int) -> dict[str, float]:
    """Per parameter, the largest normwise relative difference between the two sides' gradients
    over steps 0..``step`` -- the noise the optimizer's state and update carry.

    An update is a function of this step's gradient and (momentum, Adam moments) of earlier ones:
    when the gradients differ by rounding noise of a few percent (they do: ReLU decisions flip
    and BatchNorm's backward spreads it), the updates differ by as much; Adam even turns a
    gradient that is pure noise (zero in exact arithmetic) into a full-size update. Judging the
    update against the noise its own gradients carry keeps that from becoming a verdict.
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


#: update differences below this (normwise, relative to the update) are gradient noise (the
#: backward bound of the cross-framework comparison: updates carry the gradients' noise)
UPDATE_NOISE = 5e-2
#: an update may differ by this many times the relative difference of the gradients it was
#: made from (``_grad_noise``): the optimizer carries gradient noise into the update, and momentum
#: adds that of earlier steps
GRAD_NOISE_FACTOR = 3.0
#: a difference proportional to the parameter must explain this much of the update difference
DECAY_EXPLAINED = 0.9
#: ...and be at least this large relative to the update, to be called a weight-decay difference
DECAY_SIGNAL = 2e-3


def _optimizer_mismatch(ref: Spec, cand: Spec, ref_to_cand: dict[str, str],
                        order: dict[str, int]) -> dict[str, Any] | None:
    """Per-parameter optimizer settings (weight decay, momentum) that differ between the sides."""
    from netparity.frameworks.models import optimizer_settings

    rs = optimizer_settings(ref.optimizer, ref.model)
    cs = optimizer_settings(cand.optimizer, cand.model)
    bad = []
    for rname, cname in ref_to_cand.items():
        a, b = rs.get(rname), cs.get(cname)
        if a is None or b is None:
            continue
        for key in ("weight_decay", "momentum"):
            if not math.isclose(a[key], b[key], rel_tol=1e-5, abs_tol=1e-12):
                bad.append({"param": rname, "cand_param": cname, "setting": key.replace("_", " "),
                            "ref": a[key], "cand": b[key]})
                break
    if not bad:
        return None
    first = min(bad, key=lambda d: (order.get(_module_of(d["param"]), 10**9), d["param"]))
    return {"kind": "settings", "first": first, "params": [d["param"] for d in bad],
            "checked": len(rs)}


def _judge_updates(deltas: list[dict[str, Any]], order: dict[str, int],
                   lr_ref: float | None) -> dict[str, Any] | None:
    """Name the optimizer difference the update deltas show, or None when they agree."""
    if not deltas:
        return None

    def pos(d: dict[str, Any]) -> tuple[int, str]:
        return (order.get(_module_of(d["param"]), 10**9), d["param"])

    ratios = np.array([d["ratio"] for d in deltas if math.isfinite(d["ratio"])])
    if ratios.size >= 3:
        med = float(np.median(ratios))
        spread = float(np.median(np.abs(ratios - med)))
        if abs(med - 1.0) > UPDATE_NOISE and spread < 0.05 * max(abs(med), 1e-3):
            first = min(deltas, key=pos)
            return {"kind": "learning-rate", "first": first, "median_ratio": med,
                    "spread": spread, "params": int(ratios.size)}
    decay = [d for d in deltas if d["decay_explained"] > DECAY_EXPLAINED
             and d["decay_signal"] > DECAY_SIGNAL]
    if decay:
        first = min(decay, key=pos)
        extra = -first["decay_coef"] / lr_ref if lr_ref else None
        return {"kind": "weight-decay", "first": first, "params": [d["param"] for d in decay],
                "extra_weight_decay": extra}
    bad = [d for d in deltas
           if d["rel_err"] > max(UPDATE_NOISE, GRAD_NOISE_FACTOR * d.get("grad_noise", 0.0))
           + GRAD_NOISE_FACTOR * d.get("round_noise", 0.0)]
    if bad:
        return {"kind": "update", "first": min(bad, key=pos), "params": [d["param"] for d in bad]}
    return None


def _noise_run(src: str, options: dict[str, Any], seed: int,
               batches: list[tuple[np.ndarray, np.ndarray]], path: Path, steps: int, level: str,
               payload: str, starts: list[Any]) -> list[float]:
    """Capture the reference's noise run into ``path``; returns its losses.

    A fresh build of the reference spec; before step ``i`` every float parameter and buffer is
    set to ``starts[i]`` (the reference's state at the start of that step) moved one ulp, and
    the inputs are moved one ulp as well (labels untouched).
    """
    from netparity.compare.noise import perturb_last_bit
    from netparity.frameworks.models import set_weights
    from netparity.seeding import seed_everything

    seed_everything(seed)
    spec = load_spec(src, **options)
    rng = np.random.default_rng(seed + 7919)
    noisy = [(perturb_last_bit(np.asarray(x), rng), y) for x, y in batches]

    def start(i: int, cap: Any) -> None:
        st = starts[i]
        arrays = {k: perturb_last_bit(np.asarray(v), rng) for k, v in st.items()
                  if st.dtypes.get(k) != "bfloat16"}
        with cap.paused():
            set_weights(spec.model, arrays)

    return _train(spec, noisy, path, steps, level, payload, before_step=start)


def _free_run(src: str, options: dict[str, Any], seed: int,
              batches: list[tuple[np.ndarray, np.ndarray]], steps: int,
              init: tuple[dict[str, np.ndarray], dict[str, str]] | None = None,
              perturb: bool = False) -> list[float]:
    """Losses of ``steps`` uncaptured steps of a freshly built spec, free-running.

    ``init`` loads (arrays, bf16 dtypes) first; ``perturb`` moves every float parameter by one
    ulp up or down at random (a seeded "noise run": the same computation, last-bit different).
    """
    from netparity.ckpt.mapping import state_of
    from netparity.frameworks.models import set_weights
    from netparity.seeding import seed_everything

    seed_everything(seed)
    spec = load_spec(src, **options)
    if init is not None:
        set_weights(spec.model, init[0], init[1])
    if perturb:
        from netparity.compare.noise import perturb_last_bit

        rng = np.random.default_rng(seed + 1)
        st = state_of(spec.model)
        set_weights(spec.model, {k: perturb_last_bit(np.asarray(v), rng) for k, v in st.items()
                                 if st.dtypes.get(k) != "bfloat16"})
    return [float(spec.train_step(x, y)) for x, y in batches[:steps]]


def _later_step_divergence(r: Any, step: int, deltas: list[dict[str, Any]],
                           order: dict[str, int], lr_ref: float | None
                           ) -> tuple[str, str, str] | None:
    """The first phase of a resynchronised later step that diverges: (phase, where, why)."""
    d = r.first_divergence
    if d is not None and d.status == "fail":
        return ("forward", d.module or d.op,
                f"forward diverges first at {d.module or '<root>'} ({d.op}, {d.verdict})")
    bad_loss = [p for p in r.loss if p.step == step and p.status == "fail"]
    if bad_loss:
        return "loss", "loss", "the loss differs while every forward output agrees"
    db = r.first_backward
    if db is not None and db.status == "fail":
        return ("backward", db.module or db.op,
                f"gradient flowing back diverges first at {db.module or '<root>'} ({db.verdict})")
    grads = [g for g in r.divergent_params("grad") if g.status == "fail"]
    if grads:
        g = _first_param(grads, order)
        return "backward", _module_of(g.module), f"parameter gradient {g.module} diverges"
    params = [p for p in r.divergent_params("param") if p.status == "fail"]
    verdict = _judge_updates(deltas, order, lr_ref)
    if verdict is not None:
        f = verdict["first"]
        if verdict["kind"] == "learning-rate":
            return ("update", "optimizer (learning rate)",
                    f"every parameter's update is {verdict['median_ratio']:.4g}x the reference's: "
                    "the learning rate differs at this step")
        return ("update", _module_of(f["param"]),
                f"the update of {f['param']} differs by {f['rel_err']:.3g} (normwise, relative "
                f"to the update; {verdict['kind']})")
    if params:
        p = _first_param(params, order)
        return "update", _module_of(p.module), f"{p.module} differs after the optimizer step"
    return None


def run_step_parity(
    ref_spec: str | Spec,
    cand_spec: str | Spec,
    out_dir: str | Path,
    *,
    steps: int = 3,
    options: dict[str, Any] | None = None,
    ref_options: dict[str, Any] | None = None,
    cand_options: dict[str, Any] | None = None,
    level: str = "module",
    payload: str = "tensors",
    seed: int = 0,
    rtol: float | None = None,
    atol: float | None = None,
    data_atol: float = 1e-5,
    run_eval: bool = True,
    overwrite: bool = True,
    free_running: bool = True,
    noise: bool = True,
) -> StepResult:
    """Run the one-step parity workflow (see the module docstring).

    A MindSpore side on CPU is captured with ``launch_blocking=True`` (see
    :func:`netparity.frameworks.mindspore_capture.capture`): the calling process keeps
    MindSpore's synchronous launches afterwards.

    Args:
        ref_spec, cand_spec: spec files/modules (or already-built :class:`Spec` objects).
        out_dir: where traces and reports go (``ref/``, ``cand/``, ``ref-eval/``, ...).
        steps: training steps to run and compare (the first one in full detail).
        options: passed to both specs' ``build``; ``ref_options`` / ``cand_options`` add to it.
        level: capture level for the training steps (``module``, ``op`` or ``both``).
        payload: capture payload (``tensors`` gives full metrics; ``stats`` is lighter).
        seed: given to :func:`netparity.seed_everything` before each side is built.
        rtol, atol: comparison tolerances (default: the comparison's cross-framework table).
        data_atol: largest absolute difference tolerated between the two sides' batches.
        run_eval: also compare evaluation after training.
        overwrite: replace earlier traces in ``out_dir``.
        free_running: also run both sides free (uncaptured) from the common initial weights,
            and the reference once more with last-bit perturbed weights, for the loss curves
            and the drift envelope in the report (specs given as files/modules only).
        noise: capture a noise run of the reference (``ref-noise/``: the same steps with every
            weight and input one ulp off) and judge every tensor pair against its own noise
            (:mod:`netparity.compare.noise`); specs given as files/modules only.

    Returns:
        A :class:`StepResult`; ``first_phase`` / ``where`` name the first divergence.
    """
    from netparity.ckpt.mapping import state_of
    from netparity.compare.engine import compare
    from netparity.seeding import seed_everything
    from netparity.trace import open_trace

    t0 = time.perf_counter()
    if steps < 1:
        raise UsageError("steps must be >= 1")
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise UsageError(f"{out} is not empty; pass overwrite=True or choose another directory")
    out.mkdir(parents=True, exist_ok=True)
    for sub in ("ref", "cand", "ref-noise", "ref-eval", "cand-eval"):
        if (out / sub / "manifest.json").exists():
            shutil.rmtree(out / sub)
    opts = dict(options or {})
    sides = []
    for src, extra in ((ref_spec, ref_options), (cand_spec, cand_options)):
        if isinstance(src, Spec):
            sides.append(src)
            continue
        seed_everything(seed)
        sides.append(load_spec(src, **{**opts, **(extra or {})}))
    ref, cand = sides
    phases = {name: Phase(name) for name in PHASES}
    notes: list[str] = []
    result = StepResult(
        phases=list(phases.values()),
        ref={"spec": ref.source, "framework": ref.framework, "description": ref.description},
        cand={"spec": cand.source, "framework": cand.framework, "description": cand.description},
        losses={}, lr={"ref": ref.lr_schedule, "cand": cand.lr_schedule}, out_dir=str(out),
        notes=notes,
    )

    def skip_rest(after: str, why: str) -> None:
        for name in PHASES[PHASES.index(after) + 1:]:
            phases[name].status = "skipped"
            phases[name].summary = why

    # 1. setup: counts, mapping, weights.
    ref_to_cand, info = _setup_phase(ref, cand, phases["setup"])
    result.ref["params"] = info["ref_counts"]
    result.cand["params"] = info["cand_counts"]
    if phases["setup"].status == "fail":
        skip_rest("setup", "not run: the two sides do not start from the same weights")
        result.seconds = time.perf_counter() - t0
        return result
    # 2. data.
    _data_phase(ref, cand, steps, phases["data"], data_atol)
    batches = ref.batches  # both sides get the reference's batches from here on
    # 3. training steps under capture.
    ref_state0, cand_state0 = state_of(ref.model), state_of(cand.model)
    ref_before, cand_before = dict(ref_state0), dict(cand_state0)
    # Every later step k starts both sides from the same state: the reference's parameters and
    # buffers after step k-1, converted into the candidate (its optimizer state and step counters
    # stay its own). Free-running, two faithful runs drift apart by rounding noise that training
    # amplifies (1 vs 2 threads of the same PyTorch run: 6.7% apart in loss at step 2 of the demo),
    # so only a common start lets step k be judged like step 0 and a bug that shows only at step
    # k (a schedule, a momentum buffer, a counter) be named at that step and place.
    ref_states: list[Any] = []  # reference state after steps 0..steps-2
    cand_starts: dict[int, Any] = {}  # candidate state at the start of steps 1..steps-1
    cand_shapes = {k: tuple(np.shape(v)) for k, v in cand_state0.items()}

    def keep_ref_state(i: int) -> None:
        if i < steps - 1:
            ref_states.append(state_of(ref.model))

    def start_from_ref(i: int, cap: Any) -> None:
        if i == 0:
            return
        from netparity.frameworks.models import set_weights

        arrays, bf16 = _to_candidate(ref_states[i - 1], ref_to_cand, cand_shapes)
        with cap.paused():
            set_weights(cand.model, arrays, bf16)
            cand_starts[i] = state_of(cand.model)

    result.losses["ref"] = _train(ref, batches, out / "ref", steps, level, payload,
                                  after_step=keep_ref_state)
    noise_dir: Path | None = None
    if noise and isinstance(ref_spec, str):
        # The noise run: the reference again, every step started from the reference's state with
        # each float weight and input one ulp off at random; its distance from the reference is
        # each tensor's own rounding noise, which the comparisons below judge against.
        noise_dir = out / "ref-noise"
        result.losses["ref_noise_steps"] = _noise_run(
            ref_spec, {**opts, **(ref_options or {})}, seed, batches, noise_dir, steps, level,
            payload, [ref_state0, *ref_states])
    elif noise:
        notes.append("no noise run: the reference was given as a built Spec (it cannot be "
                     "rebuilt fresh); pairs are judged by the tolerance table")
    result.losses["cand"] = _train(cand, batches, out / "cand", steps, level, payload,
                                   before_step=start_from_ref)
    mapping = {
        "modules": {_module_of(r): _module_of(c) for r, c in ref_to_cand.items()
                    if _module_of(r) and _module_of(c)},
        "params": ref_to_cand,
    }
    tol: dict[str, Any] = {"rtol": rtol, "atol": atol}
    r0 = compare(out / "ref", out / "cand", mapping=mapping, level=level, steps=[0],
                 noise_run=noise_dir, **tol)
    result.compare_step0 = r0
    order = _param_order(r0)
    # 4. forward.
    fwd = phases["forward"]
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
    # 5. loss.
    lp = [p for p in r0.loss if p.step == 0]
    lossph = phases["loss"]
    rl, cl = result.losses["ref"][0], result.losses["cand"][0]
    lossph.evidence = {"ref": rl, "cand": cl, "abs_diff": abs(rl - cl)}
    if lp and lp[0].status == "fail":
        lossph.status, lossph.step, lossph.where = "fail", 0, "loss"
        lossph.summary = f"step-0 loss {rl:.7g} vs {cl:.7g} (difference {abs(rl - cl):.3g})"
    else:
        lossph.summary = f"step-0 loss {rl:.7g} vs {cl:.7g}"
    # 6. backward.
    bwd = phases["backward"]
    grads = r0.divergent_params("grad")
    db = r0.first_backward
    if db is not None and db.status == "fail":
        bwd.status, bwd.where, bwd.step = "fail", db.module or db.op, db.step
        bwd.summary = f"gradient flowing back diverges first at {db.module or '<root>'} ({db.verdict})"
        bwd.evidence = {"verdict": db.verdict, "metrics": db.metrics}
    if grads and any(g.status == "fail" for g in grads):
        g = _first_param([g for g in grads if g.status == "fail"], order)
        if bwd.status != "fail":
            bwd.status, bwd.where, bwd.step = "fail", _module_of(g.module), 0
            bwd.summary = f"parameter gradient {g.module} diverges first"
        bwd.evidence.update({"first_grad": g.module, "grads_diverging": len(grads),
                             "grad_metrics": g.metrics})
    if bwd.status == "pass":
        n = sum(1 for p in r0.params if p.kind == "grad")
        bwd.summary = f"{n} parameter gradients agree" + (
            "" if n else " (no gradients captured)")
    # 7. update: parameter values after the step, then the updates themselves.
    upd = phases["update"]
    params = [p for p in r0.divergent_params("param") if p.status == "fail"]
    deltas = _update_deltas(ref_before, cand_before, open_trace(out / "ref"),
                            open_trace(out / "cand"), ref_to_cand, 0)
    lr_ref = ref.lr_schedule[0] if ref.lr_schedule else None
    verdict = _judge_updates(deltas, order, lr_ref)
    lr_note = ""
    if ref.lr_schedule and cand.lr_schedule and not math.isclose(
            ref.lr_schedule[0], cand.lr_schedule[0], rel_tol=1e-6, abs_tol=1e-12):
        lr_note = (f"; the specs' learning rates for step 0 differ: {ref.lr_schedule[0]:.6g} vs "
                   f"{cand.lr_schedule[0]:.6g}")
    settings = _optimizer_mismatch(ref, cand, ref_to_cand, order)
    if verdict is None and settings is not None:
        verdict = settings
    first_value = _first_param(params, order) if params else None
    if verdict is not None or first_value is not None:
        upd.status, upd.step = "fail", 0
        # the earliest parameter (in forward order) with either kind of difference
        cands = []
        if first_value is not None:
            cands.append((order.get(_module_of(first_value.module), 10**9), "value"))
        if verdict is not None:
            cands.append((order.get(_module_of(verdict["first"]["param"]), 10**9), "delta"))
        which = min(cands)[1] if verdict is None or verdict["kind"] != "learning-rate" else "delta"
        if which == "value":
            assert first_value is not None
            p = first_value
            upd.where = _module_of(p.module)
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
                upd.where = "optimizer (learning rate)"
                upd.summary = (f"every parameter's update is {verdict['median_ratio']:.4g}x the "
                               f"reference's ({verdict['params']} parameters): the learning rate "
                               "differs")
            elif verdict["kind"] == "settings":
                upd.where = _module_of(f["param"])
                upd.summary = (f"optimizer settings differ for {len(verdict['params'])} "
                               f"parameter(s); first: {f['param']} {f['setting']} "
                               f"{f['ref']:.6g} (reference) vs {f['cand']:.6g} (candidate)")
            elif verdict["kind"] == "weight-decay":
                upd.where = _module_of(f["param"])
                wd = verdict.get("extra_weight_decay")
                upd.summary = (f"the update of {f['param']} differs by a multiple of the parameter "
                               "itself: weight decay differs" + (
                                   f" (candidate applies {wd:.3g} more)" if wd else "")
                               + f"; {len(verdict['params'])} parameter(s) affected")
            else:
                upd.where = _module_of(f["param"])
                upd.summary = (f"the update of {f['param']} differs by {f['rel_err']:.3g} "
                               "(normwise, relative to the update)")
            upd.evidence = {k: v for k, v in verdict.items() if k != "first"}
            upd.evidence["first_param"] = f
        upd.summary += lr_note
        upd.evidence["deltas_checked"] = len(deltas)
    else:
        n = sum(1 for p in r0.params if p.kind == "param")
        upd.summary = (f"{n} parameters agree after the optimizer step; {len(deltas)} updates "
                       f"agree within {UPDATE_NOISE:g}")
    # 8. later steps: each judged like step 0, both sides starting from the reference's state.
    later = phases["later-steps"]
    if steps > 1:
        lr_, lc_ = result.losses["ref"], result.losses["cand"]
        rel = [abs(c - r) / max(abs(r), 1e-12) for r, c in zip(lr_, lc_)]
        later.evidence = {"loss_rel_diff": rel, "resynchronised": True}
        ref_tr, cand_tr = open_trace(out / "ref"), open_trace(out / "cand")
        for k in range(1, steps):
            rk = compare(out / "ref", out / "cand", mapping=mapping, level=level, steps=[k],
                         noise_run=noise_dir, **tol)
            lr_k = ref.lr_schedule[k] if ref.lr_schedule and len(ref.lr_schedule) > k else None
            found = _later_step_divergence(
                rk, k, _update_deltas(ref_states[k - 1], cand_starts[k], ref_tr, cand_tr,
                                      ref_to_cand, k), order, lr_k)
            if found is not None:
                what, where, why = found
                later.status, later.step, later.where = "fail", k, where
                later.summary = (f"step {k} ({what}), both sides started from the reference's "
                                 f"state after step {k - 1}: {why}; loss {lr_[k]:.7g} vs "
                                 f"{lc_[k]:.7g}")
                later.evidence["phase"] = what
                break
        else:
            later.summary = (f"steps 1-{steps - 1} agree in every phase, each started from the "
                             f"reference's state (largest loss difference {max(rel[1:]):.2g}, "
                             "relative)")
        if free_running and isinstance(ref_spec, str) and isinstance(cand_spec, str):
            # Free-running curves for the report, with the drift the reference shows against
            # its own last-bit noise run: information, not a verdict (steps are judged above).
            ro = {**opts, **(ref_options or {})}
            co = {**opts, **(cand_options or {})}
            noise = _free_run(ref_spec, ro, seed, batches, steps, perturb=True)
            free = _free_run(cand_spec, co, seed, batches, steps,
                             init=_to_candidate(ref_state0, ref_to_cand, cand_shapes))
            result.losses["ref_noise"], result.losses["cand_free"] = noise, free
            drift = max(abs(c - r) / max(abs(r), 1e-12) for r, c in zip(lr_, free))
            env = max(abs(c - r) / max(abs(r), 1e-12) for r, c in zip(lr_, noise))
            later.evidence["free_running"] = {"cand": free, "ref_noise": noise,
                                              "cand_drift": drift, "noise_drift": env}
            later.summary += (f"; free-running, the candidate's loss drifts up to {drift:.2%} from "
                              f"the reference's, and the reference's own last-bit noise run "
                              f"{env:.2%}")
    else:
        later.status, later.summary = "skipped", "only one step was run"
    # 9. eval.
    ev = phases["eval"]
    if run_eval and ref.eval is not None and cand.eval is not None:
        # Evaluate the converted *initial* weights, so the verdict does not depend on how far
        # training drifted (later-steps judges that): restore both sides first.
        from netparity.frameworks.models import set_weights

        for model, st in ((ref.model, ref_state0), (cand.model, cand_state0)):
            set_weights(model, st, {k: v for k, v in st.dtypes.items() if v == "bfloat16"})
        m_ref = _evaluate(ref, out / "ref-eval", "module", payload)
        m_cand = _evaluate(cand, out / "cand-eval", "module", payload)
        re = compare(out / "ref-eval", out / "cand-eval", mapping=mapping, level="module", **tol)
        ev.evidence = {"ref": m_ref, "cand": m_cand}
        de = re.first_divergence
        if de is not None and de.status == "fail":
            ev.status, ev.where = "fail", de.module or de.op
            ev.summary = (f"evaluation diverges first at {de.module or '<root>'} ({de.verdict})"
                          + (f"; eval loss {m_ref.get('loss'):.5g} vs {m_cand.get('loss'):.5g}"
                             if m_ref and m_cand and isinstance(m_ref.get('loss'), float)
                             and isinstance(m_cand.get('loss'), float) else ""))
        else:
            ev.summary = "evaluation outputs agree"
    else:
        ev.status, ev.summary = "skipped", "no eval in the specs" if run_eval else "not asked"
    # Phases after the first failure usually fail because of it: say so instead of hiding them.
    first = result.first
    if first is not None:
        for p in result.phases[result.phases.index(first) + 1:]:
            if p.status == "fail":
                p.summary += f" (may follow from the {first.name} divergence)"
    result.seconds = time.perf_counter() - t0
    return result
