"""Zero-code capture of a MindSpore PyNative script: ``netparity run -o DIR -- python train.py``.

Armed by the bootstrap (:mod:`netparity.frameworks.torch.launcher`) for every captured process;
nothing of MindSpore is imported until the script does. Once ``mindspore`` is imported,
``nn.Cell.__call__`` is wrapped at the class level (as ``run --profile`` does,
:mod:`.launcher`):

* the first Cell called outside any other Cell that is neither an optimizer nor a loss Cell is
  the root: :func:`netparity.frameworks.mindspore.capture.capture` of it starts there, with the
  run's policy (its hooks are installed before that first call runs);
* an ``nn.Optimizer`` called outside the root (``opt(grads)`` after ``ms.value_and_grad``) is
  handed to the capture as ``optimizer=`` would be (its learning rate per step, its parameters:
  the model's others are frozen or left out, ``capture_notes.json``) and ends the step after
  its update (``cap.step()``: parameters after it); one called inside the root
  (a ``TrainOneStepCell``) makes each root call one step, and the root's output is the loss;
* a loss Cell (``nn.LossBase``) called outside the root is the loss (``record_loss``);
* the trace is closed at interpreter exit.

Not seen: a root called only inside ``@ms.jit``, ``Model.train`` with
``dataset_sink_mode=True`` (no per-step Python call), GRAPH_MODE Cells (their dump is imported
by ``netparity run`` instead, :mod:`.autodump`). A process whose PyTorch capture started first
(it called an ``nn.Module``) records no MindSpore Cells.

Example:
    >>> # netparity run -o runs/ms -- python train_ms.py
"""

from __future__ import annotations

import atexit
from collections.abc import Callable
from typing import Any

__all__ = ["arm_capture"]

_state: dict[str, Any] = {}


def arm_capture(policy: dict[str, Any], pid: int, torch_state: dict[str, Any]) -> None:
    """Arrange for the capture to start at the first root Cell call (``torch_state``: the
    PyTorch bootstrap's state, whose ``cap`` means PyTorch's capture owns this process)."""
    from netparity.frameworks.torch.launcher import when_imported

    _state.update(policy=policy, pid=pid, cap=None, root=None, depth=0, opt_inside=False,
                  torch=torch_state)
    when_imported("mindspore", _on_mindspore)


def _on_mindspore() -> None:
    from mindspore import nn

    from netparity.frameworks.mindspore.launcher import call_root, wrap_cell_call

    optimizer_cls = nn.Optimizer
    loss_cls = nn.LossBase
    st = _state

    def outer(cell: Any, call: Callable[[], Any]) -> Any:
        cap = st["cap"]
        if st["torch"].get("cap") is None and cap is None and not _pynative():
            _note_names(cell)  # GRAPH_MODE: its dump instead, named after the Cell's params
        if st["torch"].get("cap") is not None or (cap is None and not _pynative()):
            return call()  # PyTorch's capture owns the process; GRAPH_MODE: its dump instead
        if isinstance(cell, optimizer_cls):
            if cap is not None:
                cap.add_optimizer(cell)  # as optimizer=: the update, learning rates, params
            out = call()
            if cap is not None:
                cap.step()  # the update is done: parameters after it, next step
            return out
        if isinstance(cell, loss_cls):
            out = call()
            if cap is not None:
                cap.record_loss(out)
            return out
        if cap is None:
            cap = _start(cell)
        if cell is not st["root"]:
            return call()
        out = call_root(st, call)
        if st["opt_inside"]:  # a training-step Cell: its output is the loss, one call a step
            cap.record_loss(out[0] if isinstance(out, (tuple, list)) and out else out)
            cap.step()
        return out

    wrap_cell_call(st, outer)


def _note_names(cell: Any) -> None:
    """Append the parameter names of a top-level GRAPH_MODE Cell (each ``Parameter.name`` and
    its attribute path) to the file :mod:`.autodump` named in ``NETPARITY_MSDUMP_NAMES``: the
    dump writes them with ``_`` for ``.``, the import maps them back."""
    import os

    from netparity.frameworks.mindspore.autodump import NAMES_ENV

    where = os.environ.get(NAMES_ENV)
    seen = _state.setdefault("named", set())
    if not where or id(cell) in seen:
        return
    seen.add(id(cell))
    names: list[str] = []
    for path, sub in cell.cells_and_names():
        for attr, p in getattr(sub, "_params", {}).items():
            names += [f"{path}.{attr}" if path else attr, str(p.name)]
    try:
        with open(where, "a", encoding="utf-8") as f:
            f.write("".join(n + "\n" for n in names if n.strip() == n and n))
    except OSError:  # the names only restore dots: the import still works without them
        pass


def _pynative() -> bool:
    import mindspore as ms

    return bool(ms.get_context("mode") == ms.PYNATIVE_MODE)


def _start(root: Any) -> Any:
    from netparity.frameworks.mindspore.capture import capture

    pol = dict(_state["policy"])
    pol.pop("profile", None)
    path = pol.pop("path")
    stop = bool(pol.pop("stop_on_nonfinite", False))
    if stop and "level" not in pol:  # MindSpore's stop checks primitives: op level
        pol["level"] = "op"
    if "directions" in pol:
        pol["directions"] = tuple(pol["directions"])
    cap = capture(root, path, stop_on_nonfinite=stop, manifest={"launcher": "netparity run"},
                  **_rank(), **pol)
    if stop:  # as PyTorch's: the stop's one line at the top of the script, exit status 1
        from netparity.frameworks.torch.launcher import _one_line_stop

        _one_line_stop()
    cap.install()
    _state.update(cap=cap, root=root)
    atexit.register(_finish)
    return cap


def _rank() -> dict[str, Any]:
    """This process's rank and the world size once ``mindspore.communication.init()`` ran
    (``msrun`` assigns them there, not always in ``RANK_ID``); else the capture's defaults."""
    try:
        from mindspore.communication import GlobalComm, get_group_size, get_rank

        if GlobalComm.INITED:
            return {"rank": int(get_rank()), "world_size": int(get_group_size())}
    except Exception:  # noqa: BLE001 - no communication: one process
        pass
    return {}


def _finish() -> None:
    from netparity.frameworks.torch.launcher import close_at_exit

    close_at_exit(_state.get("cap"), _state.get("pid"))
