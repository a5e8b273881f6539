"""Zero-code step timing of a MindSpore script: ``netparity run --profile -o DIR -- python train.py``.

The bootstrap (:mod:`netparity.frameworks.torch.launcher`, which ``netparity run`` puts on
``PYTHONPATH``) arms this unit; it imports nothing of MindSpore until the script does. Once
``mindspore`` is imported:

* ``nn.Cell.__call__`` is wrapped at the class level (every Cell call goes through one more
  Python frame; in GRAPH_MODE only the outermost call is a Python call). The first Cell called
  outside any other Cell that is not an optimizer becomes the root: a
  :class:`~netparity.frameworks.mindspore.timing.MindSporeTiming` of it starts there (PyNative:
  Cell hooks, registered before that first call runs, so it is timed too; GRAPH_MODE: its
  ``compile`` / ``compile_and_run``, each call one step with its compilation apart).
* an ``nn.Optimizer`` called outside the root (``opt(grads)`` after ``value_and_grad``) is the
  optimizer phase and ends the step; one called inside the root (a ``TrainOneStepCell`` in
  PyNative) makes each root call one step (its forward phase then holds forward, backward and
  optimizer). Other Cells called outside the root (a loss Cell) are not timed apart.
* every dataset iterator's ``next()`` (``mindspore.dataset`` ``Iterator``, which ``for x in
  dataset`` and ``create_tuple_iterator`` use) is timed: the data phase is those waits, and the
  first step starts at the wait that fetched its batch.
* the trace is closed at interpreter exit. A script that calls the root only inside a
  ``@ms.jit`` function, or ``Model.train`` with ``dataset_sink_mode=True``, has no per-step
  Python call to time: it gets one step per call of the root, or none.

Example:
    >>> # netparity run --profile -o runs/ms -- python train_ms.py
"""

from __future__ import annotations

import atexit
import functools
import os
import time
from collections.abc import Callable
from typing import Any

__all__ = ["arm_profile"]

_state: dict[str, Any] = {}


def arm_profile(policy: dict[str, Any], pid: int) -> None:
    """Arrange for the timing to start when the program imports mindspore (or now)."""
    from netparity.frameworks.torch.launcher import when_imported

    _state.update(policy=policy, pid=pid, waits=[], timer=None, root=None, depth=0,
                  opt_inside=False)
    when_imported("mindspore", _on_mindspore)


def wrap_cell_call(st: dict[str, Any], outer: Callable[[Any, Callable[[], Any]], Any]) -> None:
    """Wrap ``nn.Cell.__call__`` at the class level: a call outside the root, in the process
    ``st["pid"]``, goes to ``outer(cell, call)`` (``call()`` runs it); inside the root
    (``st["depth"]``, see :func:`call_root`) an optimizer Cell sets ``st["opt_inside"]``."""
    from mindspore import nn

    orig_call = nn.Cell.__call__
    optimizer_cls = nn.Optimizer

    def __call__(cell: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N807
        if st["depth"]:  # inside the root: its own hooks see it
            if isinstance(cell, optimizer_cls):
                st["opt_inside"] = True
            return orig_call(cell, *args, **kwargs)
        if os.getpid() != st["pid"]:
            return orig_call(cell, *args, **kwargs)
        return outer(cell, functools.partial(orig_call, cell, *args, **kwargs))

    nn.Cell.__call__ = __call__  # type: ignore[method-assign]


def call_root(st: dict[str, Any], call: Callable[[], Any]) -> Any:
    """Run the root Cell's ``call()``, noting whether an optimizer ran inside it."""
    st["depth"] = 1
    st["opt_inside"] = False
    try:
        return call()
    finally:
        st["depth"] = 0


def _on_mindspore() -> None:
    from mindspore import nn
    from mindspore.dataset.engine.iterators import Iterator

    orig_next = Iterator.__next__
    optimizer_cls = nn.Optimizer
    clock = time.perf_counter
    st = _state

    def outer(cell: Any, call: Callable[[], Any]) -> Any:
        timer = st["timer"]
        if isinstance(cell, optimizer_cls):
            if timer is None:
                return call()
            timer._opt_pre()
            try:
                return call()
            finally:
                timer._opt_post()
        if timer is None:
            timer = _start(cell)
        if cell is not st["root"]:
            return call()
        out = call_root(st, call)
        if st["opt_inside"] and not timer._graph:  # a training-step Cell: one call, one step
            timer.step()
        return out

    def __next__(it: Any) -> Any:  # noqa: N807
        t = clock()
        try:
            return orig_next(it)
        finally:
            timer = st["timer"]
            if timer is not None:
                timer._data_wait(t, clock())
            elif os.getpid() == st["pid"]:
                st["waits"][:] = [(t, clock())]  # the batch the first step uses

    wrap_cell_call(st, outer)
    Iterator.__next__ = __next__  # type: ignore[method-assign]


def _start(root: Any) -> Any:
    from netparity.frameworks.mindspore.timing import MindSporeTiming

    pol = _state["policy"]
    rank = int(os.environ.get("RANK_ID", os.environ.get("RANK", "0")) or 0)
    timer = MindSporeTiming(root, pol["path"], overwrite=bool(pol.get("overwrite", False)),
                            manifest={"launcher": "netparity run --profile"},
                            rank=rank).install()
    if _state["waits"]:
        timer.backdate(_state["waits"][-1][0], _state["waits"])
    _state.update(timer=timer, root=root)
    atexit.register(_finish)
    return timer


def _finish() -> None:
    from netparity.frameworks.torch.launcher import close_at_exit

    close_at_exit(_state.get("timer"), _state.get("pid"))
