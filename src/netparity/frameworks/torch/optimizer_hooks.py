"""Optimizer hooks of the PyTorch capture: gradients, the update and parameters after it.

Global optimizer step hooks mark the ``update`` direction for the ops inside ``step()``,
record parameter gradients before it and parameters (and updated floating-point buffers such
as BatchNorm statistics) after it. Parameter gradients are also recorded as backward
accumulates them (post-accumulate-grad hooks), before a training loop unscales, clips or zeroes
them: the moment MindSpore's ``Parameter.register_hook`` sees.

Parameters of the model that no optimizer steps are recorded too, so the weight-update check
names them: a frozen one (``requires_grad=False``) by its unchanging value at each step, a
trainable one missing from every optimizer (a head replaced after the optimizer was built) by
its gradient with no value after any update. "Every optimizer" is each one built since
:func:`track_optimizers` (``netparity run`` calls it when torch is imported) or seen stepping.
The learning rate of each parameter group at each step and the optimizers' groups go to
``rank<N>/capture_notes.json`` (:mod:`netparity.capture.notes`).
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Iterable
from typing import Any

import torch

from netparity.frameworks.torch._common import (
    TorchCaptureBase,
    _param_record,
)
from netparity.trace.schema import Record

#: every optimizer built (after :func:`track_optimizers`) or seen stepping in this process
_KNOWN: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()
_TRACKING: list[bool] = []


def note_optimizer(opt: torch.optim.Optimizer) -> None:
    """Count ``opt`` among this process's optimizers."""
    _KNOWN.add(opt)


def track_optimizers() -> None:
    """Note every optimizer built from now on (wraps ``torch.optim.Optimizer.__init__``,
    once): zero-code capture starts at the first model call, usually after the optimizers
    exist."""
    if _TRACKING:
        return
    _TRACKING.append(True)
    cls = torch.optim.Optimizer
    orig = cls.__init__

    @functools.wraps(orig)
    def __init__(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        orig(self, *args, **kwargs)
        _KNOWN.add(self)

    cls.__init__ = __init__  # type: ignore[method-assign]


def _lr(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError, RuntimeError):
        return None
    return f if math.isfinite(f) else None


class OptimizerHooks(TorchCaptureBase):
    """Parameter gradients, optimizer steps and parameters after the update."""

    def _owns(self, opt: torch.optim.Optimizer) -> bool:
        if self.global_mode:
            return True
        if self.optimizer is not None:
            return opt is self.optimizer
        names = self._param_names
        return any(id(p) in names for g in opt.param_groups for p in g["params"])

    def _opt_pre(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._busy or not self._owns(opt):
            return
        self._in_update += 1
        self._note_lr(opt)
        if self._on:
            self._record_params(opt, grads=True, params=False)
            if self.world_size > 1:
                self._record_params(opt, grads=False, params=False, synced=True)

    def _opt_post(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._busy or not self._owns(opt):
            return
        self._in_update = max(0, self._in_update - 1)
        self._phase.optimizer_stepped()
        if self._on:
            self._record_params(opt, grads=False, params=True)
            self._params_done = self.step_no
        self._update_no += 1
        if self.auto_step and not self._scaler_seen:  # (with a scaler: at its update())
            self.step()

    def _note_lr(self, opt: torch.optim.Optimizer) -> None:
        """The learning rate of each of ``opt``'s parameter groups at this step."""
        _KNOWN.add(opt)
        i = next((j for j, ref in enumerate(self._opts) if ref() is opt), len(self._opts))
        if i == len(self._opts):
            self._opts.append(weakref.ref(opt))
        if self.active:
            self._lr_log.append((self.step_no, i, [_lr(g.get("lr")) for g in opt.param_groups]))

    def _outside(self, opt: torch.optim.Optimizer) -> list[tuple[torch.Tensor, bool]]:
        """The model's parameters ``opt`` does not hold that no other optimizer steps either:
        ``(parameter, frozen)``."""
        mine = {id(p) for g in opt.param_groups for p in g["params"]}
        stepped = {id(p) for o in list(_KNOWN) if o is not opt
                   for g in o.param_groups for p in g["params"]}
        out: list[tuple[torch.Tensor, bool]] = []
        seen: set[int] = set()
        for tree in self._trees:
            for prm in tree.parameters():
                k = id(prm)
                if k in mine or k in stepped or k in seen:
                    continue
                seen.add(k)
                out.append((prm, not prm.requires_grad))
        return out

    def _write_optimizer_notes(self) -> None:
        """``optimizers`` of ``capture_notes.json`` (:mod:`netparity.capture.notes`)."""
        if self.writer is None or not (self._opts or self._lr_log):
            return
        from netparity.capture.notes import write_notes

        names = self._param_names
        opts = []
        for ref in self._opts:
            o = ref()
            groups = [] if o is None else [
                {"params": len(g["params"]),
                 "frozen": sum(not p.requires_grad for p in g["params"])}
                for g in o.param_groups]
            opts.append({"class": "?" if o is None else type(o).__name__, "groups": groups})
        frozen: list[str] = []
        missing: list[str] = []
        for tree in self._trees:
            for prm in tree.parameters():
                name = names.get(id(prm))
                if name is None or any(prm is p for o in list(_KNOWN)
                                       for g in o.param_groups for p in g["params"]):
                    continue
                (missing if prm.requires_grad else frozen).append(name)
        write_notes(self.writer.rank_dir, {"optimizers": {
            "optimizers": opts, "lr": [list(x) for x in self._lr_log],
            "frozen": sorted(set(frozen)), "not_in_optimizer": sorted(set(missing))}})

    def _acc_grad(self, name: str, prm: torch.Tensor) -> None:
        if not self._on or self._busy or prm.grad is None:
            return
        pol = self.policy
        if not (pol.wants_direction("backward") and pol.wants_name(name, name.rpartition(".")[0])):
            return
        n = self._grads_seen.get(name, 0)
        self._grads_seen[name] = n + 1

        def make(a: str) -> Record:
            r = _param_record("grad", name, "backward", a)
            r.call = n  # gradient accumulation: one record per backward
            return r

        self._emit_all(make, [("", prm.grad)])

    def record_grads(self, grads: Iterable[Any], params: Iterable[Any]) -> int:
        """Record parameter gradients by hand: gradients that never reach ``.grad``
        (``torch.autograd.grad(loss, params)``, ``torch.func.grad``), as MindSpore's
        ``cap.record_grads(grads, params)`` takes them from ``value_and_grad``.

        Parameters are named by identity from the model (``named_parameters``); nothing is
        read from or set on the parameter objects themselves. A parameter already recorded in
        this step (by backward's hook, or an earlier call) is not recorded twice; ``None``
        gradients and parameters of other models are skipped. Returns the number recorded.

        Example:
            >>> # grads = torch.autograd.grad(loss, params); cap.record_grads(grads, params)
        """
        pol = self.policy
        if not self._on or not pol.wants_direction("backward"):
            return 0
        items: list[tuple[str, torch.Tensor]] = []
        for g, prm in zip(grads, params):
            name = self._param_names.get(id(prm))
            if (g is None or name is None or name in self._grads_seen
                    or not pol.wants_name(name, name.rpartition(".")[0])):
                continue
            self._grads_seen[name] = 1
            items.append((name, g))
        for name, g in items:
            self._emit_all(functools.partial(_param_record, "grad", name, "backward"), [("", g)])
        return len(items)

    def _record_params(self, opt: torch.optim.Optimizer | None, *, grads: bool,
                       params: bool, synced: bool = False) -> None:
        """Record gradients (as backward left them, unless already recorded) and/or
        parameters; ``synced``: every gradient as the optimizer is about to use it, after a
        data-parallel all-reduce (``kind="custom"``, ``op="grad_synced"``, direction
        ``update``), for the cross-rank check."""
        # (parameter, its gradient wanted, its value wanted)
        plist: list[tuple[torch.Tensor, bool, bool]] = []
        if opt is not None:
            plist = [(p, True, True) for g in opt.param_groups for p in g["params"]]
            if not synced and self._params_done != self.step_no:
                # the model's parameters no optimizer steps: a frozen one's value, a trainable
                # one's gradient only (its value after no update would claim it was stepped)
                plist += [(p, not frozen, frozen) for p, frozen in self._outside(opt)]
        elif self.model is not None:
            plist = [(p, True, True) for p in self.model.parameters()]
        names = self._param_names
        pol = self.policy
        items_g: list[tuple[str, torch.Tensor]] = []
        items_p: list[tuple[str, torch.Tensor]] = []
        for prm, want_g, want_p in plist:
            name = names.get(id(prm))
            # a parameter passes when its name or its module's path does ("conv" -> conv.weight)
            if name is None or not pol.wants_name(name, name.rpartition(".")[0]):
                continue
            if (grads and want_g and prm.grad is not None and pol.wants_direction("backward")
                    and name not in self._grads_seen):
                items_g.append((name, prm.grad))
                self._grads_seen[name] = 1
            if params and want_p:
                items_p.append((name, prm))
            if synced and prm.grad is not None:
                items_g.append((name, prm.grad))
        if params and self.model is not None:
            # Buffers that training updates (BatchNorm running statistics) belong to the state
            # after the step; MindSpore keeps them as parameters (moving_mean/variance).
            for name, buf in self.model.named_buffers():
                if name.endswith("num_batches_tracked") or not buf.is_floating_point():
                    continue
                if pol.wants_name(name, name.rpartition(".")[0]):
                    items_p.append((name, buf))
        recs = ([Record(kind="custom", op="grad_synced", module=name, direction="update",
                        role="grad") for name, _ in items_g] if synced else
                [_param_record("grad", name, "backward", "") for name, _ in items_g])
        recs += [_param_record("param", name, "update", "") for name, _ in items_p]
        tensors = [g for _, g in items_g] + [t for _, t in items_p]
        if self.writer is None or not tensors:
            return
        busy = self._busy
        self._busy = True
        try:
            with torch._C._DisableTorchDispatch():
                if pol.tensors or pol.hashes:
                    for rec, t in zip(recs, tensors):
                        self._emit_t(rec, t)
                    return
                # statistics only: the whole model's parameters (hundreds of mostly small
                # tensors) in one kernel call, not one call (and one Python round trip) each
                handles = self.adapter_t.stats_handles(tensors)
                for rec, t, h in zip(recs, tensors, handles):
                    self._queue(rec, t, h)
        finally:
            self._busy = busy
