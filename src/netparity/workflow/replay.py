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
nothing the workflow reports. Replaying a direction stops at the first call that introduces a
difference.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from netparity.analyzers.replay import (
    SELF_TOLERANCE,
    ReplayOutcome,
    judge,
    normwise_error,
    plan,
)
from netparity.compare.results import CallResult, CompareResult
from netparity.errors import NetparityError
from netparity.trace import open_trace

__all__ = ["replay_step0"]

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
    if {a for a, _, _ in ref} == set(by_arg):
        return [by_arg[a] for a, _, _ in ref]
    return [g for _, g in got]


def _moved(ts: Tensors, rng: np.random.Generator) -> Tensors:
    from netparity.compare.noise import perturb_last_bit

    return [(a, perturb_last_bit(v, rng), d) for a, v, d in ts]


def replay_step0(r0: CompareResult, direction: str, ref_trace: str, cand_trace: str,
                 ref_model: Any, cand_model: Any, ref_state0: Any, cand_state0: Any,
                 seed: int = 0, step: int = 0) -> list[ReplayOutcome]:
    """Replay step 0's diverging module calls of ``direction`` (``forward`` or ``backward``;
    see the module docstring). For a resynchronised later ``step``, ``r0`` is that step's
    comparison and the two states are the ones both sides started it from."""
    from netparity.ckpt.mapping import state_of
    from netparity.compare.noise import perturb_last_bit
    from netparity.frameworks.models import run_module, run_module_backward, set_weights

    calls = plan(r0, direction)
    if not calls:
        return []
    ref, cand = _Calls(ref_trace, step), _Calls(cand_trace, step)
    rng = np.random.default_rng(seed + 104729)
    keep_ref, keep_cand = state_of(ref_model), state_of(cand_model)

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
    outcomes: list[ReplayOutcome] = []
    try:
        load(ref_model, ref_state0)
        load(cand_model, cand_state0)
        for c in calls:
            o = ReplayOutcome(c.key, c.module, c.cand_module, c.op, accumulated=c.out_error,
                              direction=direction)
            outcomes.append(o)
            try:
                ins, gout, want = _call_tensors(c, direction, ref)
                cand_ins = _cand_dtypes(c, ins, cand)
                ref_g = [(a, v) for a, v, _ in gout]
                own = normwise_error([v for _, v, _ in want],
                                     _in_order(want, run(ref_model, c.module, ins, ref_g)))
                if own > SELF_TOLERANCE:
                    raise _NotReplayable(
                        f"the reference's own replay misses its captured result by {own:.3g}: "
                        "the call depends on random numbers, a non-tensor argument or hidden "
                        "state")
                moved_g = [(a, v) for a, v, _ in _moved(gout, rng)]
                noisy = with_moved_weights(c.module, functools.partial(
                    run, ref_model, c.module, _moved(ins, rng), moved_g))
                noise = max(normwise_error([v for _, v, _ in want], _in_order(want, noisy)), own)
                got = run(cand_model, c.cand_module, cand_ins, ref_g)
                local = normwise_error([v for _, v, _ in want], _in_order(want, got))
                judge(o, local, noise, want[0][2], _cand_out_dtype(c, direction, cand,
                                                                   want[0][2]))
            except NetparityError as e:
                o.verdict, o.reason = "not replayed", str(e)
            except Exception as e:  # noqa: BLE001 - a module the user wrote may refuse replay
                first = (str(e).strip().splitlines() or [""])[0]
                o.verdict, o.reason = "not replayed", f"{type(e).__name__}: {first}"[:200]
            if o.introduced:
                break
    finally:
        load(ref_model, keep_ref)
        load(cand_model, keep_cand)
    return outcomes


def _call_index(c: CallResult) -> tuple[int, str]:
    """The (call index, event) a CallResult key ends with."""
    parts = c.key.split("|")
    return int(parts[-2]), parts[-1]


def _call_tensors(c: CallResult, direction: str, ref: _Calls) -> tuple[Tensors, Tensors,
                                                                        Tensors]:
    """(module inputs, gradients of its outputs, what the replay must reproduce)."""
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
    if not fwd_ins or not gout or not gin:
        raise _NotReplayable("the call's forward inputs or gradients were not captured")
    return fwd_ins, gout, gin


def _cand_dtypes(c: CallResult, ins: Tensors, cand: _Calls) -> Tensors:
    """The reference's inputs in the candidate's own dtypes (as its capture recorded them)."""
    call, _ = _call_index(c)
    own = {r.arg: r.dtype for r in cand.recs("forward", c.cand_module,
                                             call if c.direction == "forward" else 0)
           if r.role == "input"}
    return [(a, v, own.get(a, d)) for a, v, d in ins]


def _cand_out_dtype(c: CallResult, direction: str, cand: _Calls, default: str) -> str:
    call, _ = _call_index(c)
    return next((r.dtype for r in cand.recs(direction, c.cand_module, call)
                 if r.role == "output"), default)


def replay_optimizer(ref_trace: str, ref_model: Any, cand_model: Any, ref_opt: Any,
                     cand_opt: Any, ref_first: Any, cand_first: Any, ref_state0: Any,
                     cand_state0: Any, ref_to_cand: dict[str, str],
                     seed: int = 0) -> tuple[list[dict[str, Any]], str]:
    """Optimizer replay for step 0: both optimizers take their first step again from the state
    they had before it (``ref_first`` / ``cand_first``: ``watch_first_step`` objects), from the
    common step-0 weights, on the *reference's* captured gradients (converted to the
    candidate's names). Returns ``(update entries, why not)``: one
    :func:`netparity.analyzers.step.delta_entry` per parameter with a ``replay_bound`` (the
    reference's own replay on gradients one ulp off, ``NOISE_K`` x, plus rounding), judged by
    the update analyzer; ``why not`` says why there are none."""
    from netparity.analyzers.step import _values, delta_entry
    from netparity.ckpt.mapping import state_of
    from netparity.compare.noise import NOISE_K, perturb_last_bit
    from netparity.frameworks.models import set_weights
    from netparity.frameworks.registry import adapter_for

    if ref_first is None or cand_first is None or ref_first.state is None \
            or cand_first.state is None:
        return [], "the optimizers' states before their first step were not kept"
    tr = open_trace(ref_trace)
    grads: dict[str, np.ndarray] = {}
    after: dict[str, np.ndarray] = {}
    dtypes: dict[str, str] = {}
    for r in tr.records(step=0, kind="grad"):
        if r.has_payload:
            grads[r.module] = np.asarray(tr.tensor(r))
    for r in tr.records(step=0, kind="param"):
        if r.has_payload and r.module in grads:
            after[r.module] = np.asarray(tr.tensor(r), np.float64).ravel()
            dtypes[r.module] = r.dtype
    names = [n for n in after if n in ref_to_cand and n in ref_state0]
    if not names:
        return [], "no parameter gradients with their values were captured"
    rng = np.random.default_rng(seed + 15485863)
    ra, ca = adapter_for(ref_model), adapter_for(cand_model)
    keep_ref, keep_cand = state_of(ref_model), state_of(cand_model)

    def load(model: Any, st: Any) -> None:
        set_weights(model, st, {k: v for k, v in st.dtypes.items() if v == "bfloat16"})

    def stepped(adapter: Any, model: Any, opt: Any, first: Any, st0: Any,
                g: dict[str, np.ndarray]) -> Any:
        load(model, st0)
        adapter.replay_step(opt, model, first.state, g)
        return state_of(model)

    try:
        own = stepped(ra, ref_model, ref_opt, ref_first, ref_state0, grads)
        moved = stepped(ra, ref_model, ref_opt, ref_first, ref_state0,
                        {k: perturb_last_bit(v, rng) for k, v in grads.items()})
        cand = stepped(ca, cand_model, cand_opt, cand_first, cand_state0,
                       {ref_to_cand[k]: v for k, v in grads.items() if k in ref_to_cand})
    finally:
        load(ref_model, keep_ref)
        load(cand_model, keep_cand)
    out: list[dict[str, Any]] = []
    worst_self = ("", 0.0)
    for n in names:
        c = ref_to_cand[n]
        if c not in cand or c not in cand_state0:
            continue
        dt, cdt = dtypes[n], cand.dtypes.get(c, "float32")
        p0 = _values(ref_state0[n], dt)
        d_ref = after[n] - p0
        nr = float(np.linalg.norm(d_ref))
        d_cand = _values(cand[c], cdt) - _values(cand_state0[c], cdt)
        if d_cand.size != d_ref.size or nr == 0:
            continue
        d_own = _values(own[n], dt) - p0
        self_err = float(np.linalg.norm(d_own - d_ref)) / nr
        if self_err > worst_self[1]:
            worst_self = (n, self_err)
        noise = max(float(np.linalg.norm(_values(moved[n], dt) - p0 - d_own)) / nr, self_err)
        e = delta_entry(n, c, p0, d_ref, d_cand, dt, cdt)
        e["replay_noise"] = noise
        e["replay_bound"] = (NOISE_K * noise + 3.0 * e["round_noise"] + e["arith_floor"])
        out.append(e)
    from netparity.analyzers.replay import SELF_TOLERANCE

    if worst_self[1] > SELF_TOLERANCE:
        return [], (f"the reference's own optimizer replay misses its captured update of "
                    f"{worst_self[0]} by {worst_self[1]:.3g} (the training code changes the "
                    "gradients or the step in a way the captured gradients do not show, e.g. "
                    "clipping or loss scaling)")
    return out, ""
