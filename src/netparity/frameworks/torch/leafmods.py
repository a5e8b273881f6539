"""Leaf ``torch.nn`` modules rebuilt from what a capture recorded of them (class name, plain
attributes, training flag) and run in float64: the PyTorch half of plain ``compare``'s
calibration by replay (:mod:`netparity.compare.leafreplay`). A class named by a trace is looked
up among ``torch.nn``'s built-in modules, never imported."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

_RANDOM = ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout",
           "FeatureAlphaDropout", "RReLU")


def module_class(name: Any) -> Any:
    """The ``torch.nn`` built-in class named ``name`` (looked up, never imported), else None."""
    if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
        return None
    cls = vars(torch.nn.modules).get(name)
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)
            and (cls.__module__ or "").startswith("torch.nn.modules.")
            and cls is not torch.nn.Module):
        return None
    return cls


def build_leaf(meta: dict[str, Any], params: dict[str, np.ndarray]) -> Any:
    """The leaf module of ``meta`` in float64 with ``params``, or None when it cannot be."""
    cls = module_class(meta.get("class"))
    attrs, training = meta.get("attrs"), meta.get("training")
    if cls is None or not isinstance(attrs, dict) or not isinstance(training, bool):
        return None
    if cls.__name__ in _RANDOM and training and attrs.get("p", 1.0) != 0.0:
        return None
    mod = cls.__new__(cls)
    torch.nn.Module.__init__(mod)
    for k, v in attrs.items():
        if not isinstance(k, str) or not k.isidentifier() or k.startswith("_"):
            return None
        setattr(mod, k, tuple(v) if isinstance(v, list) else v)
    for n, v in params.items():
        mod.register_parameter(n, torch.nn.Parameter(torch.from_numpy(np.array(v, np.float64)),
                                                     requires_grad=False))
    if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
        if not training:
            return None  # eval mode normalises by running statistics the trace does not hold
        c = int(attrs.get("num_features", 0))
        mod.register_buffer("running_mean", torch.zeros(c, dtype=torch.float64))
        mod.register_buffer("running_var", torch.ones(c, dtype=torch.float64))
        mod.register_buffer("num_batches_tracked", torch.tensor(0))
    mod.train(training)
    return mod


def run_leaf(mod: Any, ins: list[np.ndarray]) -> np.ndarray | None:
    with torch.no_grad():
        out = mod(*[torch.from_numpy(np.asarray(x, np.float64).copy()) for x in ins])
    return out.numpy() if isinstance(out, torch.Tensor) else None


def vjp_leaf(mod: Any, ins: list[np.ndarray], grad_out: np.ndarray,
             wanted: list[int]) -> tuple[list[np.ndarray], dict[str, np.ndarray]] | None:
    """The backward of ``mod`` (from :func:`build_leaf`) in float64: its forward on ``ins``,
    then the vector-Jacobian product with ``grad_out``; returns the gradients w.r.t. the
    inputs numbered in ``wanted`` and w.r.t. its own parameters (by name), or None when the
    output is not one tensor of ``grad_out``'s size."""
    xs = [torch.from_numpy(np.asarray(x, np.float64).copy()) for x in ins]
    for i in wanted:
        xs[i].requires_grad_(True)
    params = dict(mod.named_parameters(recurse=False))
    for p in params.values():
        p.requires_grad_(True)
    with torch.enable_grad():
        # (a clone per input: an in-place leaf may not overwrite a tensor autograd differentiates)
        out = mod(*[x.clone() if x.requires_grad else x for x in xs])
    g = np.asarray(grad_out, np.float64)
    if not isinstance(out, torch.Tensor) or out.numel() != g.size:
        return None
    targets = [xs[i] for i in wanted] + list(params.values())
    if not targets:
        return None
    got = torch.autograd.grad(out, targets, torch.from_numpy(g.copy()).reshape(out.shape),
                              allow_unused=True)
    arrays = [np.zeros(tuple(t.shape)) if d is None else d.detach().numpy()
              for t, d in zip(targets, got)]
    return arrays[:len(wanted)], dict(zip(params, arrays[len(wanted):]))
