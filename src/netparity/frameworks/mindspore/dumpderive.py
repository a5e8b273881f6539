"""What a MindSpore graph dump holds besides kernels, recovered at import (issue 30): the
records and ``capture_notes.json`` sections the PyNative zero-code capture writes, so that
``netparity numerics`` of a GRAPH_MODE run answers as it does for PyNative.

* **The optimizer's parameter list**: each update kernel under the optimizer scope
  (``Default/optimizer-SGD/SGD-op0``) writes its parameter in place; its ``output.0`` equals the
  dumped value of exactly one ``Parameter`` at the same iteration (the dump writes parameters
  after the step): that parameter is the optimizer's. The other kernel inputs that equal a
  dumped ``Parameter`` (``accum_*``, ``moment1_*``, the learning rate, ...) are optimizer state,
  not model parameters (``kind="custom"``, op ``optimizer_state``); ``inputsN`` are the batch
  (``kind="data"``).
* **Gradients by parameter name** and **the learning rate per step**: the update kernel's
  gradient and learning-rate inputs (:data:`UPDATE_KERNELS`: their positions per kernel type).
* **The loss per step**: the last output, in execution order, of a kernel of the loss Cell (a
  scope component ``attr-...Loss``, as ``WithLossCell`` names it), when it holds one value.
* **Frozen / left out**: a model parameter no update kernel writes is ``not_in_optimizer``
  when the optimizer updates a namesake (``4_weight`` for ``network__backbone_4_weight``: a
  layer replaced after the optimizer was built), ``frozen`` otherwise -- the dump cannot show
  ``requires_grad``, so a trainable parameter simply left out of the optimizer is judged frozen
  (:data:`FROZEN_UNSURE`, listed by ``netparity numerics`` as not seen). The namesake the
  optimizer updates is the replaced layer's own parameter, not the model's: recorded as
  optimizer state, its gradients left out.

Example:
    >>> UPDATE_KERNELS["SGD"]
    (1, 2)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: update kernel type -> (gradient input, learning-rate input)
UPDATE_KERNELS = {"SGD": (1, 2), "ApplyMomentum": (3, 2), "Adam": (9, 5),
                  "AdamWeightDecay": (8, 3), "ApplyGradientDescent": (2, 1)}
#: optimizer hyper-parameters and counters dumped as Parameters
_STATE = re.compile(r"^(optimizer_)?(global_step|learning_rate|momentum|beta[12]_power)$")
_DATA = re.compile(r"^inputs\d+$")
#: what the dump cannot tell about a parameter in no optimizer
FROZEN_UNSURE = ("whether a parameter in no optimizer is frozen (requires_grad=False) or "
                 "left out (the dump shows no requires_grad: judged frozen unless the "
                 "optimizer updates a namesake)")


@dataclass
class Derived:
    """What one rank's dump holds besides its kernels (module docstring)."""

    #: dump parameter name -> record kind ("param", "custom" for optimizer state, "data")
    kinds: dict[str, str] = field(default_factory=dict)
    #: step -> [(parameter name, gradient file)]
    grads: dict[int, list[tuple[str, Any]]] = field(default_factory=dict)
    #: step -> the loss output file
    loss: dict[int, Any] = field(default_factory=dict)
    #: the ``optimizers`` section of capture_notes.json (empty: no update kernel seen)
    notes: dict[str, Any] = field(default_factory=dict)
    #: kernels of the update that no optimizer scope names (the step counter's ``AssignAdd``)
    update_scopes: set[str] = field(default_factory=set)


def _loss_scope(full: str) -> bool:
    parts = full.split("/")
    return parts[0] != "Gradients" and any(
        "-" in c and c.split("-", 1)[1].endswith("Loss") for c in parts[:-1])


def derive(entries: Iterable[tuple[int, str, Any]],
           load: Callable[[Any], np.ndarray]) -> Derived:
    """Derive from ``entries`` (``(step, full scope, DumpFile)`` in execution order, Parameter
    files included) with ``load(DumpFile) -> array``."""
    params: dict[int, dict[str, Any]] = {}  # step -> name -> file
    updates: dict[tuple[int, str], dict[tuple[str, int], Any]] = {}  # (step, scope) -> files
    kinds: dict[str, str] = {}  # update kernel scope -> type
    loss: dict[int, Any] = {}
    counters: list[tuple[int, str, Any]] = []  # AssignAdd outputs: the step counter's?
    for step, full, df in entries:
        if df.op_type == "Parameter":
            params.setdefault(step, {})[df.op_name] = df
        elif df.op_type in UPDATE_KERNELS:
            updates.setdefault((step, full), {})[(df.io, df.index)] = df
            kinds[full] = df.op_type
        elif df.io == "output" and df.index == 0 and _loss_scope(full):
            loss[step] = df
        if df.op_type == "AssignAdd" and (df.io, df.index) == ("output", 0):
            counters.append((step, full, df))
    out = Derived(loss={s: f for s, f in loss.items() if int(np.prod(_shape(load, f))) == 1})
    owner: dict[str, set[str]] = {}  # update kernel scope -> parameter names its output equals
    state: set[str] = set()
    cache: dict[int, dict[str, np.ndarray]] = {}  # one step's parameters at a time
    for (step, full), files in sorted(updates.items()):
        if step not in cache:
            cache = {step: {n: load(f) for n, f in params.get(step, {}).items()}}
        pv = cache[step]
        g_at, lr_at = UPDATE_KERNELS[kinds[full]]
        for (io, idx), f in files.items():
            arr = load(f)
            same = {n for n, v in pv.items() if v.shape == arr.shape and np.array_equal(v, arr)}
            if (io, idx) == ("output", 0):
                cands = owner.get(full)
                owner[full] = same if cands is None else (cands & same or cands)
            elif io == "input" and idx not in (0, g_at):
                state |= same
    name_of = {full: next(iter(c)) for full, c in owner.items() if len(c) == 1}
    lr_log: list[list[Any]] = []
    for (step, full), files in sorted(updates.items()):
        g_at, lr_at = UPDATE_KERNELS[kinds[full]]
        if full in name_of and ("input", g_at) in files:
            out.grads.setdefault(step, []).append((name_of[full], files[("input", g_at)]))
        lr_f = files.get(("input", lr_at))
        if lr_f is not None:
            lr = load(lr_f).reshape(-1)
            if lr.size == 1 and np.isfinite(lr[0]):
                val = float(str(lr[0])) if isinstance(lr[0], np.float32) else float(lr[0])
                if not lr_log or lr_log[-1][0] != step:
                    lr_log.append([step, 0, []])
                if val not in lr_log[-1][2]:
                    lr_log[-1][2].append(val)
    for step, full, df in counters:  # the optimizer's global_step += 1
        steps = [f for n, f in params.get(step, {}).items() if n.endswith("global_step")]
        if any(np.array_equal(load(f), load(df)) for f in steps):
            out.update_scopes.add(full)
    names = {n for ps in params.values() for n in ps}
    for n in names:
        out.kinds[n] = ("data" if _DATA.match(n) else "custom"
                        if n in state or _STATE.match(n) else "param")
    if not name_of:
        return out
    updated = set(name_of.values())
    model = sorted(n for n, k in out.kinds.items() if k == "param" and n not in updated)
    stale = [n for n in model if any(n.endswith("_" + u) for u in updated)]
    for u in updated:  # the replaced layer's own parameter: the optimizer's, not the model's
        if any(n.endswith("_" + u) for n in stale):
            out.kinds[u] = "custom"
            for gs in out.grads.values():
                gs[:] = [g for g in gs if g[0] != u]
    cls = sorted({_optimizer_class(full, kinds[full]) for full in name_of})
    out.notes = {"optimizers": [{"class": cls[0] if len(cls) == 1 else "/".join(cls),
                                 "groups": [{"params": len(updated), "frozen": 0}]}],
                 "lr": lr_log, "frozen": [n for n in model if n not in stale],
                 "not_in_optimizer": stale, "source": "mindspore-dump"}
    return out


def _optimizer_class(full: str, kernel: str) -> str:
    """``Default/optimizer-SGD/SGD-op0`` -> ``SGD``; the kernel type without that scope."""
    for comp in full.split("/")[:-1]:
        if comp.startswith("optimizer-"):
            return comp.split("-", 1)[1]
    return kernel


def _shape(load: Callable[[Any], np.ndarray], f: Any) -> tuple[int, ...]:
    return tuple(load(f).shape)
