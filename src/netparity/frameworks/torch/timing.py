"""Light timing of a PyTorch training run (``netparity.profile``): the hooks of
:class:`~netparity.capture.timing.StepTimer` for ``nn.Module`` and ``torch.optim``.

* every module: ``register_forward_pre_hook`` / ``register_forward_hook`` (the root's give the
  forward phase, the others the per-module times);
* every trainable parameter: ``register_post_accumulate_grad_hook`` (the last one ends the
  backward phase);
* the optimizer: ``register_step_pre_hook`` / ``register_step_post_hook`` (its end ends the step).

Example:
    >>> import tempfile, torch
    >>> from netparity.frameworks.torch.timing import profile
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> with profile(model, tempfile.mkdtemp(), optimizer=opt) as prof:
    ...     for _ in range(3):
    ...         model(torch.ones(2, 4)).sum().backward(); opt.step(); opt.zero_grad()
    >>> prof.steps
    3
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from netparity.capture.timing import StepTimer
from netparity.errors import UsageError

__all__ = ["TorchTiming", "profile"]


class TorchTiming(StepTimer):
    """Step timing of a ``torch.nn.Module`` (and its optimizer); see :func:`profile`."""

    def __init__(self, model: Any, path: str | os.PathLike[str], *, optimizer: Any = None,
                 loader: Iterable[Any] | None = None, modules: bool = True,
                 overwrite: bool = False, manifest: dict[str, Any] | None = None,
                 global_optimizer: bool = False):
        import torch

        if not isinstance(model, torch.nn.Module):
            raise UsageError(f"profile needs a torch.nn.Module, got {type(model).__name__}")
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise UsageError(f"optimizer must be a torch.optim.Optimizer, got "
                             f"{type(optimizer).__name__}")
        self.model = model
        self.optimizer = optimizer
        # without an optimizer object (``netparity run --profile``): every optimizer's step
        self._global_optimizer = global_optimizer and optimizer is None
        facts = {"framework": "torch", "framework_version": torch.__version__,
                 "device": _device_of(model),
                 # (name, shape) in creation order: the side by side pairs modules by the
                 # parameters they own (netparity.align.ownership), across frameworks too
                 "params": [[n, list(p.shape)] for n, p in model.named_parameters()],
                 **(manifest or {})}
        super().__init__(path, facts, loader=loader, modules=modules, overwrite=overwrite)

    def _register(self) -> list[Any]:
        root = self.model
        h: list[Any] = []
        mods = root.named_modules() if self._modules else [("", root)]
        for name, mod in mods:
            h.append(mod.register_forward_pre_hook(self._pre_hook(name, type(mod).__name__)))
            h.append(mod.register_forward_hook(self._post_hook(name)))
        for p in root.parameters():
            if p.requires_grad:
                h.append(p.register_post_accumulate_grad_hook(self._grad_hook))
        if self.optimizer is not None:
            h.append(self.optimizer.register_step_pre_hook(self._opt_pre))
            h.append(self.optimizer.register_step_post_hook(self._opt_post))
        elif self._global_optimizer:
            from torch.optim.optimizer import (
                register_optimizer_step_post_hook,
                register_optimizer_step_pre_hook,
            )

            h.append(register_optimizer_step_pre_hook(self._opt_pre))
            h.append(register_optimizer_step_post_hook(self._opt_post))
        return h


def _device_of(model: Any) -> str:
    for p in model.parameters():
        return str(p.device)
    return "cpu"


def profile(model: Any, path: str | os.PathLike[str], *, optimizer: Any = None,
            loader: Iterable[Any] | None = None, modules: bool = True, overwrite: bool = False,
            manifest: dict[str, Any] | None = None) -> TorchTiming:
    """Time each training step of ``model`` into the trace directory ``path`` (light mode).

    ``optimizer``: its ``step()`` ends each step (else call ``prof.step()``); ``loader``: its
    ``next()`` waits are the data phase (the loader keeps working unchanged; restored on close).
    Read the result with ``netparity perf PATH`` or :func:`netparity.analyzers.perf.analyze`.

    Example:
        >>> import tempfile, torch
        >>> m = torch.nn.Linear(2, 2)
        >>> with profile(m, tempfile.mkdtemp()) as prof:
        ...     _ = m(torch.ones(1, 2)); prof.step()
        >>> prof.steps
        1
    """
    return TorchTiming(model, path, optimizer=optimizer, loader=loader, modules=modules,
                       overwrite=overwrite, manifest=manifest).install()
