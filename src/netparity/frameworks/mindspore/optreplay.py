"""Replay a MindSpore optimizer's steps on given gradients (optimizer replay)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mindspore as ms
import numpy as np

from netparity.frameworks.base import (
    ATTRS_KEY,
    Moments,
    OptimizerStates,
    plain_attributes,
    restore_attributes,
)


def _own(optimizer: Any) -> dict[str, Any]:
    """The optimizer's own state parameters (moments, step counter, learning rate), not the
    network's parameters it updates. ``mindspore.experimental.optim`` keeps each group's
    learning rate in ``optimizer.lrs``, outside the Cell's parameters: a replay that left it
    out ran every step at the learning rate a scheduler had reached by the end of the run."""
    net = {id(p) for p in optimizer.parameters}
    own = {n: p for n, p in optimizer.parameters_and_names() if id(p) not in net}
    for p in getattr(optimizer, "lrs", None) or ():
        if isinstance(p, ms.Parameter) and id(p) not in net:
            own.setdefault(p.name, p)
    return own


def _values(params: dict[str, Any]) -> dict[str, np.ndarray]:
    return {n: np.array(p.asnumpy(), copy=True) for n, p in params.items()
            if p.dtype != ms.bfloat16}


def _load(params: dict[str, Any], values: Mapping[str, Any]) -> None:
    for n, v in values.items():
        if n == ATTRS_KEY:
            continue
        p = params[n]
        ms.ops.assign(p, ms.Tensor(v).astype(p.dtype))


def _whole(optimizer: Any, own: dict[str, Any]) -> dict[str, Any]:
    """The optimizer's own parameters' values and its plain attributes (a hand-written
    optimizer Cell's step counter kept as a Python int, not a Parameter)."""
    out: dict[str, Any] = dict(_values(own))
    out[ATTRS_KEY] = plain_attributes(optimizer)
    return out


def _load_whole(optimizer: Any, own: dict[str, Any], state: Mapping[str, Any]) -> None:
    _load(own, state)
    restore_attributes(optimizer, state.get(ATTRS_KEY, {}))


class StepStates(OptimizerStates):
    """The optimizer's own state just before each of its calls (a forward pre-hook on the
    optimizer Cell). ``quiet`` is accepted for the same protocol as PyTorch's (reading
    MindSpore parameters to the host runs no captured operator)."""

    def __init__(self, optimizer: Any) -> None:
        super().__init__(optimizer)
        self._handle = optimizer.register_forward_pre_hook(self._pre)

    def _copy(self, optimizer: Any) -> dict[str, Any]:
        return _whole(optimizer, _own(optimizer))

    def _pre(self, cell: Any, args: Any) -> None:
        self.states.append(self._take(cell))


def _per_param(optimizer: Any, state: Mapping[str, Any]) -> list[str]:
    """The entries of ``state`` that are a parameter's own (``moments.<param>``,
    ``adam_m.<param>``: a prefix and the name of a parameter the optimizer updates)."""
    params = {p.name for p in optimizer.parameters}
    return [n for n in state if "." in n and n.split(".", 1)[1] in params]


def moments(optimizer: Any, state: dict[str, np.ndarray]) -> Moments:
    """The per-parameter floating-point entries of ``state`` (momentum buffers, Adam moments),
    by their names, as (float64 values, stored dtype), each converted when it is looked up."""
    raw: dict[str, tuple[Any, str]] = {}
    for n in _per_param(optimizer, state):
        v = np.asarray(state[n])
        if np.issubdtype(v.dtype, np.floating):
            raw[n] = (v, str(v.dtype))
    return Moments(raw, lambda v: np.asarray(v, np.float64))


#: the name the first-step watcher had (it keeps every step's state now)
FirstStepState = StepStates


def merge_state(optimizer: Any, moments: dict[str, np.ndarray],
                settings: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A state with the per-parameter entries of ``moments`` (``moments.<param>``,
    ``moment1.<param>``...: a prefix and the name of a parameter the optimizer updates) and
    everything else (learning rate, step counter, beta powers) of ``settings``."""
    out = dict(settings)
    out.update({n: moments[n] for n in _per_param(optimizer, moments)})
    return out


def load_state(optimizer: Any, state: Mapping[str, Any]) -> None:
    """Assign ``state``'s values to the optimizer's own parameters."""
    _load_whole(optimizer, _own(optimizer), state)


def replay_step(optimizer: Any, model: Any, state: Any, grads: Mapping[str, np.ndarray],
                keep_state: bool = False, owned: bool = False) -> Any:
    """Load ``state`` into the optimizer, call it with ``grads`` (by the model's parameter
    names, in the optimizer's order; zeros for a missing one) and restore its own state.
    Returns the optimizer's own state after the call when ``keep_state`` (else ``None``).
    (``owned`` changes nothing: loading assigns copies of ``state``'s values.)"""
    own = _own(optimizer)
    current = _whole(optimizer, own)
    names = {id(p): n for n, p in model.parameters_and_names()}
    _load_whole(optimizer, own, state)
    after = None
    try:
        gs = []
        for p in optimizer.parameters:
            g = grads.get(names.get(id(p), ""))
            a = (np.array(g, copy=True).reshape(p.shape) if g is not None
                 else np.zeros(p.shape, np.float32))
            gs.append(ms.Tensor(a).astype(p.dtype))
        # mutable: constant tensors in a tuple make a graph-compiled optimizer warn and recompile
        optimizer(ms.mutable(tuple(gs)))
        if keep_state:
            after = _whole(optimizer, own)
    finally:
        _load_whole(optimizer, own, current)
    return after
