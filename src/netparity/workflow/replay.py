"""Run the replays behind "introduced here" on the step workflow's live models.

For each call the replay analyzer (:mod:`netparity.analyzers.replay`) plans, in execution
order, read the reference's captured tensors of that call from its trace and

* **forward**: call the reference's module on its captured inputs (it must reproduce its own
  output, else the call depends on something the tensors do not hold); again with the inputs and
  the module's own weights moved one ulp (the local noise); then the candidate's module on the
  same inputs (the local error);
* **backward**: the same with the module's forward inputs *and* the captured gradients of its
  outputs, comparing the gradients with respect to its inputs (modules called once per step).

Both models are set to their step-0 weights first and restored afterwards, so replays change
nothing the workflow reports. Module replay goes on past the first call that introduces a
difference (a second independent mistake is named too); op replay stops there.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from netparity.analyzers.replay import (
    SELF_TOLERANCE,
    ReplayOutcome,
    describe_factor,
    judge,
    normwise_error,
    plan,
)
from netparity.compare.noise import FLOOR_EPS, coarser, unit_roundoff
from netparity.compare.results import CallResult, CompareResult
from netparity.errors import NetparityError
from netparity.precision.emulate import emulating
from netparity.trace import open_trace

__all__ = ["adam_type", "replay_ops_step0", "replay_optimizer", "replay_step0"]

Tensors = list[tuple[str, np.ndarray, str]]


class _Calls:
    """One step's module records of one trace, by (direction, module path, call index)."""

    def __init__(self, trace: str, step: int = 0) -> None:
        self.tr = open_trace(trace)
        self.by: dict[tuple[str, str, int], list[Any]] = {}
        for r in self.tr.records(step=step, kind="module"):
            self.by.setdefault((r.direction, r.module, int(r.call)), []).append(r)

    def recs(self, direction: str, module: str, call: int, event: str = "") -> list[Any]:
        rs = self.by.get((direction, module, call), [])
        return [r for r in rs if str(r.event) == event] or rs if event else rs

    def calls(self, direction: str, module: str) -> int:
        return sum(1 for d, m, _ in self.by if d == direction and m == module)

    def tensors(self, recs: list[Any], role: str) -> Tensors:
        if not all(r.has_payload for r in recs):
            raise _NotReplayable("no tensor payload captured for this call")
        return [(r.arg, np.asarray(self.tr.tensor(r)), r.dtype) for r in recs if r.role == role]


class _NotReplayable(NetparityError):
    pass


def _in_order(ref: Tensors, got: list[tuple[str, np.ndarray]]) -> list[np.ndarray]:
    """The replay's arrays in the order of the reference's (by argument path when both name the
    same ones, else by position)."""
    by_arg = dict(got)
    if {a for a, _, _ in ref} <= set(by_arg):
        return [by_arg[a] for a, _, _ in ref]
    return [g for _, g in got]


def _primary(ts: Tensors, op: str) -> Tensors:
    """The outputs of a call that replay compares: a normalisation's first (the others are
    by-products saved for backward, framework-specific -- and MindSpore's CPU ``BatchNorm``
    leaves two of them unwritten, so they hold whatever the memory held)."""
    from netparity.compare.engine import AUX_OUTPUT_OPS

    return ts[:1] if op in AUX_OUTPUT_OPS else ts


def _moved(ts: Tensors, rng: np.random.Generator) -> Tensors:
    from netparity.compare.noise import perturb_last_bit

    return [(a, perturb_last_bit(v, rng), d) for a, v, d in ts]


#: replays of the reference on last-bit moved tensors per call; the largest of their errors is
#: the call's noise. One sample of an ill-conditioned module (a BatchNorm normalising two values,
#: a ReLU whose inputs sit near 0) can fall far below what another implementation's rounding
#: makes: on an AVX-512 machine a faithful ResNet-18 block's backward at 32 px was judged against
#: one sample 5.8x under its port's error. Each sample costs one call of the module.
NOISE_SAMPLES = 3


#: a call judged introduced by less than ADAPT x its bound gets more noise samples, up to
#: NOISE_SAMPLES_MAX in all, before the verdict stands: the noise of an ill-conditioned module
#: (a BatchNorm normalising two values per channel) is heavy-tailed, and three samples put a
#: faithful ResNet-18 demo's ``layer4`` at 1.5x its bound (32 px, batch 2, 3 steps). A real
#: difference lies far outside the noise distribution however many samples are drawn (the
#: demo's and corpus's mistakes: 34x to 10^4x their bounds), a chaotic one does not.
ADAPT = 10.0
NOISE_SAMPLES_MAX = 15


def judge_sampled(o: ReplayOutcome, local: float, noise: float,
                  sample: Callable[[], float], ref_dtype: str, cand_dtype: str) -> int:
    """:func:`judge` ``o``; while it is introduced by less than :data:`ADAPT` x its bound, one
    more noise sample (``sample()``: one normwise error of a jittered run) until
    :data:`NOISE_SAMPLES_MAX` are drawn. Returns how many extra samples it drew.

    Example:
        >>> o = ReplayOutcome("k", "m", "m", "op", accumulated=0.0)
        >>> judge_sampled(o, 8e-6, 1e-6, lambda: 2e-6, "float32", "float32"), o.verdict
        (1, 'reproduces')
    """
    judge(o, local, noise, ref_dtype, cand_dtype)
    extra = 0
    while (o.introduced and NOISE_SAMPLES + extra < NOISE_SAMPLES_MAX
           and local <= ADAPT * (o.bound or 0.0)):
        noise = max(noise, sample())
        extra += 1
        judge(o, local, noise, ref_dtype, cand_dtype)
    return extra


def _sampled_noise(want: Tensors, run: Callable[[], list[tuple[str, np.ndarray]]]) -> float:
    """The largest normwise error of ``NOISE_SAMPLES`` runs of ``run`` (each on freshly moved
    tensors) against the reference's captured ``want``."""
    wanted = [v for _, v, _ in want]
    return max(normwise_error(wanted, _in_order(want, run())) for _ in range(NOISE_SAMPLES))


class _Keeper:
    """Where a replay keeps whole-model states: on disk next to a trace (a
    :class:`netparity.statestore.StateStore`, read back one array at a time) when that
    folder is writable, else in memory. Its files are removed once the states are garbage."""

    def __init__(self, trace: str) -> None:
        from netparity.statestore import StateStore

        try:
            self.store: Any = StateStore(Path(trace).parent)
        except OSError:
            self.store = None

    def model(self, model: Any) -> Any:
        """The model's state now (``state_of(model)``), kept."""
        from netparity.ckpt.mapping import state_of

        return state_of(model) if self.store is None else self.store.spill(state_of(model))


def kept_states(trace: str, *models: Any) -> list[Any]:
    """The models' states, to restore them after a replay (see :class:`_Keeper`)."""
    keep = _Keeper(trace)
    return [keep.model(m) for m in models]


def replay_step0(r0: CompareResult, direction: str, ref_trace: str, cand_trace: str,
                 ref_model: Any, cand_model: Any, ref_state0: Any, cand_state0: Any,
                 seed: int = 0, step: int = 0,
                 ref_to_cand: dict[str, str] | None = None) -> list[ReplayOutcome]:
    """Replay step 0's diverging module calls of ``direction`` (``forward`` or ``backward``;
    see the module docstring). For a resynchronised later ``step``, ``r0`` is that step's
    comparison and the two states are the ones both sides started it from. In backward, with
    ``ref_to_cand`` (parameter names), the gradients each call adds to its module's parameters
    are judged too: the candidate's against the reference's replay, within the reference's
    jittered replays' noise (``param_local`` / ``param_noise`` / ``param_bound``)."""
    from netparity.compare.noise import perturb_last_bit
    from netparity.frameworks.models import (
        rounding_jitter,
        run_module,
        run_module_backward,
        set_weights,
    )

    calls = plan(r0, direction)
    if not calls:
        return []
    ref, cand = _Calls(ref_trace, step), _Calls(cand_trace, step)
    rng = np.random.default_rng(seed + 104729)
    keep_ref, keep_cand = kept_states(ref_trace, ref_model, cand_model)

    def load(model: Any, st: Any) -> None:
        set_weights(model, st, {k: v for k, v in st.dtypes.items() if v == "bfloat16"})

    def with_moved_weights(module: str, fn: Callable[[], Any]) -> Any:
        prefix = f"{module}." if module else ""
        names = [k for k in ref_state0 if k.startswith(prefix)
                 and ref_state0.dtypes.get(k) != "bfloat16"]
        set_weights(ref_model, {k: perturb_last_bit(np.asarray(ref_state0[k]), rng)
                                for k in names})
        try:
            return fn()
        finally:
            set_weights(ref_model, {k: np.asarray(ref_state0[k]) for k in names})

    def forward(model: Any, path: str, ins: Tensors, _g: Any) -> list[tuple[str, np.ndarray]]:
        return run_module(model, path, ins)

    def backward(model: Any, path: str, ins: Tensors,
                 g: list[tuple[str, np.ndarray]]) -> list[tuple[str, np.ndarray]]:
        return run_module_backward(model, path, ins, g)

    run = forward if direction == "forward" else backward

    def jittered(module: str, ins: Tensors, gout: Tensors, fn: Callable[..., Any] = run) -> Any:
        # ``fn`` of the reference's module with its inputs, output gradients, weights and every
        # inner layer's outputs (and incoming gradients) one ulp off: the rounding another
        # implementation makes at each of the module's layers
        moved_g = [(a, v) for a, v, _ in _moved(gout, rng)]
        with rounding_jitter(ref_model, module, int(rng.integers(2**31))):
            return with_moved_weights(module, functools.partial(
                fn, ref_model, module, _moved(ins, rng), moved_g))

    def param_grads(model: Any, path: str, ins: Tensors,
                    g: list[tuple[str, np.ndarray]]) -> dict[str, np.ndarray]:
        return {a[6:]: v for a, v in run_module_backward(model, path, ins, g, params=True)
                if a.startswith("param:")}

    cand_to_ref = {cn: rn for rn, cn in (ref_to_cand or {}).items()}
    cand_ctx = functools.partial(emulating, cand_model)  # the candidate's --emulate, if any

    def judge_params(o: ReplayOutcome, c: CallResult, ins: Tensors, gout: Tensors,
                     cand_ins: Tensors, cand_g: list[tuple[str, np.ndarray]]) -> None:
        """The gradients the call adds to its module's parameters: the candidate's module on
        the reference's tensors against the reference module's own replay."""
        want = param_grads(ref_model, c.module, ins, [(a, v) for a, v, _ in gout])
        with cand_ctx():
            cand_pg = param_grads(cand_model, c.cand_module, cand_ins, cand_g)
        got = {cand_to_ref.get(n, ""): v for n, v in cand_pg.items()}
        names = [n for n in want if n in got and got[n].size == want[n].size]
        if not names or not any(np.any(want[n] != 0) for n in names):
            return  # nothing to compare, or a gradient exactly zero (no relative scale)
        wanted = [want[n] for n in names]
        local = normwise_error(wanted, [got[n].reshape(want[n].shape) for n in names])

        def noisy() -> list[np.ndarray]:
            d = jittered(c.module, ins, gout, param_grads)
            return [d[n] for n in names]

        noise = max(normwise_error(wanted, noisy()) for _ in range(NOISE_SAMPLES))
        po = ReplayOutcome(o.key, c.module, c.cand_module, c.op, accumulated=0.0,
                           direction="backward")
        judge_sampled(po, local, noise, lambda: normwise_error(wanted, noisy()),
                      ref_state0.dtypes.get(names[0], "float32"),
                      cand_state0.dtypes.get((ref_to_cand or {}).get(names[0], ""), "float32"))
        o.param_local, o.param_noise, o.param_bound = po.local, po.noise, po.bound
        if po.introduced and not o.introduced:
            o.local, o.noise, o.bound, o.verdict = po.local, po.noise, po.bound, "introduced"
            o.reason = "the gradients it adds to its parameters differ beyond their noise"
        elif o.verdict in ("", "not replayed"):
            o.verdict = "reproduces"
            o.local, o.noise, o.bound = po.local, po.noise, po.bound

    outcomes: list[ReplayOutcome] = []
    try:
        load(ref_model, ref_state0)
        load(cand_model, cand_state0)
        for c in calls:
            o = ReplayOutcome(c.key, c.module, c.cand_module, c.op, accumulated=c.out_error,
                              direction=direction)
            outcomes.append(o)
            try:
                ins, gout, want = _call_tensors(c, direction, ref, allow_no_input_grads=bool(
                    ref_to_cand))
                cand_ins, in_names = _cand_inputs(c, ins, cand)
                if direction == "backward" and ref_to_cand:
                    judge_params(o, c, ins, gout, cand_ins, _cand_grads(c, gout, cand))
                if not want:  # the module's inputs take no gradient (the network's inputs)
                    if not o.verdict:
                        raise _NotReplayable("the call's inputs take no gradient and its "
                                             "module has no parameters to judge")
                    continue
                if not any(np.any(np.asarray(v) != 0) for _, v, _ in want):
                    # (a gate whose incoming gradient is exactly zero: any candidate rounding
                    # is an infinite relative error; the comparison's answer stands)
                    raise _NotReplayable("the reference's result is exactly zero: a relative "
                                         "error has no scale")
                ref_g = [(a, v) for a, v, _ in gout]
                own = normwise_error([v for _, v, _ in want],
                                     _in_order(want, run(ref_model, c.module, ins, ref_g)))
                if own > SELF_TOLERANCE:
                    raise _NotReplayable(
                        f"the reference's own replay misses its captured result by {own:.3g}: "
                        "the call depends on random numbers, a non-tensor argument or hidden "
                        "state")

                noisy = functools.partial(jittered, c.module, ins, gout)
                noise = max(_sampled_noise(want, noisy), own)
                with cand_ctx():
                    got = run(cand_model, c.cand_module, cand_ins, _cand_grads(c, gout, cand))
                if direction == "backward":  # gradients w.r.t. the inputs, under their names
                    got = [(in_names.get(a, a), v) for a, v in got]
                local = normwise_error(*_paired(want, got))
                po = ReplayOutcome(o.key, c.module, c.cand_module, c.op,
                                   accumulated=c.out_error, direction=direction)
                cand_dt = _cand_out_dtype(c, direction, cand, want[0][2])
                judge_sampled(po, local, noise, lambda: normwise_error(  # noqa: B023
                    [v for _, v, _ in want], _in_order(want, noisy())),  # noqa: B023
                    want[0][2], cand_dt)
                if po.introduced and unit_roundoff(cand_dt) < unit_roundoff(want[0][2]):
                    _golden_clear(po, run, ref_model, c.module, ins, ref_g, want, got)
                if po.introduced or not o.introduced:  # (the parameters' verdict stands)
                    o.local, o.noise, o.bound, o.verdict = po.local, po.noise, po.bound, \
                        po.verdict
                    o.reason = "" if po.introduced or o.verdict != "introduced" else o.reason
            except NetparityError as e:
                o.verdict, o.reason = "not replayed", str(e)
            except Exception as e:  # noqa: BLE001 - a module the user wrote may refuse replay
                first = (str(e).strip().splitlines() or [""])[0]
                o.verdict, o.reason = "not replayed", f"{type(e).__name__}: {first}"[:200]
            # no break at the first culprit: a port carrying two wrong defaults (LayerNorm eps
            # and a tanh GELU) has two modules introducing a difference of their own, and each
            # replay is fed the reference's tensors, free of the first one's
    finally:
        load(ref_model, keep_ref)
        load(cand_model, keep_cand)
    return outcomes


def _golden_clear(po: ReplayOutcome, run: Callable[..., list[tuple[str, np.ndarray]]],
                  ref_model: Any, module: str, ins: Tensors, ref_g: list[tuple[str, np.ndarray]],
                  want: Tensors, got: list[tuple[str, np.ndarray]]) -> None:
    """A candidate computing in a finer precision than the reference (float64 against
    float32) differs from it by the reference's own rounding error, which one-ulp jitter does
    not sample where float32 saturates or cancels (a sigmoid rounding to exactly 1 has a
    gradient of exactly 0; in float64 it has a small one). Such a candidate is held to the
    reference module replayed in float64 on the same tensors (the golden), as mixed-precision
    checks are: it is cleared when it is no further from the golden than ``NOISE_K`` x the
    reference is (plus ``FLOOR_EPS`` units of the reference's dtype)."""
    from netparity.compare.noise import NOISE_K
    from netparity.frameworks.models import in_float64

    def wide(ts: Tensors) -> Tensors:
        return [(a, np.asarray(v, np.float64) if np.issubdtype(np.asarray(v).dtype, np.floating)
                 else v, "float64" if np.issubdtype(np.asarray(v).dtype, np.floating) else dt)
                for a, v, dt in ts]

    try:
        with in_float64(ref_model, module):
            gold = run(ref_model, module, wide(ins),
                       [(a, np.asarray(v, np.float64)) for a, v in ref_g])
    except Exception:  # noqa: BLE001 - no golden for this module: the replay's verdict stands
        return
    golden = _in_order(want, gold)
    ref_err = normwise_error(golden, [np.asarray(v, np.float64) for _, v, _ in want])
    gm, theirs = _paired([(a, g, dt) for (a, _, dt), g in zip(want, golden)], got)
    cand_err = normwise_error(gm, [np.asarray(t, np.float64) for t in theirs])
    bound = NOISE_K * ref_err + FLOOR_EPS * unit_roundoff(want[0][2])
    if cand_err <= bound:
        po.verdict = "reproduces"
        po.reason = (f"finer than the reference: {cand_err:.3g} from the reference module's "
                     f"float64 replay, within {NOISE_K:g}x the reference's own {ref_err:.3g}")


class _Ops:
    """Step 0's op records of one trace: by (direction, module, op index, event), and each
    (direction, module, canonical op)'s calls in execution order (to find a call's
    counterpart)."""

    def __init__(self, trace: str) -> None:
        self.tr = open_trace(trace)
        self.by: dict[tuple[str, str, int, int], list[Any]] = {}
        for r in self.tr.records(step=0, kind="op"):
            if r.direction in ("forward", "backward"):
                self.by.setdefault((r.direction, r.module, int(r.call), int(r.event)),
                                   []).append(r)
        # each (direction, module)'s calls in execution order
        self.order: dict[tuple[str, str], list[tuple[str, str, int, int]]] = {}
        for key in sorted(self.by, key=lambda k: min(r.seq for r in self.by[k])):
            self.order.setdefault((key[0], key[1]), []).append(key)

    def runs(self, direction: str, module: str, ops: list[str]) -> list[list[Any]]:
        """Every run of consecutive calls of ``module`` whose canonical ops are ``ops`` (one
        op: each call of it), in execution order, as lists of call keys."""
        keys = self.order.get((direction, module), [])
        n = len(ops)
        return [keys[i:i + n] for i in range(len(keys) - n + 1)
                if [self.by[k][0].op for k in keys[i:i + n]] == ops]

    def tensors(self, recs: list[Any], role: str) -> Tensors:
        if not all(r.has_payload for r in recs):
            raise _NotReplayable("no tensor payload captured for this call")
        return [(r.arg, np.asarray(self.tr.tensor(r)), r.dtype) for r in recs if r.role == role]

    @staticmethod
    def scalars(recs: list[Any]) -> dict[str, Any]:
        return next((dict(r.extra["scalars"]) for r in recs
                     if isinstance(r.extra, dict) and r.extra.get("scalars")), {})

    @staticmethod
    def op_info(recs: list[Any]) -> dict[str, Any] | None:
        """What the capture recorded about the operator itself (MindSpore: the primitive's
        class and constructor arguments)."""
        return next((dict(r.extra["prim"]) for r in recs
                     if isinstance(r.extra, dict) and r.extra.get("prim")), None)


def _size(v: np.ndarray) -> int:
    return int(np.asarray(v).size)


def _distance(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    scale = max(float(np.linalg.norm(a64)), float(np.linalg.norm(b64)), 1e-300)
    d = a64 - b64
    d = np.where(np.isfinite(d), d, 0.0)
    return float(np.linalg.norm(d)) / scale


def _layouts(v: np.ndarray, shape: tuple[int, ...]) -> list[np.ndarray]:
    """``v`` in the layouts one framework's operator may take what the other's takes as
    ``shape``: as it is, with its last two axes swapped (``MatMul(transpose_b=True)``'s weight
    against ``mm``'s), or reshaped (same elements, another shape)."""
    v = np.asarray(v)
    out = []
    if v.shape == shape:
        out.append(v)
    if v.ndim >= 2 and v.shape[:-2] + (v.shape[-1], v.shape[-2]) == shape:
        out.append(np.swapaxes(v, -1, -2))
    if not out and v.size == int(np.prod(shape, dtype=np.int64)):
        out.append(v.reshape(shape))
    return out


#: a candidate's argument and the reference input it takes must agree within this (relative,
#: normwise): weights are equal, data differ by the accumulated error, and a value made by
#: operators outside the replayed call (``1 - y*y`` fed to a group that starts after it) is not
#: the reference's ``y`` because it has its shape
PAIR_DISTANCE = 0.5
#: a candidate's call on the reference's inputs farther than this many times from the
#: reference than the candidate's own run was (its accumulated error) was not fed what its
#: own run was fed: the pairing of arguments is wrong, not the operator
LOCAL_OVER_ACCUMULATED = 10.0


def _same_values(ts: Tensors) -> list[int]:
    """For each tensor, the index of the first one holding the same values (itself if
    none): one input seen by several calls."""
    first: list[int] = []
    for i, (_, v, _) in enumerate(ts):
        first.append(next((j for j in range(i) if first[j] == j and ts[j][1].shape == v.shape
                           and _size(v) > 1 and np.array_equal(ts[j][1], v)), i))
    return first


def _as_candidate_inputs(ins: Tensors, cand_ins: Tensors, same_op: bool = False) -> Tensors:
    """The reference's inputs as the arguments of the candidate's operator.

    The same operator on both sides (``same_op``: one framework, one overload) pairs its
    arguments by path. Otherwise (another framework's operator:
    ``native_layer_norm(x, shape, w, b)`` against ``LayerNorm(x, gamma, beta)``, or an N:M
    group's outside inputs) each of the candidate's tensor arguments takes the
    reference's input, in a layout of the same elements, that is closest to the candidate's own
    captured value of that argument (weights are equal at step 0, data within the accumulated
    error): pairs are made closest first, each input used once. A one-element argument of the
    candidate with no counterpart is a constant of its own code and keeps its own value; a
    larger one, or a reference input left over, means the two operators do not compute the same
    thing from the same tensors: not replayable."""
    own = {a: (v, d) for a, v, d in cand_ins}
    ref = {a: v for a, v, _ in ins}
    if same_op and set(own) == set(ref) and all(np.shape(own[a][0]) == np.shape(ref[a])
                                                for a in ref):
        return [(a, ref[a], own[a][1]) for a, _, _ in ins]
    # one tensor used by several calls of a group (x in 0.5 * x * (1 + tanh(x ...))) is one
    # input: arguments holding the same values share their counterpart
    cfirst, rfirst = _same_values(cand_ins), _same_values(ins)
    options: list[tuple[float, int, int, np.ndarray]] = []
    for ci, (_, cv, _) in enumerate(cand_ins):
        if cfirst[ci] != ci:
            continue
        for ri, (_, rv, _) in enumerate(ins):
            if rfirst[ri] != ri:
                continue
            for lay in _layouts(rv, tuple(np.shape(cv))):
                options.append((_distance(lay, cv), ci, ri, lay))
    options.sort(key=lambda o: (o[0], o[1], o[2]))
    chosen: dict[int, np.ndarray] = {}
    used: set[int] = set()
    for dist, ci, ri, lay in options:
        if dist > PAIR_DISTANCE:
            break  # not the same tensor, whatever its shape: a value made outside the call
        if ci not in chosen and ri not in used:
            chosen[ci] = lay
            used.add(ri)
    out: Tensors = []
    for ci, (a, cv, d) in enumerate(cand_ins):
        if cfirst[ci] in chosen:
            out.append((a, chosen[cfirst[ci]], d))
        elif _size(cv) <= 1:
            out.append((a, cv, d))
        else:
            raise _NotReplayable(f"the candidate's argument {a} {list(np.shape(cv))} has no "
                                 "counterpart among the reference's inputs (made by an "
                                 "operator outside the replayed call, or one the capture does "
                                 "not see: a MindSpore tensor method)")
    left = [a for ri, (a, v, d) in enumerate(ins)
            if rfirst[ri] not in used and _size(v) > 1 and d.startswith(("float", "bfloat"))]
    if left:
        raise _NotReplayable(f"the reference's input {left[0]} has no counterpart among the "
                             "candidate operator's arguments (the candidate computes that part "
                             "in another operator)")
    return out


def _compared(want: Tensors, got: list[tuple[str, np.ndarray]], op: str, same_op: bool
              ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(reference outputs, replayed outputs) to compare. The same operator on both sides:
    all outputs. Across implementations, the outputs after the first of a normalisation
    (PyTorch's layer norm returns (out, mean, rstd), MindSpore's (out, mean, variance)) are
    by-products saved for backward, compared by neither the comparison nor replay; so is
    every output beyond the first when the two operators return different numbers of them."""
    from netparity.compare.engine import AUX_OUTPUT_OPS

    if same_op:
        return [v for _, v, _ in want], _in_order(want, got)
    if op in AUX_OUTPUT_OPS or len(want) != len(got):
        return [want[0][1]], [got[0][1]] if got else []
    return [v for _, v, _ in want], [g for _, g in got]


Group = list[list[Any]]  # the records of each call of an N:M group, in execution order


def _group_inputs(ops: _Ops, group: Group) -> tuple[Tensors, dict[str, tuple[int, str]]]:
    """(the group's inputs from outside it, labelled ``member:arg``; the inputs made inside it:
    label -> (member, output arg)). An input is made inside when it equals, element for
    element, an output an earlier member recorded (the capture saw the value pass from one
    operator to the next)."""
    outs = [ops.tensors(recs, "output") for recs in group]
    ext: Tensors = []
    inner: dict[str, tuple[int, str]] = {}
    for i, recs in enumerate(group):
        for a, v, d in ops.tensors(recs, "input"):
            label = f"{i}:{a}"
            src = next(((j, oa) for j in range(i - 1, -1, -1) for oa, ov, _ in outs[j]
                        if ov.shape == v.shape and v.size > 1 and np.array_equal(ov, v)), None)
            if src is not None:
                inner[label] = src
            else:
                ext.append((label, v, d))
    return ext, inner


def _run_group(adapter: Any, group: Group, inner: dict[str, tuple[int, str]],
               ext: Tensors) -> list[tuple[str, np.ndarray]]:
    """The group's calls made again in order, each on the outside inputs ``ext`` (labelled as
    :func:`_group_inputs` does) and its predecessors' replayed outputs; the last call's
    outputs (what the comparison compares for a group)."""
    given = {a: (v, d) for a, v, d in ext}
    done: list[dict[str, np.ndarray]] = []
    got: list[tuple[str, np.ndarray]] = []
    for i, recs in enumerate(group):
        dts = {r.arg: r.dtype for r in recs if r.role == "input"}
        ins: Tensors = []
        for r in recs:
            if r.role != "input":
                continue
            label = f"{i}:{r.arg}"
            if label in inner:
                j, oa = inner[label]
                if oa not in done[j]:
                    raise _NotReplayable(f"call {j} of the group made no output {oa!r} again")
                ins.append((r.arg, done[j][oa], dts[r.arg]))
            else:
                v, d = given[label]
                ins.append((r.arg, v, d))
        got = adapter.run_op(recs[0].native, ins, _Ops.scalars(recs), _Ops.op_info(recs))
        done.append(dict(got))
    return got


def _counterparts(c: CallResult, direction: str, ref: _Ops, cand: _Ops) -> tuple[Group, Group]:
    """The records of the reference's and the candidate's calls of ``c`` (one each, or the
    consecutive calls of an N:M group): the reference's from the call's key, the candidate's as
    the same-numbered run of the same ops in its module."""
    call, ev = _call_index(c)
    key = (direction, c.module, call, int(ev))
    if key not in ref.by:
        raise _NotReplayable("the call's records were not found in the reference trace")
    rparts, cparts = c.op.split("+"), c.cand_op.split("+")
    mine = ref.runs(direction, c.module, rparts)
    n = next((i for i, run in enumerate(mine) if run[0] == key), None)
    if n is None:
        raise _NotReplayable("the group's calls are not consecutive in the reference trace")
    theirs = cand.runs(direction, c.cand_module, cparts)
    if n >= len(theirs):
        raise _NotReplayable("the candidate's call was not found in its trace")
    return [ref.by[k] for k in mine[n]], [cand.by[k] for k in theirs[n]]


def replay_ops_step0(r0: CompareResult, ref_trace: str, cand_trace: str, ref_model: Any,
                     cand_model: Any, seed: int = 0,
                     direction: str = "forward") -> list[ReplayOutcome]:
    """Op-level replay of step 0's diverging op calls of ``direction``, in execution order:
    the reference's operator re-called on its captured inputs and recorded non-tensor arguments
    (it must reproduce its output), again on inputs one ulp off (its local noise), and the
    candidate's operator -- its own overload or primitive and arguments, from its trace -- on
    the reference's inputs (:func:`_as_candidate_inputs`) in the candidate's dtypes (the local
    error). Stops at the first call that introduces a difference.

    An N:M group (``addmm`` against ``MatMul + BiasAdd``) is replayed as its calls in order, each
    on the group's outside inputs and its predecessors' replayed outputs. The candidate's side
    must reproduce its *own* captured result from its own inputs first: a group that also runs
    operators the capture does not see (MindSpore's tensor methods and operators: ``x * 0.5``)
    cannot be made again from the trace and is "not replayed", never a culprit.

    In ``backward`` the calls are the operators the backward pass ran (PyTorch: the derivative
    formulas' aten calls, ``gelu_backward``, ``convolution_backward``, and the ops of a custom
    ``autograd.Function``'s ``backward``), fed the reference's captured gradients: the
    candidate's backward code judged alone. A call that cannot be made again says why
    ("not replayed")."""
    from netparity.frameworks.registry import adapter_for

    calls = plan(r0, direction, level="op")
    if not calls:
        return []
    ref, cand = _Ops(ref_trace), _Ops(cand_trace)
    ra, ca = adapter_for(ref_model), adapter_for(cand_model)
    rng = np.random.default_rng(seed + 32452843)
    outcomes: list[ReplayOutcome] = []
    for c in calls:
        o = ReplayOutcome(c.key, c.module, c.cand_module, c.op, accumulated=c.out_error,
                          direction=direction, cand_op=c.cand_op)
        outcomes.append(o)
        try:
            rgroup, cgroup = _counterparts(c, direction, ref, cand)
            ins, inner = _group_inputs(ref, rgroup)
            want = _primary(ref.tensors(rgroup[-1], "output"), rgroup[-1][0].op)
            if not ins or not want:
                raise _NotReplayable("the call's inputs or outputs were not captured")
            wanted = [v for _, v, _ in want]
            own = normwise_error(wanted, _in_order(want, _run_group(ra, rgroup, inner, ins)))
            if own > SELF_TOLERANCE:
                raise _NotReplayable(
                    f"the reference's own replay misses its captured result by {own:.3g}: the "
                    "op depends on random numbers or on state the trace does not hold")
            noise = max(_sampled_noise(want, lambda: _run_group(  # noqa: B023
                ra, rgroup, inner, _moved(ins, rng))), own)  # noqa: B023
            cins, cinner = _group_inputs(cand, cgroup)
            cwant = _primary(cand.tensors(cgroup[-1], "output"), cgroup[-1][0].op)
            same = (ra.name == ca.name and len(rgroup) == len(cgroup) == 1
                    and rgroup[0][0].native == cgroup[0][0].native)
            if len(cgroup) > 1 or ra.name != ca.name:
                cown = normwise_error([v for _, v, _ in cwant],
                                      _in_order(cwant, _run_group(ca, cgroup, cinner, cins)))
                if cown > SELF_TOLERANCE:
                    raise _NotReplayable(
                        f"the candidate's own replay misses its captured result by {cown:.3g}: "
                        "the call depends on operators the capture does not see, random "
                        "numbers or state the trace does not hold")
            with emulating(cand_model):
                got = _run_group(ca, cgroup, cinner, _as_candidate_inputs(ins, cins, same))
            op = c.op if len(rgroup) == 1 and len(cgroup) == 1 else ""
            local = normwise_error(*_compared(want, got, op, same))
            if not same and local > LOCAL_OVER_ACCUMULATED * c.out_error + 1e-6:
                raise _NotReplayable(
                    f"on the reference's inputs the candidate differs by {local:.3g}, "
                    f"{local / max(c.out_error, 1e-300):.3g}x its own run's difference "
                    f"({c.out_error:.3g}): its arguments were not paired as its operators use "
                    "them (a value made by operators outside the call)")
            out_dt = next((r.dtype for r in cgroup[-1] if r.role == "output"), want[0][2])
            judge(o, local, noise, want[0][2], out_dt)
        except NetparityError as e:
            o.verdict, o.reason = "not replayed", str(e)
        except Exception as e:  # noqa: BLE001 - an op may refuse the recorded arguments
            first = (str(e).strip().splitlines() or [""])[0]
            o.verdict, o.reason = "not replayed", f"{type(e).__name__}: {first}"[:200]
        if o.introduced:
            break
    return outcomes


def _call_index(c: CallResult) -> tuple[int, str]:
    """The (call index, event) a CallResult key ends with."""
    parts = c.key.split("|")
    return int(parts[-2]), parts[-1]


def _call_tensors(c: CallResult, direction: str, ref: _Calls,
                  allow_no_input_grads: bool = False) -> tuple[Tensors, Tensors, Tensors]:
    """(module inputs, gradients of its outputs, what the replay must reproduce); in backward
    with ``allow_no_input_grads`` the last is empty when the inputs took no gradient (the
    network's first layer: only its parameters' gradients can be judged)."""
    call, event = _call_index(c)
    recs = ref.recs(direction, c.module, call, event)
    if not recs:
        raise _NotReplayable("the call's records were not found in the reference trace")
    if direction == "forward":
        ins, outs = ref.tensors(recs, "input"), ref.tensors(recs, "output")
        if not ins or not outs:
            raise _NotReplayable("the call's inputs or outputs were not captured")
        return ins, [], outs
    # backward: the module's forward inputs (of its only call), the gradients of its outputs
    # (role "input" of the backward call) and of its inputs (role "output")
    if ref.calls("forward", c.module) != 1:
        raise _NotReplayable("the module runs more than once per step: its backward call "
                             "cannot be matched to one forward call")
    fwd_ins = ref.tensors(ref.recs("forward", c.module, 0), "input")
    gout, gin = ref.tensors(recs, "input"), ref.tensors(recs, "output")
    if fwd_ins and gout and not gin and allow_no_input_grads:
        return fwd_ins, gout, []
    if not fwd_ins or not gout or not gin:
        raise _NotReplayable("the call's forward inputs or gradients were not captured")
    return fwd_ins, gout, gin


def _cand_records(c: CallResult, cand: _Calls, role: str) -> list[Any]:
    """The candidate's recorded forward ``role`` records of the call ``c`` pairs with."""
    call, _ = _call_index(c)
    return [r for r in cand.recs("forward", c.cand_module,
                                 call if c.direction == "forward" else 0) if r.role == role]


def _by_shape(ref: Tensors, own: list[tuple[str, tuple[int, ...]]]) -> dict[str, int]:
    """Each of the candidate's arguments ``(path, shape)`` -> the index of the first unused
    reference tensor of that shape, in order (those without one are left out)."""
    used: dict[str, int] = {}
    for a, shape in own:
        k = next((i for i, (_, v, _) in enumerate(ref)
                  if i not in used.values() and tuple(np.shape(v)) == shape), None)
        if k is not None:
            used[a] = k
    return used


def _cand_inputs(c: CallResult, ins: Tensors, cand: _Calls) -> tuple[Tensors, dict[str, str]]:
    """The reference's inputs as the candidate's module takes them, in its own dtypes (as its
    capture recorded them), and the candidate's argument paths -> the reference's.

    When the two calls' argument paths differ -- transformers' LLaMA attention is called with
    ``hidden_states=``, the mask and the rotary tables; a port's attention takes ``x`` and
    builds the rest itself -- each of the candidate's recorded inputs takes the first unused
    reference input of the same shape, in order."""
    own = _cand_records(c, cand, "input")
    if not own or {r.arg for r in own} == {a for a, _, _ in ins}:
        dt = {r.arg: r.dtype for r in own}
        return [(a, v, dt.get(a, d)) for a, v, d in ins], {a: a for a, _, _ in ins}
    match = _by_shape(ins, [(r.arg, tuple(r.shape)) for r in own])
    missing = [r.arg for r in own if r.arg not in match]
    if missing:
        raise _NotReplayable(f"the candidate's input {missing[0]!r} has no reference input of "
                             "its shape")
    return ([(r.arg, ins[match[r.arg]][1], r.dtype) for r in own],
            {r.arg: ins[match[r.arg]][0] for r in own})


def _cand_grads(c: CallResult, gout: Tensors, cand: _Calls) -> list[tuple[str, np.ndarray]]:
    """The reference's output gradients under the candidate's output paths (by shape, in order,
    where the paths differ: a reference module may also return its attention weights)."""
    own = _cand_records(c, cand, "output")
    if not gout or not own or {r.arg for r in own} == {a for a, _, _ in gout}:
        return [(a, v) for a, v, _ in gout]
    match = _by_shape(gout, [(r.arg, tuple(r.shape)) for r in own])
    return [(a, gout[k][1]) for a, k in match.items()]


def _paired(want: Tensors, got: list[tuple[str, np.ndarray]]) -> tuple[list[np.ndarray],
                                                                         list[np.ndarray]]:
    """The reference's results and the candidate's replay, paired: by path, else by position
    when they are as many, else each candidate result with the first unused reference result of
    its shape (the pairs the comparison made; the rest has no counterpart to judge), or by path
    when the candidate's are a subset of the reference's."""
    if {a for a, _ in got} == {a for a, _, _ in want} or len(got) == len(want):
        return [v for _, v, _ in want], _in_order(want, got)
    named = {a: v for a, v, _ in want}
    if got and all(a in named for a, _ in got):  # a subset, by path (gradients w.r.t. inputs)
        return [named[a] for a, _ in got], [v for _, v in got]
    match = _by_shape(want, [(a, tuple(np.shape(v))) for a, v in got])
    if not match:
        return [v for _, v, _ in want], [v for _, v in got]  # no counterpart: inf
    vals = dict(got)
    return [want[k][1] for k in match.values()], [vals[a] for a in match]


def _cand_out_dtype(c: CallResult, direction: str, cand: _Calls, default: str) -> str:
    call, _ = _call_index(c)
    return next((r.dtype for r in cand.recs(direction, c.cand_module, call)
                 if r.role == "output"), default)


#: two sides' gradient factors that differ by a power of two within this (relative) are the
#: same handling at different loss scales (clipping factors differ by the gradients' noise)
FACTOR_MATCH = 5e-2


class _Payloads(Mapping[str, np.ndarray]):
    """Some records' payloads by parameter name, each read from the trace when it is looked
    up (a fresh array, read with ``pread``: not a page of a memory map that stays resident
    while the trace is open), so a whole step's gradients or parameters are not held at once.
    ``flat``: raveled, in float32 / float64 (widened where they are used)."""

    def __init__(self, tr: Any, recs: dict[str, Any], flat: bool = False) -> None:
        self.tr, self._recs, self.flat = tr, recs, flat

    def __getitem__(self, name: str) -> np.ndarray:
        r = self._recs[name]
        with self.tr.payload_reader(r) as pr:
            a = np.array(pr.read(0, pr.count), copy=True)
        a = a.reshape(tuple(r.shape)) if len(r.shape) else a.reshape(())
        if not self.flat:
            return a
        return (a if a.dtype in (np.float32, np.float64) else a.astype(np.float64)).ravel()

    def __iter__(self) -> Iterator[str]:
        return iter(self._recs)

    def __len__(self) -> int:
        return len(self._recs)

    def __contains__(self, name: object) -> bool:
        return name in self._recs


def _step_records(tr: Any, step: int) -> tuple[Mapping[str, np.ndarray],
                                               Mapping[str, np.ndarray], dict[str, str]]:
    """(gradients, values after the update, dtypes) of one step, by parameter name; the
    arrays are read when they are looked up (:class:`_Payloads`)."""
    grads: dict[str, Any] = {}
    after: dict[str, Any] = {}
    dtypes: dict[str, str] = {}
    for r in tr.records(step=step, kind="grad"):
        if r.has_payload:
            grads[r.module] = r
    for r in tr.records(step=step, kind="param"):
        if r.has_payload and r.module in grads:
            after[r.module] = r
            dtypes[r.module] = r.dtype
    return _Payloads(tr, grads), _Payloads(tr, after, flat=True), dtypes


class _Side:
    """One side of the optimizer replay: its live model and optimizer, the optimizer's states
    before each step (``watch``), the model's state at the start of each step."""

    def __init__(self, trace: str, model: Any, opt: Any, watch: Any,
                 starts: dict[int, Any], keep: _Keeper | None = None) -> None:
        from netparity.frameworks.registry import adapter_for

        self.tr, self.model, self.opt, self.watch, self.starts = (
            open_trace(trace), model, opt, watch, starts)
        self.adapter = adapter_for(model)
        self.keep = keep or _Keeper(trace)

    def stepped(self, state: Any, start: Any, grads: Mapping[str, np.ndarray],
                keep_state: bool = False, owned: bool = False) -> tuple[Any, Any]:
        """The model's state after one replayed step from ``start`` (kept on disk: see
        :class:`_Keeper`; read one parameter at a time) and the optimizer's. ``owned``: the
        optimizer may take ``state``'s arrays as they are (a fresh copy nobody else holds)."""
        from netparity.frameworks.models import set_weights

        set_weights(self.model, start, {k: v for k, v in start.dtypes.items()
                                        if v == "bfloat16"})
        after = self.adapter.replay_step(self.opt, self.model, state, grads, keep_state,
                                         owned)
        return self.keep.model(self.model), after

    def before(self, step: int) -> tuple[Any, bool]:
        """(the optimizer's state before ``step``, whether it is a fresh copy: kept on disk,
        :class:`netparity.statestore.KeptList`)."""
        return self.watch.states[step], bool(getattr(self.watch.states, "fresh", False))

    def swap_out(self) -> bool:
        """Put the (small) state before the first step into the optimizer in place of its
        own, the state after the last step (an Adam's: two copies of the weights), for the
        replay; :meth:`swap_back` restores it. False (nothing done) unless both are kept."""
        if self.watch.final is None or not self.watch.states:
            return False
        self.adapter.load_optimizer_state(self.opt, self.watch.states[0])
        return True

    def swap_back(self) -> None:
        self.adapter.load_optimizer_state(self.opt, self.watch.final)

    def moments(self, state: Any) -> dict[str, tuple[np.ndarray, str]]:
        """The per-parameter entries of one of this side's optimizer states ({} for None)."""
        return {} if state is None else self.adapter.optimizer_moments(self.opt, state)

    def state_kept_after(self, step: int) -> bool:
        """Whether :meth:`calibrate` of ``step`` can check the state the step left."""
        return bool(self.moments(self.watch.after(step)))

    def calibrate(self, step: int, grads: Mapping[str, np.ndarray],
                  after: Mapping[str, np.ndarray],
                  dtypes: dict[str, str], f_try: float = 1.0,
                  rng: np.random.Generator | None = None) -> tuple[float | None, Any, str]:
        """The factor ``f`` such that this side's optimizer, fed its captured gradients / f
        from its own state, reproduces its captured update and the state it left (``f_try``
        first: the previous step's), with the model's state after that replay and how ``f``
        was found; ``(None, None, why)`` when none does. With ``rng`` the replayed gradients
        are moved one ulp: the replay then also measures the update's noise (one replay less
        per step).

        The optimizer's state after the step (momentum buffers, Adam's first moment: linear in
        the gradient it was given) shows the factor where the update cannot: Adam's first
        update is nearly the same for any gradient scale, so clipping would pass unseen there
        and leave the replayed moments off for every later step. Without that state the factor
        comes from the update itself (optimizers affine in the gradient)."""
        from netparity.analyzers.replay import gradient_factor
        from netparity.analyzers.step import _values, rounding_noise
        from netparity.compare.noise import perturb_last_bit

        start = self.starts[step]
        names = [n for n in after if n in start]
        target = self.moments(self.watch.after(step))
        # the state before the step is read again for each replay when it is kept on disk
        # (the optimizer then takes that copy as it is); ``before`` only where it is needed
        state, fresh = self.before(step)
        before = self.moments(state) if target or not fresh else {}
        if fresh:
            state = None

        def state_for_replay() -> tuple[Any, bool]:
            return (state, False) if state is not None else self.before(step)

        def replay(f: float) -> tuple[Any, tuple[str, float], tuple[str, float]]:
            g = _divided(grads, f)
            if rng is not None:
                g = {n: perturb_last_bit(v, rng) for n, v in g.items()}
            st0, owned = state_for_replay()
            own, st = self.stepped(st0, start, g, keep_state=bool(target), owned=owned)
            del st0
            return (own, _self_error(own, start, after, dtypes, names),
                    _state_error(self.moments(st), before, target))

        own, worst, s_worst = replay(f_try)
        if worst[1] <= SELF_TOLERANCE and s_worst[1] <= SELF_TOLERANCE:
            return f_try, own, describe_factor(f_try)
        miss = (f"own optimizer replay misses its captured update of {worst[0]} by "
                f"{worst[1]:.3g}" if worst[1] > SELF_TOLERANCE else
                f"own optimizer replay reproduces its update but misses the state it left "
                f"({s_worst[0]}) by {s_worst[1]:.3g}")
        f, how = None, ""
        if target:  # the factor from the state the step left
            rel, how = self._state_factor(step, grads, target)
            f = None if rel is None else _snap(rel)
        if f is None:  # the factor from the update (an optimizer affine in the gradient)
            st0, owned = state_for_replay()
            zero, _ = self.stepped(st0, start, {n: np.zeros_like(g) for n, g in grads.items()},
                                   owned=owned)
            del st0
            probes = []
            for n in names:
                z = _values(zero[n], dtypes[n])
                probes.append((_values(own[n], dtypes[n]) - z, after[n] - z,
                               rounding_noise(_values(start[n], dtypes[n]), dtypes[n])))
            rel, how = gradient_factor(probes)
            if rel is None:
                return None, None, f"{miss}; {how}"
            f = _snap(f_try * rel)
        own, again, s_again = replay(f)
        if again[1] > SELF_TOLERANCE or s_again[1] > SELF_TOLERANCE:
            what = (f"by {again[1]:.3g} ({again[0]})" if again[1] > SELF_TOLERANCE else
                    f"its state by {s_again[1]:.3g} ({s_again[0]})")
            return None, None, f"{miss}, and {what} with the gradients / {f:.6g}"
        return f, own, describe_factor(f)

    def _state_factor(self, step: int, grads: Mapping[str, np.ndarray],
                      target: dict[str, tuple[np.ndarray, str]]) -> tuple[float | None, str]:
        """The factor between the captured gradients and those the optimizer was given, from
        the state entries linear in the gradient: each such entry moved by ``a`` when fed the
        captured gradients instead of zero, and by ``b = a / f`` in the run (checked with twice
        the gradients; Adam's second moment is quadratic and left out)."""
        from netparity.analyzers.replay import FACTOR_SPREAD, gradient_factor
        from netparity.analyzers.step import rounding_noise

        start = self.starts[step]
        moved = []
        for c in (0.0, 1.0, 2.0):
            g = {n: (np.asarray(v, np.float64) * c).astype(np.asarray(v).dtype)
                 for n, v in grads.items()}
            state, owned = self.before(step)
            moved.append(self.moments(self.stepped(state, start, g, keep_state=True,
                                                   owned=owned)[1]))
            del state
        probes = []
        for k, (t, dt) in target.items():
            if not all(k in m for m in moved):
                continue
            s0, s1, s2 = (m[k][0] for m in moved)
            a = s1 - s0
            na = float(np.linalg.norm(a))
            if na == 0.0 or float(np.linalg.norm(s2 - s0 - 2.0 * a)) > FACTOR_SPREAD * na:
                continue  # the gradient does not move it, or not linearly
            probes.append((a, t - s0, rounding_noise(t, dt)))
        if not probes:
            return None, "no entry of the optimizer's state is linear in the gradient"
        return gradient_factor(probes)


def _state_error(got: dict[str, tuple[np.ndarray, str]], before: dict[str, tuple[np.ndarray,
                 str]], target: dict[str, tuple[np.ndarray, str]]) -> tuple[str, float]:
    """The optimizer state entry a replay left furthest from the one the run left (normwise,
    relative to the step's change to it, beyond 3x its rounding); ``("", 0.0)`` when the run's
    state after the step was not kept."""
    from netparity.analyzers.step import rounding_noise

    worst = ("", 0.0)
    for k, (t, dt) in target.items():
        if k not in got:
            continue
        inc = t - before[k][0] if k in before else t
        ni = float(np.linalg.norm(inc))
        miss = float(np.linalg.norm(got[k][0] - t))
        if ni == 0.0 or miss <= SELF_TOLERANCE * ni:
            continue
        err = max(0.0, miss - 3.0 * rounding_noise(t, dt)) / ni
        if err > worst[1]:
            worst = (k, err)
    return worst


def _captured_ratio(grads: Mapping[str, np.ndarray], cand_grads: Mapping[str, np.ndarray],
                    ref_to_cand: dict[str, str]) -> float:
    """The global norm of the candidate's captured gradients over the reference's (of the
    parameters both hold), snapped to a power of two within 1 % (another loss scale in the
    backward pass); 1 when they cannot be paired."""
    num = den = 0.0
    for n, g in grads.items():
        cg = cand_grads.get(ref_to_cand.get(n, ""))
        if cg is None or cg.size != g.size:
            continue
        num += float(np.dot(cg.ravel(), cg.ravel()))
        den += float(np.dot(g.ravel(), g.ravel()))
    r = float(np.sqrt(num / den)) if den > 0 else 1.0
    if not r > 0 or not np.isfinite(r):
        return 1.0
    k = round(float(np.log2(r)))
    return 2.0**k if _is_pow2(r) else r


def _is_pow2(r: float) -> bool:
    """``r`` is a power of two within 1 %."""
    k = round(float(np.log2(r))) if r > 0 else 0
    return r > 0 and abs(r / 2.0**k - 1.0) <= 1e-2


def _snap(f: float) -> float:
    """``f`` as the power of two it is within ``POW2_TOLERANCE`` of, else as it is."""
    from netparity.analyzers.replay import POW2_TOLERANCE

    k = round(float(np.log2(f)))
    return 2.0**k if abs(f / 2.0**k - 1.0) <= POW2_TOLERANCE else f


def _divided(grads: Mapping[str, np.ndarray], f: float) -> Mapping[str, np.ndarray]:
    if f == 1.0:
        return grads
    return {n: (np.asarray(g, np.float64) / f).astype(np.asarray(g).dtype)
            for n, g in grads.items()}


def _self_error(own: Any, start: Any, after: Mapping[str, np.ndarray], dtypes: dict[str, str],
                names: list[str]) -> tuple[str, float]:
    """The parameter whose replayed update misses the captured one most (normwise, relative),
    beyond the rounding of the stored parameter (3x: a replay one ulp off may round the other
    way, and a small learning rate moves a parameter by a few ulps only)."""
    from netparity.analyzers.step import _values, rounding_noise

    worst = ("", 0.0)
    for n in names:
        p0 = _values(start[n], dtypes[n])
        d_ref = after[n] - p0
        nr = float(np.linalg.norm(d_ref))
        if nr == 0 or n not in own:
            continue
        miss = float(np.linalg.norm(_values(own[n], dtypes[n]) - p0 - d_ref))
        if miss <= SELF_TOLERANCE * nr:
            continue  # reproduced: no need for the (costly) rounding term
        err = max(0.0, miss - 3.0 * rounding_noise(p0, dtypes[n])) / nr
        if err > worst[1]:
            worst = (n, err)
    return worst


StepReplay = tuple[list[dict[str, Any]], str, dict[str, Any]]


def replay_optimizer(ref_trace: str, cand_trace: str, ref_model: Any, cand_model: Any,
                     ref_opt: Any, cand_opt: Any, ref_watch: Any, cand_watch: Any,
                     ref_starts: dict[int, Any], cand_starts: dict[int, Any],
                     ref_to_cand: dict[str, str], steps: int = 1,
                     seed: int = 0) -> dict[int, StepReplay]:
    """Optimizer replay of steps ``0..steps-1``: at each step both optimizers take that step
    again from the same parameters (``ref_starts[k]`` / ``cand_starts[k]``: the reference's
    state, converted) on the *reference's* captured gradients. The reference's optimizer starts
    from its own state before that step (``ref_watch``: a ``watch_steps`` object); the
    candidate's from the state its own replay of the previous step left (its momentum
    buffers and moments built from the reference's gradients, free of gradient noise), with
    that step's learning rate and counters from its own run (``cand_watch``).

    Each side's gradients go in the form its optimizer expects: the reference's own replay must
    reproduce its captured update; when it does not, the factor between the captured
    gradients and those the optimizer was given (a loss scale undone by hand, clipping) is
    estimated (:func:`netparity.analyzers.replay.gradient_factor`) and checked by replaying
    again. The candidate's factor is found the same way on its own captured gradients and
    update (an optimizer that divides by its own ``loss_scale`` needs the scaled gradients).

    Returns ``{step: (update entries, why not, info)}``: one
    :func:`netparity.analyzers.step.delta_entry` per parameter with a ``replay_bound`` (the
    reference's own replay on gradients one ulp off, ``NOISE_K`` x, plus rounding); ``why
    not`` says why a step has none (later steps are then not replayed); ``info`` holds the
    gradient factors used."""
    from netparity.frameworks.models import set_weights

    if ref_watch is None or cand_watch is None or not ref_watch.states \
            or not cand_watch.states:
        return {0: ([], "the optimizers' states before their steps were not kept", {})}
    keep = _Keeper(ref_trace)
    ref = _Side(ref_trace, ref_model, ref_opt, ref_watch, ref_starts, keep)
    cand = _Side(cand_trace, cand_model, cand_opt, cand_watch, cand_starts, keep)
    rng = np.random.default_rng(seed + 15485863)
    keep_ref, keep_cand = keep.model(ref_model), keep.model(cand_model)
    out: dict[int, StepReplay] = {}
    chain = _Chain()
    swapped: list[_Side] = []
    try:
        for side in (ref, cand):  # (kept on disk: the workflow's; a caller's list stays as is)
            if side.before(0)[1] and side.swap_out():
                swapped.append(side)
        for k in range(steps):
            if k >= min(len(ref_watch.states), len(cand_watch.states)) or k not in ref_starts \
                    or k not in cand_starts:
                out[k] = ([], "the optimizers' states before this step were not kept", {})
                break
            try:
                out[k] = _replay_one(k, ref, cand, chain, ref_to_cand, rng)
            except NetparityError as e:
                out[k] = ([], str(e), {})
            except Exception as e:  # noqa: BLE001 - an optimizer the user wrote may refuse it
                first = (str(e).strip().splitlines() or [""])[0]
                out[k] = ([], f"{type(e).__name__}: {first}"[:200], {})
            if not out[k][0]:
                break  # the candidate's chain of states is broken: later steps not replayed
    finally:
        chain.state = None
        for model, st in ((ref_model, keep_ref), (cand_model, keep_cand)):
            set_weights(model, st, {k: v for k, v in st.dtypes.items() if v == "bfloat16"})
        for side in swapped:
            side.swap_back()
    return out


class _Chain:
    """What one step's replay hands the next: the candidate optimizer's state after its
    replay, the reference's gradient factor, the power of two between the sides' factors."""

    def __init__(self) -> None:
        self.state: Any = None
        self.f_ref = 1.0
        self.cand_pow: int | None = None
        self.scale = 1.0  # the reference's optimizer's own loss scale / the candidate's
        self.handling: dict[str, Any] | None = None  # a difference of gradient handling


def _replay_one(k: int, ref: _Side, cand: _Side, chain: _Chain, ref_to_cand: dict[str, str],
                rng: np.random.Generator) -> StepReplay:
    """Step ``k`` of :func:`replay_optimizer` (``chain`` carries the previous step's)."""
    from netparity.analyzers.step import _values, delta_entry
    from netparity.compare.noise import NOISE_K

    grads, after, dtypes = _step_records(ref.tr, k)
    p_start = ref.starts[k]
    names = [n for n in after if n in ref_to_cand and n in p_start]
    if not names:
        return [], "no parameter gradients with their values were captured", {}
    # the reference on its own gradients one ulp off: checks the form they go in (loss scale,
    # clipping) and measures the update's noise in the same replay
    f_ref, moved, how = ref.calibrate(k, grads, after, dtypes, chain.f_ref, rng)
    if f_ref is None:
        return [], (f"the reference's {how} (the training code changes the gradients or the "
                    "step in a way the captured gradients do not show)"), {}
    chain.f_ref = f_ref
    info: dict[str, Any] = {"ref_factor": f_ref, "ref_gradients": how}
    if chain.cand_pow is None:  # the candidate's own handling, found once (step 0)
        chain.cand_pow = 0
        cg, ca, cd = _step_records(cand.tr, k)
        s_ref, s_cand = (ref.adapter.optimizer_loss_scale(ref.opt),
                         cand.adapter.optimizer_loss_scale(cand.opt))
        chain.scale = s_ref / s_cand
        # the factor the candidate's code divides its own captured gradients by when it hands
        # them over as the reference's does
        expect = f_ref * chain.scale
        f_cand, _, chow = (cand.calibrate(k, cg, ca, cd, f_try=expect) if ca else
                           (None, None, "update was not captured"))
        if f_cand is None:
            # a replay that misses its own side's captured update is no evidence: the update
            # is judged without it (the noise run's bound), and the phase says so
            return [], (f"could not judge the candidate's update by replay: its {chow} (an "
                        "optimizer whose state the replay cannot copy, or training code "
                        "between backward and the step that the captured gradients do not "
                        "show)"), {}
        ratio = f_cand / expect
        # the same handling gives the same factor (a loss scale, none), or one that follows the
        # gradients' global norm (clipping; captured gradients at another loss scale): the two
        # sides' norms differ by their noise, and in a chaotic network by far more than 5 %
        c_norm = _captured_ratio(grads, cg, ref_to_cand)
        same = min(abs(ratio - 1.0), abs(ratio / c_norm - 1.0)) <= FACTOR_MATCH
        if not same and ref.state_kept_after(k) and not cand.state_kept_after(k) \
                and abs(ratio / 2.0**round(float(np.log2(ratio))) - 1.0) > FACTOR_MATCH:
            # the candidate's state after its step was not kept: an update nearly free of
            # the gradient's scale (Adam's first) cannot tell its clipping apart
            info["cand_note"] = (
                f"the candidate's optimizer state after its step was not kept: it is fed "
                f"the captured gradients / {f_ref:.6g} as the reference's optimizer was")
        elif not same:
            c_scale = c_norm if _is_pow2(c_norm) else 1.0
            got = c_scale / ratio  # what the candidate's optimizer receives, reference = 1
            chain.handling = {
                "ratio": got, "ref_factor": f_ref, "cand_factor": f_cand,
                "ref_optimizer_scale": s_ref, "cand_optimizer_scale": s_cand,
                "captured_ratio": c_norm,
                "summary": (
                    f"the candidate's optimizer receives {got:.4g}x the gradients the "
                    f"reference's does: its training code hands it its captured gradients / "
                    f"{f_cand:.6g}" + (f" (the optimizer divides by {s_cand:g} itself)"
                                       if s_cand != 1.0 else "")
                    + f", the reference's / {f_ref:.6g}" + (
                        f" (its optimizer divides by {s_ref:g})" if s_ref != 1.0 else "")
                    + (f", and the captured gradients differ by {c_norm:.4g}x"
                       if c_scale != 1.0 else "")
                    + " -- gradient accumulation, loss scaling or clipping between backward "
                    "and the optimizer step differs")}
    if chain.handling is not None:
        info["handling"] = chain.handling
    # the candidate is fed what a candidate handling gradients as the reference does would
    # give its optimizer: its optimizer is judged on its own, the handling above separately
    f_use = f_ref * chain.scale
    info["cand_factor"] = f_use
    info["cand_gradients"] = describe_factor(f_use)
    if k == 0 or chain.state is None:
        cstate, owned = cand.before(0)
    else:  # (the merged state's moments are chain.state's, which the replay replaces)
        cstate, owned = cand.adapter.merge_optimizer_state(
            cand.opt, chain.state, cand.watch.states[k]), True
        chain.state = None
    cgrads = {ref_to_cand[n]: v for n, v in _divided(grads, f_use).items() if n in ref_to_cand}
    cand_after, chain.state = cand.stepped(cstate, cand.starts[k], cgrads, keep_state=True,
                                           owned=owned)
    del cstate, cgrads
    c_start = cand.starts[k]
    deltas: list[dict[str, Any]] = []
    for n in names:
        c = ref_to_cand[n]
        if c not in cand_after or c not in c_start:
            continue
        dt, cdt = dtypes[n], cand_after.dtypes.get(c, "float32")
        p0 = _values(p_start[n], dt)
        d_ref = after[n] - p0
        nr = float(np.linalg.norm(d_ref))
        d_cand = _values(cand_after[c], cdt) - _values(c_start[c], cdt)
        if d_cand.size != d_ref.size or nr == 0:
            continue
        e = delta_entry(n, c, p0, d_ref, d_cand, dt, cdt)
        e["replay_noise"] = float(np.linalg.norm(_values(moved[n], dt) - p0 - d_ref)) / nr
        e["step_size_floor"] = _step_size_floor(ref.opt, cand.opt, k + 1,
                                                coarser(dt, cdt))
        e["replay_bound"] = (NOISE_K * e["replay_noise"] + 3.0 * e["round_noise"]
                             + e["arith_floor"] + e["step_size_floor"])
        deltas.append(e)
    if not deltas:
        return [], "no parameter's update could be paired with the candidate's", info
    return deltas, "", info


def _betas(opt: Any) -> tuple[float, float] | None:
    """An Adam-type optimizer's (beta1, beta2): PyTorch's ``param_groups[..]["betas"]``,
    MindSpore's ``beta1`` / ``beta2``; None for other optimizers."""
    groups = getattr(opt, "param_groups", None)
    if isinstance(groups, list) and groups and isinstance(groups[0], dict) \
            and "betas" in groups[0]:
        b1, b2 = groups[0]["betas"]
        return float(b1), float(b2)
    b1, b2 = getattr(opt, "beta1", None), getattr(opt, "beta2", None)
    if b1 is None or b2 is None:
        return None
    try:
        vals = [float(np.asarray(b.asnumpy() if hasattr(b, "asnumpy") else b).ravel()[0])
                for b in (b1, b2)]
    except (TypeError, ValueError, IndexError, AttributeError):
        return None
    return vals[0], vals[1]


def adam_type(opt: Any) -> bool:
    """Whether ``opt`` is an Adam-type optimizer (it has betas; see :func:`_betas`)."""
    return opt is not None and _betas(opt) is not None


def _step_size_floor(ref_opt: Any, cand_opt: Any, t: int, dtype: str) -> float:
    """How far two faithful Adam implementations' updates may differ, relative to the update,
    from computing the bias corrections in ``dtype``: ``1 - beta2**t`` cancels (0.002 at
    t = 2 with beta2 = 0.999), so one rounding of ``beta2**t`` -- MindSpore evaluates it in
    float32, PyTorch in float64 -- moves ``sqrt(1 - beta2**t)`` by
    ``eps * beta2**t / (1 - beta2**t) / 2`` relative, and ``1 - beta1**t`` by
    ``eps * beta1**t / (1 - beta1**t)``. A uniform difference of that size across parameters is
    arithmetic, not a learning-rate or optimizer mistake (those differ by orders of magnitude
    more). 0 for optimizers without betas."""
    betas = _betas(ref_opt) or _betas(cand_opt)
    if betas is None:
        return 0.0
    b1, b2 = (min(max(b, 0.0), 1.0 - 1e-12) for b in betas)
    eps = unit_roundoff(dtype)
    return eps * (b2**t / (1.0 - b2**t) / 2.0 + b1**t / (1.0 - b1**t))
