"""Replay a PyTorch optimizer's steps on given gradients (optimizer replay)."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch


class StepStates:
    """The optimizer's state (``state_dict``: moments, step counts, the param groups' learning
    rates as the training code set them) just before each of its ``step()`` calls.

    ``quiet`` (a context-manager factory, e.g. a capture's ``paused``) wraps the copy so that
    an op-level capture does not record it as ops of the step."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.states: list[dict[str, Any]] = []
        self.quiet: Callable[[], Any] | None = None
        self._handle = optimizer.register_step_pre_hook(self._pre)

    @property
    def state(self) -> dict[str, Any] | None:
        """The state before the first step (``None`` until it ran)."""
        return self.states[0] if self.states else None

    def _pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        with self.quiet() if self.quiet is not None else contextlib.nullcontext():
            self.states.append(copy.deepcopy(optimizer.state_dict()))

    def close(self) -> None:
        """Remove the hook (never from inside it: the optimizer is iterating its hooks)."""
        self._handle.remove()


#: the name the first-step watcher had (it keeps every step's state now)
FirstStepState = StepStates


def merge_state(optimizer: torch.optim.Optimizer, moments: dict[str, Any],
                settings: dict[str, Any]) -> dict[str, Any]:
    """A state with the per-parameter tensors (momentum buffers, Adam moments and step
    counts) of ``moments`` and the param groups (learning rates, ...) of ``settings``."""
    return {"state": moments["state"], "param_groups": settings["param_groups"]}


def replay_step(optimizer: torch.optim.Optimizer, model: torch.nn.Module, state: Any,
                grads: Mapping[str, np.ndarray], keep_state: bool = False) -> Any:
    """Load ``state`` into ``optimizer``, give the model's parameters ``grads`` (by name;
    others get none) and take one step; the optimizer's own state and the parameters' gradients
    are restored afterwards (the parameters keep the stepped values). Returns the optimizer's
    state after the step when ``keep_state`` (else ``None``)."""
    current = copy.deepcopy(optimizer.state_dict())
    named = dict(model.named_parameters())
    kept = {n: p.grad for n, p in named.items()}
    # a copy: loading keeps the given tensors (momentum buffers), which the step updates in place
    optimizer.load_state_dict(copy.deepcopy(state))
    after = None
    try:
        for n, p in named.items():
            g = grads.get(n)
            p.grad = (torch.from_numpy(np.array(g, copy=True)).to(p.device, p.dtype)
                      .reshape(p.shape) if g is not None else None)
        optimizer.step()
        if keep_state:
            after = copy.deepcopy(optimizer.state_dict())
    finally:
        optimizer.load_state_dict(current)
        for n, p in named.items():
            p.grad = kept[n]
    return after
