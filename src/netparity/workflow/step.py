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

import functools
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from netparity.analyzers.golden import Golden
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
from netparity.errors import NetparityError, UsageError
from netparity.report.progress import Progress, silent
from netparity.statestore import StateStore
from netparity.workflow.compiled import name_compiled_region
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

def _user_step(spec: Spec, i: int, x: Any, y: Any) -> float:
    """The spec's ``train_step`` on batch ``i``; an error in the user's code becomes one line
    naming the spec, the step and the error (the user fixes their spec, not netparity)."""
    try:
        return float(spec.train_step(x, y))
    except NetparityError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of user code is reported, not a crash
        first = (str(e).strip().splitlines() or [""])[0]
        raise UsageError(f"{spec.source}: train_step failed at step {i}: "
                         f"{type(e).__name__}: {first}") from e


def _reseed(seed: int | None, step: int) -> None:
    """Seed every random generator for step ``step`` the same way on every side: dropout and
    other random layers then draw the same numbers on the reference, the noise run and the
    candidate at each step (same framework). Each side is built after the same seed, but trains
    after the others ran: without this, a faithful run with dropout (transformers' defaults)
    failed at its first dropout. Only the generators: the deterministic-algorithm settings of
    the build's seeding stay as they are."""
    if seed is None:
        return
    from netparity.seeding import seed_everything

    seed_everything(seed + 7_919 * (step + 1), deterministic=False)


def _train(spec: Spec, batches: list[tuple[np.ndarray, np.ndarray]], path: Path, steps: int,
           level: str, payload: str, progress: Progress, *,
           before_step: Callable[[int, Any], None] | None = None,
           after_step: Callable[[int], None] | None = None,
           watch: Any = None, seed: int | None = None) -> list[float]:
    """Run ``steps`` training steps under capture; returns the losses.

    ``before_step(i, cap)`` runs before step ``i`` (the candidate loads the reference's state
    there, under ``cap.paused()``); ``after_step(i)`` after it (the reference's state is taken).
    ``watch`` (a ``watch_steps`` object) copies the optimizer's state unobserved. With ``seed``
    the random generators are seeded for each step (:func:`_reseed`).
    """
    import netparity
    from netparity.frameworks.models import as_tensor, scalar_tensor

    losses: list[float] = []
    with netparity.capture(spec.model, str(path), level=level, payload=payload,
                           optimizer=spec.optimizer, overwrite=True,
                           manifest={"spec": spec.source, "spec_options": _jsonable(spec.options)},
                           **_framework_options(spec)) as cap:
        if watch is not None:
            watch.quiet = cap.paused
        for i in range(steps):
            if before_step is not None:
                before_step(i, cap)
            x, y = batches[i]
            cap.record("inputs", as_tensor(x, spec.framework), kind="data")
            cap.record("labels", as_tensor(np.asarray(y).astype(np.int64), spec.framework),
                       kind="data")
            _reseed(seed, i)
            loss = _user_step(spec, i, x, y)
            losses.append(loss)
            cap.record_loss(scalar_tensor(loss, spec.framework))
            cap.step()
            progress.advance()
            if after_step is not None:
                after_step(i)
    return losses


def _drop_gradients(spec: Spec) -> None:
    """Let go of a trained side's parameter gradients (PyTorch's ``.grad``: a copy of the
    weights each side): the capture wrote them, nothing after training reads them (optimizer
    replay feeds the captured ones), and every later stage would hold them."""
    if spec.framework != "torch" or not hasattr(spec.model, "parameters"):
        return
    for p in spec.model.parameters():
        p.grad = None


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


def _noise_run(src: str, options: dict[str, Any], seed: int,
               batches: list[tuple[np.ndarray, np.ndarray]], path: Path, steps: int, level: str,
               payload: str, starts: list[Any], progress: Progress) -> list[float]:
    """Capture the reference's noise run into ``path``; returns its losses.

    A fresh build of the reference spec; before step ``i`` every float parameter and buffer is
    set to ``starts[i]`` (the reference's state at the start of that step) moved one ulp, and
    the inputs are moved one ulp as well (labels untouched). See :mod:`netparity.compare.noise`.
    """
    from netparity.compare.noise import perturb_last_bit
    from netparity.frameworks.models import rounding_jitter, set_weights
    from netparity.seeding import seed_everything

    seed_everything(seed)
    spec = load_spec(src, defaults={"steps": steps}, **options)
    rng = np.random.default_rng(seed + 7919)
    noisy = [(perturb_last_bit(np.asarray(x), rng), y) for x, y in batches]

    def start(i: int, cap: Any) -> None:
        st = starts[i]
        arrays = {k: perturb_last_bit(np.asarray(v), rng) for k, v in st.items()
                  if st.dtypes.get(k) != "bfloat16"}
        with cap.paused():
            set_weights(spec.model, arrays)

    # every layer's outputs and incoming gradients one ulp off as well: the candidate's
    # framework rounds at each layer, not only where the weights and inputs enter
    with rounding_jitter(spec.model, "", seed + 15_485_863):
        return _train(spec, noisy, path, steps, level, payload, progress, before_step=start,
                      seed=seed)


def _golden_run(src: str, options: dict[str, Any], seed: int,
                batches: list[tuple[np.ndarray, np.ndarray]], path: Path, steps: int,
                payload: str, starts: list[Any], progress: Progress,
                variant: str | None = None) -> str | None:
    """Capture a float64 run of the reference into ``path`` (the golden of
    :mod:`netparity.analyzers.golden`), or with ``variant`` one more float32 sample of the
    reference computed another way (``frameworks.torch.models.REDUCTION_VARIANTS``); returns
    why there is none, or None.

    A fresh, eager build of the reference spec (a ``compile`` option dropped), converted to
    float64 and fed the batches in float64 (no ``variant``), or float32 under the variant's
    context; before step ``i`` its parameters and buffers are set to ``starts[i]`` (the
    reference's state at the start of that step), so each step's gradients are the float64
    answer (or another float32 one) for the float32 run's weights and batch. PyTorch models
    only (a module's ``double()``); a spec whose ``train_step`` casts its inputs to float32
    cannot run in float64 (said so)."""
    from contextlib import nullcontext

    from netparity.frameworks.models import set_weights
    from netparity.seeding import seed_everything
    from netparity.workflow.compiled import KEY

    seed_everything(seed)
    spec = load_spec(src, defaults={"steps": steps},
                     **{k: v for k, v in options.items() if k != KEY})
    double = getattr(spec.model, "double", None)
    if spec.framework != "torch" or not callable(double):
        return f"no float64 run of a {spec.framework} reference (PyTorch references only)"
    wide = np.float64 if variant is None else np.float32
    ctx: Any = nullcontext()
    if variant is None:
        double()  # in place: the optimizer keeps the same parameters
        batches = [(np.asarray(x, wide) if np.asarray(x).dtype.kind == "f" else x, y)
                   for x, y in batches]
    else:
        from netparity.frameworks.torch.models import reduction_variant

        ctx = reduction_variant(spec.model, variant)

    def start(i: int, cap: Any) -> None:
        st = starts[i]
        with cap.paused():
            set_weights(spec.model, {k: np.asarray(v, wide) for k, v in st.items()
                                     if st.dtypes.get(k) != "bfloat16"
                                     and np.asarray(v).dtype.kind == "f"})

    try:
        with ctx:
            _train(spec, batches, path, steps, "module", payload, progress, before_step=start,
                   seed=seed)
    except UsageError as e:  # e.g. the spec's train_step casts its inputs to float32
        return f"the reference's spec does not run in float64 ({e})"
    return None


def _free_run(src: str, options: dict[str, Any], seed: int,
              batches: list[tuple[np.ndarray, np.ndarray]], steps: int,
              init: tuple[dict[str, np.ndarray], dict[str, str]] | None = None,
              perturb: bool = False) -> list[float]:
    """Losses of ``steps`` uncaptured steps of a freshly built spec, free-running.

    ``init`` loads (arrays, bf16 dtypes) first; ``perturb`` moves every float parameter by one
    ulp up or down at random and every layer's outputs and incoming gradients by one ulp at
    every step (``rounding_jitter``): the same computation, rounded at each layer the way
    another implementation would -- the envelope the candidate's drift is judged against.
    """
    from netparity.ckpt.mapping import state_of
    from netparity.compare.noise import perturb_last_bit
    from netparity.frameworks.models import set_weights
    from netparity.seeding import seed_everything

    seed_everything(seed)
    spec = load_spec(src, defaults={"steps": steps}, **options)
    if init is not None:
        set_weights(spec.model, init[0], init[1])
    if perturb:
        rng = np.random.default_rng(seed + 1)
        st = state_of(spec.model)
        set_weights(spec.model, {k: perturb_last_bit(np.asarray(v), rng) for k, v in st.items()
                                 if st.dtypes.get(k) != "bfloat16"})
    losses: list[float] = []

    def run() -> None:
        for i, (x, y) in enumerate(batches[:steps]):
            _reseed(seed, i)
            losses.append(float(spec.train_step(x, y)))

    if perturb:
        from netparity.frameworks.models import rounding_jitter

        with rounding_jitter(spec.model, "", seed + 32_452_843):
            run()
    else:
        run()
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
    """Capture options the side's framework asks for in a process the workflow owns (MindSpore
    on CPU: synchronous operators, ``launch_blocking``): the adapter's ``capture_defaults``."""
    from netparity.frameworks.registry import adapter_for

    return dict(adapter_for(spec.model).capture_defaults())


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (v if isinstance(v, (int, float, str, bool, type(None))) else str(v))
            for k, v in d.items()}


def _check_out(out: Path, overwrite: bool) -> None:
    """Refuse an output folder the workflow may not write into, before anything is written.

    Its traces (:data:`netparity.workflow.STEP_TRACES`) are replaced by the trace writer's
    claim, never removed here: an old trace is moved aside and deleted only once the new one is
    complete, and a folder that is not a netparity trace (a user's ``ref/`` holding a
    ``manifest.json`` of their own) is refused."""
    from netparity.outputs import check_output
    from netparity.trace.claim import check_trace_dir
    from netparity.workflow import STEP_FILES, STEP_TRACES

    check_output(out, [], what="output folder", kind="dir")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise UsageError(f"{out} is not empty; pass overwrite=True or choose another directory")
    for name in STEP_TRACES:
        check_output(out / name, [], what="trace folder", kind="dir")
        check_trace_dir(out / name, overwrite=True)
    for name in STEP_FILES:
        check_output(out / name, [], what="report")


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
    noise: bool = True,
    free_running: bool = True,
) -> StepResult:
    """Run the one-step parity workflow (see the module docstring).

    A MindSpore side on CPU is captured with ``launch_blocking=True`` (see
    :func:`netparity.frameworks.mindspore.capture.capture`): the calling process keeps
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
        noise: capture a noise run of the reference (``ref-noise/``: the same steps with every
            weight and input one ulp off) and judge every tensor pair against its own noise
            (:mod:`netparity.compare.noise`); specs given as files/modules only.
        free_running: also run both sides free (uncaptured) from the common initial weights,
            and the reference once more with last-bit perturbed weights, for the loss curves
            and the drift envelope in the report (specs given as files/modules only).

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
    _check_out(out, overwrite)
    opts = dict(options or {})
    sides = []
    say.stage("build both sides")
    # both specs are loaded (and their options checked) before anything is written: a missing
    # or broken spec leaves the output folder as it was
    for src, extra in ((ref_spec, ref_options), (cand_spec, cand_options)):
        if isinstance(src, Spec):
            sides.append(src)
            continue
        seed_everything(seed)
        sides.append(load_spec(src, defaults={"steps": steps}, **{**opts, **(extra or {})}))
    ref, cand = sides
    _check_out(out, overwrite)  # again: building a side may take long
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{out}: cannot create the output folder ({e.strerror})") from None
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
    # Every state kept for later (initial, each step's start) is kept on disk and read back one
    # array at a time (netparity.statestore): memory holds the live models, not ~36 copies.
    store = StateStore(out)
    ref_state0, cand_state0 = store.spill(state_of(ref.model)), store.spill(state_of(cand.model))
    run.ref_before, run.cand_before = ref_state0, cand_state0
    # Every later step k starts both sides from the same state: the reference's parameters and
    # buffers after step k-1, converted into the candidate (its optimizer state and step counters
    # stay its own). Free-running, two faithful runs drift apart by rounding noise that training
    # amplifies (1 vs 2 threads of the same PyTorch run: 6.7% apart in loss at step 2 of the demo),
    # so only a common start lets step k be judged like step 0 and a bug that shows only at step
    # k (a schedule, a momentum buffer, a counter) be named at that step and place.
    ref_to_cand = run.setup.ref_to_cand()
    cand_shapes = {k: tuple(np.shape(v)) for k, v in cand_state0.items()}
    ref_states: list[Any] = []  # reference state after steps 0..steps-2

    def keep_ref_state(i: int) -> None:
        if i < steps - 1:
            ref_states.append(store.spill(state_of(ref.model)))

    def start_from_ref(i: int, cap: Any) -> None:
        if i == 0:
            return
        from netparity.frameworks.models import set_weights

        arrays, bf16 = _to_candidate(ref_states[i - 1], ref_to_cand, cand_shapes)
        with cap.paused():
            set_weights(cand.model, arrays, bf16)
            run.cand_starts[i] = store.spill(state_of(cand.model))

    # the optimizers' states just before each step, for the optimizer replay
    watches = [_watch_steps(side) for side in (ref, cand)]
    for w in watches:  # (an Adam's: two copies of the weights per step and side)
        if hasattr(w, "keep_on_disk"):
            w.keep_on_disk(store)
    say.stage(f"train and capture: reference ({ref.framework})", total=steps)
    run.losses["ref"] = _train(ref, batches, out / "ref", steps, level, payload, say,
                               after_step=keep_ref_state, watch=watches[0], seed=seed)
    run.ref_starts = [ref_state0, *ref_states]
    _drop_gradients(ref)
    ref_opts, cand_opts = {**opts, **(ref_options or {})}, {**opts, **(cand_options or {})}
    if noise and isinstance(ref_spec, str):
        # The noise run: the reference again, every step started from the reference's state with
        # each float weight and input one ulp off at random; its distance from the reference is
        # each tensor's own rounding noise, which the comparisons judge against.
        say.stage(f"noise run of the reference ({ref.framework})", total=steps)
        run.losses["ref_noise_steps"] = _noise_run(
            ref_spec, ref_opts, seed, batches, out / "ref-noise", steps, level, payload,
            run.ref_starts, say)
        run.noise_trace = str(out / "ref-noise")
    elif noise:
        run.notes.append("no noise run: the reference was given as a built Spec (it cannot be "
                         "rebuilt fresh); pairs are judged by the tolerance table")
    say.stage(f"train and capture: candidate ({cand.framework})", total=steps)
    run.losses["cand"] = _train(cand, batches, out / "cand", steps, level, payload, say,
                                before_step=start_from_ref, watch=watches[1], seed=seed)
    run.ref_trace, run.cand_trace = str(out / "ref"), str(out / "cand")
    _drop_gradients(cand)
    for w in watches:
        if w is not None:
            w.close()
    if free_running and steps > 1 and isinstance(ref_spec, str) and isinstance(cand_spec, str):
        # Free-running curves for the report, with the drift the reference shows against its
        # own last-bit noise run: information, not a verdict (each step is judged above).
        say.stage("free-running loss curves (uncaptured)")
        run.losses["ref_noise"] = _free_run(ref_spec, ref_opts, seed, batches, steps,
                                            perturb=True)
        run.losses["cand_free"] = _free_run(cand_spec, cand_opts, seed, batches, steps,
                                            init=_to_candidate(ref_state0, ref_to_cand,
                                                               cand_shapes))
    from netparity.frameworks.models import optimizer_settings

    run.optimizer_settings = (optimizer_settings(ref.optimizer, ref.model),
                              optimizer_settings(cand.optimizer, cand.model))
    from netparity.workflow.replay import adam_type

    run.adam = adam_type(ref.optimizer) or adam_type(cand.optimizer)
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
        if noise and payload == "tensors":
            # the eval forward judged against its own noise, as training is: the reference's
            # evaluation again with its weights one ulp off and every layer rounding one ulp off
            from netparity.compare.noise import perturb_last_bit
            from netparity.frameworks.models import rounding_jitter

            rng = np.random.default_rng(seed + 104_723)
            set_weights(ref.model, {k: perturb_last_bit(np.asarray(v), rng)
                                    for k, v in ref_state0.items()
                                    if ref_state0.dtypes.get(k) != "bfloat16"})
            with rounding_jitter(ref.model, "", seed + 1_299_709):
                _evaluate(ref, out / "ref-eval-noise", "module", payload)
            set_weights(ref.model, ref_state0, {k: v for k, v in ref_state0.dtypes.items()
                                                if v == "bfloat16"})
            run.eval_noise_trace = str(out / "ref-eval-noise")
    else:
        run.eval_skipped = "no eval in the specs" if run_eval else "not asked"

    golden_runs: dict[str, Golden | None] = {}

    def golden() -> Golden | None:
        """The float64 reference's trace and the reference's extra float32 samples, run on
        first use (None: none, ``run.golden_why``)."""
        if "path" not in golden_runs:
            from netparity.frameworks.torch.models import REDUCTION_VARIANTS

            why: str | None = "the reference was given as a built Spec (it cannot be rebuilt)"
            samples: list[str] = []
            if isinstance(ref_spec, str):
                say.stage(f"float64 run of the reference ({ref.framework}): the golden floor",
                          total=steps)
                why = _golden_run(ref_spec, ref_opts, seed, batches, out / "ref-f64", steps,
                                  payload, run.ref_starts, say)
                for v in REDUCTION_VARIANTS if why is None else ():
                    say.stage(f"float32 run of the reference computed another way ({v}): "
                              "a sample of the golden floor", total=steps)
                    if _golden_run(ref_spec, ref_opts, seed, batches, out / f"ref-f32-{v}",
                                   steps, payload, run.ref_starts, say, variant=v) is None:
                        samples.append(str(out / f"ref-f32-{v}"))
            golden_runs["path"] = None if why else Golden(str(out / "ref-f64"), tuple(samples))
            run.golden_why = why or ""
        return golden_runs["path"]

    if payload == "tensors":
        run.golden = golden

    def replay(result: StepResult) -> None:
        upd = result.phase("update")
        if result.compare_step0 is not None and upd.status == "pass" \
                and upd.evidence.get("values_within_update_noise"):
            # parameters the update phase accepted as its gradients' noise: the step-0
            # comparison the report shows says so too
            result.compare_step0.clear("update", "within the noise of the gradients the "
                                                 "update was made from (update phase)")
        # Culprits by replay: the candidate's diverging modules fed the reference's tensors
        # (its optimizer was replayed before the diagnosis: see _replay_optimizers).
        if (payload != "tensors" or result.compare_step0 is None or run.ref_trace is None
                or run.cand_trace is None):
            return
        from netparity.analyzers.replay import refine
        from netparity.workflow.replay import replay_step0

        for direction in ("forward", "backward") if level != "op" else ():
            ph = result.phase(direction)
            if ph.status != "fail" or (direction == "backward"
                                       and result.phase("forward").status == "fail"):
                continue  # a backward difference after a forward one follows from it
            say.stage(f"replay the diverging modules ({direction}) on the reference's tensors")
            refine(ph, replay_step0(result.compare_step0, direction, run.ref_trace,
                                    run.cand_trace, ref.model, cand.model, ref_state0,
                                    cand_state0, seed, ref_to_cand=run.setup.ref_to_cand()),
                   result.compare_step0)
            if ph.evidence.get("verdict") == "amplified noise (replay)":
                # the step-0 comparison the report shows says what the phase says
                result.compare_step0.clear(direction, "replay: every place the difference "
                                                      "could start reproduces the reference")
        _golden_backward(result, run, golden)
        if level not in ("op", "both"):
            return
        from netparity.workflow.replay import replay_ops_step0

        for direction in ("forward", "backward"):
            ph = result.phase(direction)
            if ph.status != "fail" or "replay" in str(ph.evidence.get("verdict", "")) or (
                    direction == "backward" and result.phase("forward").status == "fail"):
                continue
            # op level: the operators themselves (backward: the operators the backward pass
            # ran, fed the reference's gradients), re-called on the reference's tensors
            say.stage(f"replay the diverging operators ({direction}) on the reference's tensors")
            refine(ph, replay_ops_step0(result.compare_step0, run.ref_trace, run.cand_trace,
                                        ref.model, cand.model, seed, direction=direction))
        if level == "both":
            _ops_within_agreeing_modules(result)

    if payload == "tensors":
        _replay_optimizers(run, ref, cand, watches, ref_state0, cand_state0, seed, say)
        if level != "op":
            run.replay_clear = functools.partial(_replay_clear, run, ref, cand, seed, say)
    result = _finish(run, t0, say, replay)
    name_compiled_region(result, ref, cand, say)  # eager vs compiled: the compiled region
    store.close()
    return result


def _ops_within_agreeing_modules(result: StepResult) -> None:
    """At ``--level both`` an operator-level divergence is a culprit only inside a module that
    itself diverges (:func:`netparity.analyzers.step.ops_only`; later steps apply the same
    rule): where every module-level pair of the direction agrees, a phase failed by operator
    pairs alone is cleared and says so. (A bfloat16 candidate's loss, 0.7 % off, is carried by the ops that
    read it after the model returned, which were judged against float32 noise.)"""
    from netparity.analyzers.step import ops_only

    r0 = result.compare_step0
    if r0 is None:
        return
    for direction in ("forward", "backward"):
        ph = result.phase(direction)
        if ph.status != "fail" or not ops_only(r0, direction):
            continue
        mods = [p for p in r0.pairs if p.kind == "module" and p.direction == direction]
        first = ph.where
        ph.status, ph.where, ph.step = "pass", "", None
        ph.summary = (f"every module's {direction} output agrees ({len(mods)} module-level "
                      f"pairs); operator pairs differ beyond their noise (first at {first}) but "
                      "not inside a diverging module: reported as information, not a culprit")
        ph.evidence["verdict"] = "operators only (modules agree)"
        r0.clear(direction, "operators only: every module-level pair agrees")


def _golden_backward(result: StepResult, run: StepRun,
                     golden: Callable[[], Golden | None]) -> None:
    """Step 0's parameter gradients that still fail after replay and that replay could not
    judge (a compiled candidate has no inner modules' tensors) are judged against the float64
    golden floor (:mod:`netparity.analyzers.golden`)."""
    from netparity.analyzers.golden import clear_by_golden, golden_phase
    from netparity.analyzers.step import param_order

    bwd, r0 = result.phase("backward"), result.compare_step0
    if (bwd.status != "fail" or r0 is None or result.phase("forward").status == "fail"
            or "introduced" in str(bwd.evidence.get("verdict", ""))
            or run.ref_trace is None or run.cand_trace is None):
        return
    judged = {o.get("module") for o in bwd.evidence.get("replay", [])
              if o.get("param_local") is not None}
    ev = clear_by_golden(r0, 0, golden, run.ref_trace, run.cand_trace, run.noise_trace,
                         run.setup.ref_to_cand(), judged)
    if ev is not None:
        golden_phase(bwd, ev, r0, param_order(r0))
    elif run.golden_why:
        bwd.evidence["golden"] = run.golden_why
        bwd.summary += f"; no float64 golden floor: {run.golden_why}"


def _replay_clear(run: StepRun, ref: Spec, cand: Spec, seed: int, say: Progress, step: int,
                  rk: Any, direction: str) -> dict[str, Any] | None:
    """Replay a resynchronised later step's diverging modules of ``direction`` from the state
    both sides started it from: whether replay clears the phase, its summary and table."""
    from netparity.analyzers.replay import refine
    from netparity.workflow.replay import replay_step0

    if run.ref_trace is None or run.cand_trace is None or step not in run.cand_starts:
        return None
    say.stage(f"replay step {step}'s diverging modules ({direction}) on the reference's tensors")
    ph = Phase(direction, status="fail", step=step)
    refine(ph, replay_step0(rk, direction, run.ref_trace, run.cand_trace, ref.model, cand.model,
                            run.ref_starts[step], run.cand_starts[step], seed, step=step,
                            ref_to_cand=run.setup.ref_to_cand()), rk)
    return {"cleared": ph.status == "pass", "summary": ph.summary,
            "replay": ph.evidence.get("replay", [])}


def _watch_steps(spec: Spec) -> Any:
    """Keep the spec's optimizer state from just before each of its steps (None when the spec
    has no optimizer or its framework cannot replay one)."""
    from netparity.frameworks.registry import adapter_for

    if spec.optimizer is None:
        return None
    try:
        return adapter_for(spec.model).watch_steps(spec.optimizer)
    except (NetparityError, AttributeError, TypeError):
        return None


def _replay_optimizers(run: StepRun, ref: Spec, cand: Spec, watches: list[Any],
                       ref_state0: Any, cand_state0: Any, seed: int, say: Progress) -> None:
    """Optimizer replay of every step (see :func:`netparity.workflow.replay.replay_optimizer`),
    for the update and later-steps phases."""
    from netparity.workflow.replay import replay_optimizer

    if run.ref_trace is None or run.cand_trace is None:
        return
    say.stage("replay the optimizer steps on the reference's gradients")
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        run.opt_replay = replay_optimizer(
            run.ref_trace, run.cand_trace, ref.model, cand.model, ref.optimizer,
            cand.optimizer, watches[0], watches[1], dict(enumerate(run.ref_starts)),
            {0: cand_state0, **run.cand_starts}, run.setup.ref_to_cand(), run.steps, seed)
    except NetparityError as e:
        run.opt_replay = {0: ([], str(e), {})}
    except Exception as e:  # noqa: BLE001 - an optimizer the user wrote may refuse replay
        run.opt_replay = {0: ([], f"{type(e).__name__}: "
                                  f"{(str(e).strip().splitlines() or [''])[0]}", {})}
    for _, _, info in run.opt_replay.values():  # the cost, on the first step's entry
        info["seconds"] = round(time.perf_counter() - t0, 2)
        info["cpu_seconds"] = round(time.process_time() - c0, 2)
        break


def _finish(run: StepRun, t0: float, say: Progress,
            refine: Callable[[StepResult], None] | None = None) -> StepResult:
    """Hand what was run to the step analyzer (then ``refine`` the result: replay)."""
    say.stage("compare and diagnose")
    result = diagnose_step(run)
    if refine is not None:
        refine(result)
    result.seconds = time.perf_counter() - t0
    say.done()
    return result
