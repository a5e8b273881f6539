"""What the MindSpore capture learns from the optimizers (``nn.Optimizer``): the learning rate of
each parameter group at each step and the model's parameters no optimizer updates, for the
``optimizers`` section of ``capture_notes.json`` (:mod:`netparity.capture.notes`), as the
PyTorch capture writes it.

* **Learning rate**: read as the optimizer is called, before its update, at its own
  ``global_step`` (the number of updates done): a fixed rate (a ``Parameter``), a dynamic one
  (a list / 1-D Tensor: the entry at ``global_step``, as ``Gather`` picks it) or a
  ``LearningRateSchedule`` (its ``construct`` evaluated at ``global_step``, outside
  ``Cell.__call__``). Group learning rates (``{"params": ..., "lr": ...}``) give one rate per
  group. ``get_lr()`` is not called: it goes through the schedule Cells' ``__call__``, which
  the capture and zero-code ``netparity run`` observe.
* **Frozen / left out**: parameters of the model in no known optimizer's ``parameters``
  (by identity: a head replaced after the optimizer was built keeps its name but is a new
  ``Parameter``), ``requires_grad`` False (frozen) or True (left out).

Example:
    >>> import mindspore as ms
    >>> net = ms.nn.Dense(2, 1)
    >>> opt = ms.nn.SGD(net.trainable_params(), learning_rate=[0.1, 0.2])
    >>> group_lrs(opt)
    [0.1]
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

__all__ = ["group_lrs", "optimizer_section"]


def _first(v: Any) -> float | None:
    try:
        arr = v.asnumpy() if hasattr(v, "asnumpy") else v
        import numpy as np

        one = np.asarray(arr).reshape(-1)[0]
        # a float32 rate as written (0.1, not 0.10000000149011612)
        f = float(str(one)) if isinstance(one, np.float32) else float(one)
    except (TypeError, ValueError, IndexError, RuntimeError):
        return None
    return f if math.isfinite(f) else None


def _lr_at(lr: Any, step: int) -> float | None:
    """One learning rate (a Parameter, or a schedule Cell) at optimizer step ``step``."""
    import mindspore as ms
    import numpy as np

    inner = getattr(lr, "learning_rate", None)  # MindSpore's wrappers of a list / a scalar
    if type(lr).__name__ in ("_IteratorLearningRate", "_ConvertToCell") and inner is not None:
        arr = np.asarray(inner.asnumpy()).reshape(-1)
        return _first(arr[min(step, arr.size - 1)]) if arr.size else None
    if isinstance(lr, ms.Tensor):  # a fixed rate (Parameter)
        return _first(lr)
    construct = getattr(lr, "construct", None)
    if construct is None:
        return None
    try:
        return _first(construct(ms.Tensor(np.array([step], np.int32))))
    except Exception:  # noqa: BLE001 - a schedule that cannot run eagerly: rate unknown
        return None


def group_lrs(opt: Any) -> list[float | None]:
    """The learning rate of each of ``opt``'s parameter groups for its next update."""
    step = int(_first(opt.global_step) or 0)
    lr = opt.learning_rate
    if not getattr(opt, "is_group_lr", False):
        return [_lr_at(lr, step)]
    groups: list[Any] = []  # one rate object per parameter: a group shares one
    for one in lr:
        if all(one is not g for g in groups):
            groups.append(one)
    return [_lr_at(g, step) for g in groups]


def _params(opt: Any) -> list[Any]:
    return list(getattr(opt, "parameters", ()) or ())


def optimizer_section(params: Iterable[Any], opts: Iterable[Any], stepped: list[Any],
                      lr_log: list[tuple[int, int, list[float | None]]]) -> dict[str, Any]:
    """The ``optimizers`` section: ``stepped`` (in the order they first stepped) with their
    parameter counts, the learning rates, and the model's parameters in none of ``opts``."""
    held = {id(p) for o in opts for p in _params(o)}
    frozen: list[str] = []
    missing: list[str] = []
    for p in params:
        if id(p) not in held:
            (missing if p.requires_grad else frozen).append(str(p.name))
    return {"optimizers": [{"class": type(o).__name__,
                            "groups": [{"params": len(_params(o)),
                                        "frozen": sum(not p.requires_grad
                                                      for p in _params(o))}]}
                           for o in stepped],
            "lr": [[s, i, lrs] for s, i, lrs in lr_log],
            "frozen": sorted(set(frozen)), "not_in_optimizer": sorted(set(missing))}
