"""Replay a PyTorch optimizer's first step on given gradients (optimizer replay)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch


class FirstStepState:
    """The optimizer's state (``state_dict``: moments, step counts, the param groups' learning
    rates as the training code set them) just before its first ``step()``."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.state: dict[str, Any] | None = None
        self._handle = optimizer.register_step_pre_hook(self._pre)

    def _pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self.state is None:
            self.state = copy.deepcopy(optimizer.state_dict())

    def close(self) -> None:
        """Remove the hook (never from inside it: the optimizer is iterating its hooks)."""
        self._handle.remove()


def replay_step(optimizer: torch.optim.Optimizer, model: torch.nn.Module, state: Any,
                grads: Mapping[str, np.ndarray]) -> None:
    """Load ``state`` into ``optimizer``, give the model's parameters ``grads`` (by name;
    others get none) and take one step; the optimizer's own state and the parameters' gradients
    are restored afterwards (the parameters keep the stepped values)."""
    current = copy.deepcopy(optimizer.state_dict())
    named = dict(model.named_parameters())
    kept = {n: p.grad for n, p in named.items()}
    optimizer.load_state_dict(state)
    try:
        for n, p in named.items():
            g = grads.get(n)
            p.grad = (torch.from_numpy(np.array(g, copy=True)).to(p.device, p.dtype)
                      .reshape(p.shape) if g is not None else None)
        optimizer.step()
    finally:
        optimizer.load_state_dict(current)
        for n, p in named.items():
            p.grad = kept[n]
