"""Replay a MindSpore optimizer's first step on given gradients (optimizer replay)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mindspore as ms
import numpy as np


def _own(optimizer: Any) -> dict[str, Any]:
    """The optimizer's own state parameters (moments, step counter, learning rate), not the
    network's parameters it updates."""
    net = {id(p) for p in optimizer.parameters}
    return {n: p for n, p in optimizer.parameters_and_names() if id(p) not in net}


def _values(params: dict[str, Any]) -> dict[str, np.ndarray]:
    return {n: np.array(p.asnumpy(), copy=True) for n, p in params.items()
            if p.dtype != ms.bfloat16}


def _load(params: dict[str, Any], values: Mapping[str, np.ndarray]) -> None:
    for n, v in values.items():
        p = params[n]
        ms.ops.assign(p, ms.Tensor(v).astype(p.dtype))


class FirstStepState:
    """The optimizer's own state just before its first call (a forward pre-hook on the
    optimizer Cell)."""

    def __init__(self, optimizer: Any) -> None:
        self.state: dict[str, np.ndarray] | None = None
        self._handle = optimizer.register_forward_pre_hook(self._pre)

    def _pre(self, cell: Any, args: Any) -> None:
        if self.state is None:
            self.state = _values(_own(cell))

    def close(self) -> None:
        """Remove the hook (never from inside it: the Cell is iterating its hooks)."""
        self._handle.remove()


def replay_step(optimizer: Any, model: Any, state: Any, grads: Mapping[str, np.ndarray]) -> None:
    """Load ``state`` into the optimizer, call it with ``grads`` (by the model's parameter
    names, in the optimizer's order; zeros for a missing one) and restore its own state."""
    own = _own(optimizer)
    current = _values(own)
    names = {id(p): n for n, p in model.parameters_and_names()}
    _load(own, state)
    try:
        gs = []
        for p in optimizer.parameters:
            g = grads.get(names.get(id(p), ""))
            a = (np.array(g, copy=True).reshape(p.shape) if g is not None
                 else np.zeros(p.shape, np.float32))
            gs.append(ms.Tensor(a).astype(p.dtype))
        optimizer(tuple(gs))
    finally:
        _load(own, current)
