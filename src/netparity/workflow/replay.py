"""Run the replays behind "introduced here" on the step workflow's live models.

For each call the replay analyzer (:mod:`netparity.analyzers.replay`) plans, in execution
order: read the reference's captured inputs and outputs of that call from its trace; call the
reference's module on those inputs (it must reproduce its own output, else the call depends on
something the tensors do not hold); call it again with the inputs and the module's own weights
moved one ulp (the local noise); call the candidate's module on the same inputs (the local
error). Both models are set to their step-0 weights first and restored afterwards, so replays
change nothing the workflow reports. Replaying stops at the first call that introduces a
difference.
"""

from __future__ import annotations

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
from netparity.compare.results import CompareResult
from netparity.errors import NetparityError
from netparity.trace import open_trace

__all__ = ["replay_forward"]


def _calls_by_index(tr: Any) -> dict[tuple[str, int], list[Any]]:
    """Step 0's forward module records, by (module path, call index)."""
    out: dict[tuple[str, int], list[Any]] = {}
    for r in tr.records(step=0, kind="module", direction="forward"):
        out.setdefault((r.module, int(r.call)), []).append(r)
    return out


def _tensors(tr: Any, recs: list[Any], role: str) -> list[tuple[str, np.ndarray, str]]:
    return [(r.arg, np.asarray(tr.tensor(r)), r.dtype) for r in recs if r.role == role]


def _outputs_in_order(ref_out: list[tuple[str, np.ndarray, str]],
                      got: list[tuple[str, np.ndarray]]) -> list[np.ndarray]:
    """The replay's outputs in the order of the reference's (by argument path when both name the
    same ones, else by position)."""
    by_arg = dict(got)
    if {a for a, _, _ in ref_out} == set(by_arg):
        return [by_arg[a] for a, _, _ in ref_out]
    return [g for _, g in got]


def _moved(inputs: list[tuple[str, np.ndarray, str]],
           rng: np.random.Generator) -> list[tuple[str, np.ndarray, str]]:
    from netparity.compare.noise import perturb_last_bit

    return [(a, perturb_last_bit(v, rng), d) for a, v, d in inputs]


def replay_forward(r0: CompareResult, ref_trace: str, cand_trace: str, ref_model: Any,
                   cand_model: Any, ref_state0: Any, cand_state0: Any,
                   seed: int = 0) -> list[ReplayOutcome]:
    """Replay the diverging forward calls of step 0 (see the module docstring)."""
    from netparity.ckpt.mapping import state_of
    from netparity.compare.noise import perturb_last_bit
    from netparity.frameworks.models import run_module, set_weights

    calls = plan(r0)
    if not calls:
        return []
    ref_tr, cand_tr = open_trace(ref_trace), open_trace(cand_trace)
    ref_calls, cand_calls = _calls_by_index(ref_tr), _calls_by_index(cand_tr)
    rng = np.random.default_rng(seed + 104729)
    keep_ref, keep_cand = state_of(ref_model), state_of(cand_model)

    def load(model: Any, st: Any) -> None:
        set_weights(model, st, {k: v for k, v in st.dtypes.items() if v == "bfloat16"})

    outcomes: list[ReplayOutcome] = []
    try:
        load(ref_model, ref_state0)
        load(cand_model, cand_state0)
        for c in calls:
            o = ReplayOutcome(c.key, c.module, c.cand_module, c.op, accumulated=c.out_error)
            outcomes.append(o)
            try:
                _replay_one(o, c, ref_calls, cand_calls, ref_tr, ref_model, cand_model,
                            ref_state0, rng, run_module,
                            lambda names: {k: perturb_last_bit(np.asarray(ref_state0[k]), rng)
                                           for k in names},
                            lambda arrays: set_weights(ref_model, arrays))
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


def _replay_one(o: ReplayOutcome, c: Any, ref_calls: dict[tuple[str, int], list[Any]],
                cand_calls: dict[tuple[str, int], list[Any]], ref_tr: Any, ref_model: Any,
                cand_model: Any, ref_state0: Any, rng: np.random.Generator,
                run_module: Callable[..., list[tuple[str, np.ndarray]]],
                moved_weights: Callable[[list[str]], dict[str, np.ndarray]],
                set_ref: Callable[[dict[str, np.ndarray]], Any]) -> None:
    """Replay one call into ``o`` (see :func:`replay_forward`)."""
    call_index = int(c.key.split("|")[-2])
    recs = ref_calls.get((c.module, call_index), [])
    event = c.key.split("|")[-1]
    recs = [r for r in recs if str(r.event) == event] or recs
    if not recs or not all(r.has_payload for r in recs):
        o.verdict, o.reason = "not replayed", "no tensor payload captured for this call"
        return
    ins, outs = _tensors(ref_tr, recs, "input"), _tensors(ref_tr, recs, "output")
    if not ins or not outs:
        o.verdict, o.reason = "not replayed", "the call's inputs or outputs were not captured"
        return
    ref_outs = [v for _, v, _ in outs]
    # 1. the reference reproduces itself, or the call hides something replay cannot rebuild
    own = normwise_error(ref_outs, _outputs_in_order(outs, run_module(ref_model, c.module, ins)))
    if own > SELF_TOLERANCE:
        o.verdict = "not replayed"
        o.reason = (f"the reference's own replay misses its captured output by {own:.3g}: the "
                    "call depends on random numbers, a non-tensor argument or hidden state")
        return
    # 2. local noise: inputs and the module's own weights one ulp off
    prefix = f"{c.module}." if c.module else ""
    names = [k for k in ref_state0 if k.startswith(prefix)
             and ref_state0.dtypes.get(k) != "bfloat16"]
    set_ref(moved_weights(names))
    try:
        noisy = run_module(ref_model, c.module, _moved(ins, rng))
    finally:
        set_ref({k: np.asarray(ref_state0[k]) for k in names})
    noise = max(normwise_error(ref_outs, _outputs_in_order(outs, noisy)), own)
    # 3. the candidate's module on the reference's inputs, in its own dtypes
    cand_dtypes = {r.arg: r.dtype for r in cand_calls.get((c.cand_module, call_index), [])
                   if r.role == "input"}
    cand_in = [(a, v, cand_dtypes.get(a, d)) for a, v, d in ins]
    got = run_module(cand_model, c.cand_module, cand_in)
    local = normwise_error(ref_outs, _outputs_in_order(outs, got))
    cand_out_dtype = next((r.dtype for r in cand_calls.get((c.cand_module, call_index), [])
                           if r.role == "output"), outs[0][2])
    judge(o, local, noise, outs[0][2], cand_out_dtype)
