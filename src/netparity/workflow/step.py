"""The one-step parity workflow: "reproduce a single step first", automated.

The migration guides' method for a network whose training does not match is to make one
training step agree before anything else: same weights, same data, then forward, loss,
backward and the optimizer update, checked in that order; then a few more steps; then
evaluation. :func:`run_step_parity` *runs* that for two specs (see
:mod:`netparity.workflow.spec`): it builds both sides, maps and loads the reference's weights
into the candidate, trains a few steps under capture on the reference's batches and evaluates.
Judging the phases is the step analyzer's job (:mod:`netparity.analyzers.step`, which documents
the phases); this module hands it what it ran.

Example:
    >>> from netparity.workflow.step import run_step_parity                    # doctest: +SKIP
    >>> r = run_step_parity("ref_spec.py", "cand_spec.py", "runs/step")        # doctest: +SKIP
    >>> r.first_phase, r.where                                                 # doctest: +SKIP
    ('forward', 'layer2.0.conv2')
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from netparity.analyzers.step import (
    PHASES,
    RESULT_VERSION,
    Phase,
    SetupFacts,
    StepResult,
    StepRun,
    diagnose_step,
    judge_setup,
    load_difference,
)
from netparity.errors import UsageError
from netparity.report.progress import Progress, silent
from netparity.workflow.spec import Spec, load_spec

# the result types live with the analyzer; re-exported for the workflow's users
__all__ = ["PHASES", "RESULT_VERSION", "Phase", "StepResult", "run_step_parity"]


def _map_weights(ref: Spec, cand: Spec) -> SetupFacts:
    """Count both sides' parameters and map the reference's names onto the candidate's."""
    from netparity.ckpt.mapping import map_names
    from netparity.errors import MappingError
    from netparity.frameworks.models import param_counts

    facts = SetupFacts(ref_counts=asdict(param_counts(ref.model)),
                       cand_counts=asdict(param_counts(cand.model)),
                       spec_name_map=cand.name_map)
    facts.name_map = map_names(ref.model, cand.model)
    if not facts.name_map and cand.name_map:
        # The spec knows better than a guess: use its map, but say so.
        user = {r: c for c, r in cand.name_map.items()}
        try:
            facts.name_map = map_names(ref.model, cand.model, mapping={"params": user})
            facts.how = "spec name_map"
        except MappingError as e:  # e.g. the spec's own map pairs tensors of different shapes
            facts.name_map, facts.mapping_error = None, str(e)
    return facts


def _load_weights(ref: Spec, cand: Spec, facts: SetupFacts) -> None:
    """Convert the reference's weights and load them into the candidate; record how they landed."""
    from netparity.ckpt.mapping import state_of
    from netparity.frameworks.models import set_weights

    nm = facts.name_map
    rs = state_of(ref.model)
    arrays: dict[str, np.ndarray] = {}
    for p in nm.pairs:
        a = np.asarray(rs[p.ref])
        if tuple(a.shape) != tuple(p.cand_shape):
            a = a.reshape(p.cand_shape)  # layout conversions the map allows (e.g. Conv1d)
        arrays[p.cand] = a
    set_weights(cand.model, arrays, {p.cand: rs.dtypes[p.ref] for p in nm.pairs
                                      if rs.dtypes.get(p.ref) == "bfloat16"})
    facts.weights_loaded = len(arrays)
    facts.worst_weight = load_difference(rs, state_of(cand.model), nm.pairs)

def _train(spec: Spec, batches: list[tuple[np.ndarray, np.ndarray]], path: Path, steps: int,
           level: str, payload: str, progress: Progress) -> list[float]:
    """Run ``steps`` training steps under capture; returns the losses."""
    import netparity
    from netparity.frameworks.models import as_tensor, scalar_tensor

    losses: list[float] = []
    with netparity.capture(spec.model, str(path), level=level, payload=payload,
                           optimizer=spec.optimizer, overwrite=True,
                           manifest={"spec": spec.source, "spec_options": _jsonable(spec.options)},
                           **_framework_options(spec)) as cap:
        for i in range(steps):
            x, y = batches[i]
            cap.record("inputs", as_tensor(x, spec.framework), kind="data")
            cap.record("labels", as_tensor(np.asarray(y).astype(np.int64), spec.framework),
                       kind="data")
            loss = float(spec.train_step(x, y))
            losses.append(loss)
            cap.record_loss(scalar_tensor(loss, spec.framework))
            cap.step()
            progress.advance()
    return losses


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
    progress: Progress | None = None,
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
        progress: reports the workflow's stages as they start (see
            :mod:`netparity.report.progress`; default: silent).

    Returns:
        A :class:`StepResult`; ``first_phase`` / ``where`` name the first divergence.
    """
    from netparity.ckpt.mapping import state_of
    from netparity.seeding import seed_everything

    say = progress or silent()
    t0 = time.perf_counter()
    if steps < 1:
        raise UsageError("steps must be >= 1")
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise UsageError(f"{out} is not empty; pass overwrite=True or choose another directory")
    out.mkdir(parents=True, exist_ok=True)
    for sub in ("ref", "cand", "ref-eval", "cand-eval"):
        if (out / sub / "manifest.json").exists():
            shutil.rmtree(out / sub)
    opts = dict(options or {})
    sides = []
    say.stage("build both sides")
    for src, extra in ((ref_spec, ref_options), (cand_spec, cand_options)):
        if isinstance(src, Spec):
            sides.append(src)
            continue
        seed_everything(seed)
        sides.append(load_spec(src, **{**opts, **(extra or {})}))
    ref, cand = sides
    run = StepRun(
        out_dir=str(out), steps=steps, level=level,
        ref={"spec": ref.source, "framework": ref.framework, "description": ref.description},
        cand={"spec": cand.source, "framework": cand.framework, "description": cand.description},
        setup=SetupFacts({}, {}), lr={"ref": ref.lr_schedule, "cand": cand.lr_schedule},
        rtol=rtol, atol=atol, data_atol=data_atol,
    )
    # 1. setup: counts, mapping, then (when they agree) the weights.
    say.stage("map and load weights")
    run.setup = _map_weights(ref, cand)
    if judge_setup(run.setup).status == "fail":
        return _finish(run, t0, say)
    _load_weights(ref, cand, run.setup)
    # 2. data: judged on the specs' batches; both sides are fed the reference's from here on.
    n = min(len(ref.batches), len(cand.batches))
    if n < steps:
        raise UsageError(f"the specs provide {n} batch(es) but {steps} step(s) were asked for")
    run.ref_batches, run.cand_batches = ref.batches, cand.batches
    batches = ref.batches
    # 3. training steps under capture.
    ref_state0, cand_state0 = state_of(ref.model), state_of(cand.model)
    run.ref_before, run.cand_before = dict(ref_state0), dict(cand_state0)
    for side, spec in (("ref", ref), ("cand", cand)):
        say.stage(f"train and capture: {'reference' if side == 'ref' else 'candidate'} "
                  f"({spec.framework})", total=steps)
        run.losses[side] = _train(spec, batches, out / side, steps, level, payload, say)
    run.ref_trace, run.cand_trace = str(out / "ref"), str(out / "cand")
    from netparity.frameworks.models import optimizer_settings

    run.optimizer_settings = (optimizer_settings(ref.optimizer, ref.model),
                              optimizer_settings(cand.optimizer, cand.model))
    # 4. eval, of the converted *initial* weights, so the verdict does not depend on how far
    # training drifted (later-steps judges that): restore both sides first.
    if run_eval and ref.eval is not None and cand.eval is not None:
        from netparity.frameworks.models import set_weights

        say.stage("evaluate both sides")
        for model, st in ((ref.model, ref_state0), (cand.model, cand_state0)):
            set_weights(model, st, {k: v for k, v in st.dtypes.items() if v == "bfloat16"})
        run.eval_metrics = {"ref": _evaluate(ref, out / "ref-eval", "module", payload),
                            "cand": _evaluate(cand, out / "cand-eval", "module", payload)}
        run.ref_eval_trace, run.cand_eval_trace = str(out / "ref-eval"), str(out / "cand-eval")
    else:
        run.eval_skipped = "no eval in the specs" if run_eval else "not asked"
    return _finish(run, t0, say)


def _finish(run: StepRun, t0: float, say: Progress) -> StepResult:
    """Hand what was run to the step analyzer."""
    say.stage("compare and diagnose")
    result = diagnose_step(run)
    result.seconds = time.perf_counter() - t0
    say.done()
    return result
