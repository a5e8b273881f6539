"""MindSpore's loss scale, recorded by the capture itself (PyNative).

The capture hooks the loss-scale Cells it finds in the captured network -- or the one given as
``capture(..., scaler=cell)`` -- and records, after each call, the records that
:func:`netparity.analyzers.health.loss_scale_history` reads:

* ``loss_scale`` -- the scale after the call (the scale the next step uses: the
  ``scale_sense`` Parameter that ``DynamicLossScaleUpdateCell`` updates in place);
* ``loss_scale_overflow`` -- 1 when the gradients overflowed (the optimizer was skipped).

Cells read: ``TrainOneStepWithLossScaleCell`` (its outputs ``(loss, overflow, scale)``; its
``scale_sense`` Parameter), or, without one, ``DynamicLossScaleUpdateCell`` /
``FixedLossScaleUpdateCell`` (called as ``cell(scale, overflow)``). ``Model(...,
loss_scale_manager=FixedLossScaleManager / DynamicLossScaleManager)`` builds a
``TrainOneStepWithLossScaleCell`` (``model._train_network``): pass that as ``scaler=``.

Example:
    >>> train = nn.TrainOneStepWithLossScaleCell(loss_net, opt, scale_sense=update_cell)  # doctest: +SKIP
    >>> with capture(train, d) as cap:                           # doctest: +SKIP
    ...     loss, overflow, scale = train(x, y); cap.step()
"""

from __future__ import annotations

from typing import Any

import numpy as np


def scale_cells(model: Any, scaler: Any = None) -> list[tuple[Any, str]]:
    """The loss-scale Cells to hook, with how to read them (``train`` or ``update``)."""
    from mindspore import nn

    cells = [c for _, c in model.cells_and_names()]
    if scaler is not None:
        cells += [c for _, c in scaler.cells_and_names()] if isinstance(scaler, nn.Cell) else []
    train = [c for c in cells if isinstance(c, nn.TrainOneStepWithLossScaleCell)]
    if train:
        return [(c, "train") for c in dict.fromkeys(train)]
    upd = (nn.DynamicLossScaleUpdateCell, nn.FixedLossScaleUpdateCell)
    return [(c, "update") for c in dict.fromkeys(c for c in cells if isinstance(c, upd))]


def read_scale(cell: Any, how: str, args: tuple[Any, ...], output: Any
               ) -> tuple[float | None, bool | None]:
    """(scale after the call, overflow) of one loss-scale Cell call."""
    if how == "train":
        sense = getattr(cell, "scale_sense", None)
        scale = _value(sense) if sense is not None else None
        over = _value(output[1]) if isinstance(output, tuple) and len(output) > 1 else None
    else:
        scale = (_value(args[0]) if args and hasattr(args[0], "asnumpy")
                 else _value(getattr(cell, "loss_scale_value", None)))
        over = _value(args[1]) if len(args) > 1 else None
    return scale, (None if over is None else bool(over))


def _value(t: Any) -> float | None:
    if t is None:
        return None
    a = np.asarray(t.asnumpy() if hasattr(t, "asnumpy") else t, dtype=np.float64)
    return float(a.reshape(-1)[0]) if a.size else None
