"""Replay a PyTorch optimizer's steps on given gradients (optimizer replay)."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from netparity.frameworks.base import (
    ATTRS_KEY,
    Moments,
    OptimizerStates,
    plain_attributes,
    restore_attributes,
)


class StepStates(OptimizerStates):
    """The optimizer's state (``state_dict``: moments, step counts, the param groups' learning
    rates as the training code set them) just before each of its ``step()`` calls; the copy
    runs under ``quiet`` so that an op-level capture does not record it as ops of the step."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        super().__init__(optimizer)
        self._handle = optimizer.register_step_pre_hook(self._pre)

    def _copy(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return _whole_state(optimizer, self.quiet)

    def _live(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        out = optimizer.state_dict()  # the optimizer's own tensors: written at once
        out[ATTRS_KEY] = plain_attributes(optimizer)
        return out

    def _pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.states.append(self._take(optimizer))


def _whole_state(optimizer: torch.optim.Optimizer, quiet: Any = None) -> dict[str, Any]:
    """A copy of the optimizer's ``state_dict`` and of its own plain attributes (a
    hand-written optimizer's step counter: :func:`netparity.frameworks.base.plain_attributes`)."""
    with quiet() if quiet is not None else contextlib.nullcontext():
        out = copy.deepcopy(optimizer.state_dict())
        out[ATTRS_KEY] = plain_attributes(optimizer)
    return out


def _load_whole(optimizer: torch.optim.Optimizer, state: dict[str, Any],
                copy_state: bool = True) -> None:
    """Load ``state`` (a copy of it unless ``copy_state`` is False: the optimizer then keeps
    and updates its tensors)."""
    given = {k: v for k, v in state.items() if k != ATTRS_KEY}  # torch ignores the extra key
    optimizer.load_state_dict(copy.deepcopy(given) if copy_state else given)
    restore_attributes(optimizer, state.get(ATTRS_KEY, {}))


def _own_state(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's ``state_dict`` (its tensors themselves, no copies) and plain
    attributes: what :func:`replay_step` puts back after the step it replays (the loaded state
    replaces these tensors in the optimizer, so they stay as they are)."""
    out = dict(optimizer.state_dict())
    out[ATTRS_KEY] = plain_attributes(optimizer)
    return out


def moments(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> Moments:
    """The per-parameter floating-point tensors of ``state`` (momentum buffers, Adam moments;
    not the step counts), as ``"<param index>.<key>"`` -> (float64 values, stored dtype), each
    converted when it is looked up."""
    raw: dict[str, tuple[Any, str]] = {}
    for idx, entries in state.get("state", {}).items():
        for key, t in entries.items():
            if key != "step" and isinstance(t, torch.Tensor) and t.is_floating_point():
                raw[f"{idx}.{key}"] = (t, str(t.dtype).removeprefix("torch."))
    return Moments(raw, lambda t: t.detach().to("cpu", torch.float64).numpy())


#: the name the first-step watcher had (it keeps every step's state now)
FirstStepState = StepStates


def merge_state(optimizer: torch.optim.Optimizer, moments: dict[str, Any],
                settings: dict[str, Any]) -> dict[str, Any]:
    """A state with the per-parameter tensors (momentum buffers, Adam moments and step
    counts) of ``moments`` and the param groups (learning rates, ...) of ``settings``."""
    return {"state": moments["state"], "param_groups": settings["param_groups"],
            ATTRS_KEY: settings.get(ATTRS_KEY, {})}


def load_state(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load ``state`` (the optimizer keeps its tensors)."""
    _load_whole(optimizer, state, copy_state=False)


def replay_step(optimizer: torch.optim.Optimizer, model: torch.nn.Module, state: Any,
                grads: Mapping[str, np.ndarray], keep_state: bool = False,
                owned: bool = False) -> Any:
    """Load ``state`` into ``optimizer``, give the model's parameters ``grads`` (by name;
    others get none) and take one step; the optimizer's own state and the parameters' gradients
    are restored afterwards (the parameters keep the stepped values). Returns the optimizer's
    state after the step when ``keep_state`` (else ``None``). ``owned``: ``state`` is the
    caller's to give away, loaded without a copy."""
    current = _own_state(optimizer)  # no copy: see _own_state
    named = dict(model.named_parameters())
    kept = {n: p.grad for n, p in named.items()}
    # a copy unless owned: loading keeps the given tensors (momentum buffers), which the step
    # updates in place
    _load_whole(optimizer, state, copy_state=not owned)
    after = None
    try:
        for n, p in named.items():
            g = grads.get(n)
            p.grad = (torch.from_numpy(np.array(g, copy=True)).to(p.device, p.dtype)
                      .reshape(p.shape) if g is not None else None)
        optimizer.step()
        if keep_state:  # the loaded copy's tensors, which only ``after`` holds once restored
            after = _own_state(optimizer)
    finally:
        _load_whole(optimizer, current, copy_state=False)
        for n, p in named.items():
            p.grad = kept[n]
    return after
