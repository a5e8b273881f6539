"""Light timing of a MindSpore PyNative training run (``netparity.profile``): the hooks of
:class:`~netparity.capture.timing.StepTimer` for ``nn.Cell`` and ``nn.Optimizer``.

* every Cell: ``register_forward_pre_hook`` / ``register_forward_hook`` (the root's give the
  forward phase, the others the per-Cell times); the optimizer Cell's own pair gives the
  optimizer phase, and its end ends the step;
* MindSpore has no per-parameter "gradient accumulated" hook, so the backward phase runs from
  the end of the forward to the optimizer's start (``value_and_grad`` returns after both).

GRAPH_MODE: Cell hooks would be compiled into the graph (MindSpore parses them, and a hook that
reads the clock breaks the compilation), so none is registered. Instead the root Cell's own
``compile`` and ``compile_and_run`` are wrapped (instance attributes, removed on close): each
call of the root is one step, its compilation the ``compile`` phase (the first step's graph
build; a cache lookup after) and the rest of the call the ``forward`` phase (the compiled
graph: forward, backward and optimizer fused for a ``TrainOneStepCell``). PyNative dispatches
operators asynchronously, so a phase's hooks may return before its kernels finish; the host
waits show where it catches up.

Example:
    >>> # with profile(net, "runs/ms-prof", optimizer=opt, loader=dataset): ...
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

from netparity.capture.timing import StepTimer
from netparity.errors import UsageError

__all__ = ["MindSporeTiming", "profile", "timing_facts"]


class MindSporeTiming(StepTimer):
    """Step timing of a ``mindspore.nn.Cell`` (and its optimizer); see :func:`profile`."""

    def __init__(self, model: Any, path: str | os.PathLike[str], *, optimizer: Any = None,
                 loader: Iterable[Any] | None = None, modules: bool = True,
                 overwrite: bool = False, manifest: dict[str, Any] | None = None,
                 writer: Any = None, step_of: Any = None, rank: int = 0,
                 module_backward: bool = False):
        import mindspore as ms
        from mindspore import nn

        if not isinstance(model, nn.Cell):
            raise UsageError(f"profile needs a mindspore.nn.Cell, got {type(model).__name__}")
        if optimizer is not None and not isinstance(optimizer, nn.Cell):
            raise UsageError(f"optimizer must be a mindspore.nn.Optimizer, got "
                             f"{type(optimizer).__name__}")
        self.model = model
        self.optimizer = optimizer
        facts = {"framework": "mindspore", "framework_version": ms.__version__,
                 "device": str(ms.get_context("device_target")).lower(),
                 **timing_facts(model), **(manifest or {})}
        self._graph = facts["mode"] == "graph"
        self._module_backward = module_backward and modules and not self._graph
        # per-Cell backward: the forward rows of each Cell path waiting for their backward
        # (popped last-called first), and the row whose backward is running
        self._bw_marks: Any = None
        self._bw_waiting: dict[str, list[list[Any]]] = {}
        self._bw_running: dict[str, list[Any]] = {}
        # ``writer``/``step_of``: an accuracy capture's (``capture(..., timing=True)``)
        super().__init__(path, facts, loader=loader, modules=modules, overwrite=overwrite,
                         writer=writer, step_of=step_of, rank=rank)

    def _register(self) -> list[Any]:
        root = self.model
        if self._graph:
            return [_GraphTimer(root, self)]
        h: list[Any] = []
        cells = root.cells_and_names() if self._modules else [("", root)]
        for name, cell in cells:
            h.append(cell.register_forward_pre_hook(self._pre_hook(name, type(cell).__name__)))
            h.append(cell.register_forward_hook(self._post_hook(name)))
            if self._module_backward:
                h.append(cell.register_backward_pre_hook(self._cell_bwd(name, True)))
                h.append(cell.register_backward_hook(self._cell_bwd(name, False)))
        if self.optimizer is not None:
            h.append(self.optimizer.register_forward_pre_hook(self._opt_pre))
            h.append(self.optimizer.register_forward_hook(self._opt_post))
        return h


    def _watch_backward(self, out: Any, row: list[Any], args: Any = ()) -> None:
        if not self._module_backward or not self._handles:
            return
        if self._bw_marks is not self._cur:  # a new step: the last one's rows are written
            self._bw_marks = self._cur
            self._bw_waiting.clear()
            self._bw_running.clear()
        self._bw_waiting.setdefault(row[0], []).append(row)

    def _cell_bwd(self, path: str, begins: bool) -> Any:
        """A Cell backward (pre-)hook: the gradient reaches the Cell's output (``begins``) or
        leaves its inputs; the row is its latest forward call not yet gone backward."""
        waiting, running = self._bw_waiting, self._bw_running

        def hook(cell: Any, *_: Any) -> None:
            if begins:
                rows = waiting.get(path)
                if rows:
                    row = running[path] = rows.pop()
                    self._bwd_begins(row)
            else:
                done = running.pop(path, None)
                if done is not None:
                    self._bwd_ends(done)

        return hook


class _GraphTimer:
    """Times the root Cell's compilation and calls in GRAPH_MODE (instance attributes over
    the class's ``compile`` / ``compile_and_run``; :meth:`remove` deletes them)."""

    def __init__(self, cell: Any, timer: MindSporeTiming):
        self.cell = cell
        clock = time.perf_counter
        compile_fn, run_fn = cell.compile, cell.compile_and_run
        spent = [0.0]

        def compile(*args: Any, **kwargs: Any) -> Any:  # noqa: A001 - the Cell method's name
            t = clock()
            try:
                return compile_fn(*args, **kwargs)
            finally:
                e = clock()
                spent[0] += e - t
                timer._compiled(t, e)

        def compile_and_run(*args: Any, **kwargs: Any) -> Any:
            spent[0] = 0.0
            t = clock()
            try:
                return run_fn(*args, **kwargs)
            finally:
                timer._graph_call(t, clock(), spent[0])

        object.__setattr__(cell, "compile", compile)
        object.__setattr__(cell, "compile_and_run", compile_and_run)

    def remove(self) -> None:
        for name in ("compile", "compile_and_run"):
            self.cell.__dict__.pop(name, None)


def timing_facts(model: Any, loader: Any = None) -> dict[str, Any]:
    """The manifest facts a timed MindSpore trace carries: the mode, the parameters (name and
    shape, for pairing Cells with modules by ownership); with ``loader``, the light mode's
    ``timing`` and ``loader`` facts too (for a capture that records timing as well)."""
    import mindspore as ms

    out: dict[str, Any] = {
        "mode": "pynative" if ms.get_context("mode") == ms.PYNATIVE_MODE else "graph",
        # synchronous PyNative: Cell times are their kernels' (else mostly their dispatch)
        "pynative_synchronize": bool(ms.get_context("pynative_synchronize")),
        "params": [[p.name, list(p.shape)] for p in model.get_parameters()]}
    if loader is not None:
        from netparity.capture.timing import loader_facts

        out.update(timing="light", loader=loader_facts(loader))
    return out


def profile(model: Any, path: str | os.PathLike[str], *, optimizer: Any = None,
            loader: Iterable[Any] | None = None, modules: bool = True, overwrite: bool = False,
            manifest: dict[str, Any] | None = None, module_backward: bool = False
            ) -> MindSporeTiming:
    """Time each PyNative training step of ``model`` into the trace directory ``path``.

    ``optimizer``: its call ends each step (else call ``prof.step()``); ``loader``: a dataset
    whose ``next()`` waits are the data phase (or iterate ``prof.timed(iterator)``);
    ``module_backward``: each Cell's backward through ``register_backward_pre_hook`` /
    ``register_backward_hook`` (PyNative; off by default: a Cell with a backward hook runs
    through a slower path, tens of ms per call here; meaningful with
    ``pynative_synchronize=True``, else the times are mostly dispatch).

    Example:
        >>> # with profile(net, "runs/ms", optimizer=opt) as prof:
        >>> #     loss, grads = grad_fn(x, y); opt(grads)
    """
    return MindSporeTiming(model, path, optimizer=optimizer, loader=loader, modules=modules,
                           overwrite=overwrite, manifest=manifest,
                           module_backward=module_backward).install()
