"""Capture what a MindSpore network computes into a netparity trace.

Same signature and record conventions as the PyTorch capture (docs/INTERFACES.md, "Capture API").

How each level is observed (PyNative mode; see docs/capture-mindspore.md for the details):

* **Cells** (``level="module"``): ``Cell.register_forward_pre_hook(..., with_kwargs=True)`` for the
  inputs, ``register_forward_hook(..., with_kwargs=True, always_call=True)`` for the outputs (the
  *always_call* hook also runs when the Cell raises, which keeps the Cell stack balanced) and
  ``register_backward_hook`` for gradients: ``grad_output`` (gradient w.r.t. the Cell's outputs)
  is role ``input``, ``grad_input`` (w.r.t. its inputs) role ``output``.
* **Primitives** (``level="op"``): one interception point, MindSpore's JIT context
  (``mindspore.graph.jit_context``). Every Primitive called from Python -- the ~1,000 generated
  pyboost Primitive classes (``gen_ops_prim``), the manually defined ones and legacy
  ``Primitive.__call__`` -> ``_run_op`` -- ends with ``if jit_context(): return
  jit_context().run_op(self, res, *args)``; trace-mode ``ms.jit`` uses it to see every executed
  primitive with its inputs and result. Installing our own context there sees every such
  primitive *after* it ran, with the primitive object, its inputs and outputs, and nothing is
  patched by name. What escapes: Tensor methods and operators implemented in C++
  (``x + y``, ``x.sum()``, ``x.reshape()`` dispatch from ``TensorPy`` straight to the C++ pyboost
  kernels), the bodies of ``@ms.jit`` functions (the optimizer's ``construct`` among them: seen as
  one compiled graph) and every backward primitive (run by the C++ grad executor; the
  backward ``stop_on_nonfinite`` names one by replaying a Cell, :mod:`.backward_stop`).
* **Parameters** at :meth:`MindSporeCapture.step` (after the update) and **gradients** through
  ``Parameter.register_hook`` (fires with each parameter's gradient when
  ``ms.value_and_grad(fn, None, weights)`` differentiates w.r.t. it) or by hand with
  :meth:`MindSporeCapture.record_grads`.

Graph mode (``GRAPH_MODE``, ``Model.train``) compiles Cells into one graph: Python hooks do not run
there. Each Cell's forward output is then captured by an in-graph probe
(:mod:`netparity.frameworks.mindspore.graph`), recorded at each ``step()``; for the rest use
MindSpore's own dump and :func:`netparity.frameworks.mindspore.dump.import_dump`.

Example:
    >>> import numpy as np, mindspore as ms, tempfile
    >>> net = ms.nn.Dense(3, 2)
    >>> with capture(net, tempfile.mkdtemp()) as cap:
    ...     y = net(ms.Tensor(np.ones((1, 3), np.float32)))
    ...     cap.step()
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netparity.capture.policy import CapturePolicy
from netparity.capture.session import CaptureSession, user_source
from netparity.errors import UsageError
from netparity.frameworks.mindspore.adapter import MindSporeAdapter
from netparity.frameworks.mindspore.compat import cell_view
from netparity.trace.schema import Record
from netparity.trace.vocab import canonical_op

if TYPE_CHECKING:
    from netparity.frameworks.mindspore.graph import GraphProbes


def _ms_dir() -> str:
    import mindspore

    return str(Path(mindspore.__file__).resolve().parent)


def _flatten(obj: Any, prefix: str, is_tensor: Callable[[Any], bool]) -> Iterator[tuple[str, Any]]:
    """(arg path, tensor) for every tensor in a nested structure, in a stable order."""
    if is_tensor(obj):
        yield prefix, obj
    elif isinstance(obj, (tuple, list)):
        for i, v in enumerate(obj):
            yield from _flatten(v, f"{prefix}.{i}" if prefix else str(i), is_tensor)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _flatten(v, f"{prefix}.{k}" if prefix else str(k), is_tensor)


def _native_of(cls: type) -> tuple[str, str]:
    """(native class name, canonical op) of a Cell class."""
    native = (f"{cls.__module__.split('.')[0]}.nn.{cls.__qualname__}"
              if cls.__module__.startswith("mindspore.nn") else f"{cls.__module__}.{cls.__qualname__}")
    return native, canonical_op("mindspore", cls.__name__)


#: a Cell's own bookkeeping attributes: not settings of what it computes
_CELL_INTERNALS = frozenset({"training", "requires_grad", "is_top_cell", "arguments_key",
                             "mixed_precision_type", "cell_type", "grad_ops_label", "has_bprop"})


def _plain(v: Any) -> bool:
    return (v is None or isinstance(v, (bool, int, float, str))
            or (isinstance(v, (tuple, list)) and len(v) <= 8 and all(_plain(x) for x in v)))


def leaf_meta(cell: Any) -> dict[str, Any]:
    """What a float64 replay of a leaf ``mindspore.nn`` Cell needs besides its tensors
    (:mod:`netparity.compare.leafreplay`, the MindSpore half of
    :func:`netparity.frameworks.torch.leafmods.build_leaf`): its nearest ``mindspore.nn``
    class, public attributes of plain types (epsilon, pad_mode, stride, approximate, ...), its
    training flag and parameter names; ``{}`` for a Cell with children or no such class."""
    base = next((c for c in type(cell).__mro__ if (c.__module__ or "").startswith("mindspore.nn.")
                 and not c.__name__.startswith("_") and c.__name__ != "Cell"), None)
    if base is None or getattr(cell, "_cells", None):
        return {}
    attrs = {k: list(v) if isinstance(v, tuple) else v for k, v in vars(cell).items()
             if not k.startswith("_") and k not in _CELL_INTERNALS and _plain(v)}
    own = getattr(cell, "parameters_and_names", None)
    sub = {} if base is type(cell) else {"subclass": f"{type(cell).__module__}."
                                                    f"{type(cell).__qualname__}"}
    return {"framework": "mindspore", "class": base.__name__, **sub, "attrs": attrs,
            "training": bool(getattr(cell, "training", False)),
            "params": [n for n, _ in own(expand=False)] if own else []}


def _launch_blocking_is_set() -> bool:
    from mindspore._c_expression import RuntimeConf

    return bool(RuntimeConf.get_instance().is_launch_blocking())


class _Frame:
    """One running Cell call: the op counter attributes primitives to it."""

    __slots__ = ("path", "call", "event", "ops", "update", "state")

    def __init__(self, path: str, call: int, event: int, update: bool):
        self.path = path
        self.call = call
        self.event = event
        self.ops = 0
        self.update = update
        # id(Parameter) -> copy taken before the Cell ran (see MindSporeCapture._pre)
        self.state: dict[int, Any] = {}


class MindSporeCapture(CaptureSession):
    """A capture session bound to one MindSpore network; use :func:`capture` to build one.

    It is a context manager (``__exit__`` closes the trace and restores everything) and a
    decorator (hooks are installed for each call of the decorated function; call
    :meth:`close` when done).
    """

    def __init__(
        self,
        model: Any,
        path: str | os.PathLike[str],
        policy: CapturePolicy,
        *,
        optimizer: Any = None,
        rank: int = 0,
        world_size: int = 1,
        manifest: dict[str, Any] | None = None,
        overwrite: bool = False,
        launch_blocking: bool = False,
        stop_on_nonfinite: bool = False,
        scaler: Any = None,
    ):
        adapter = MindSporeAdapter()
        model = cell_view(model)  # a compat-layer Module: walked through its torch-like API
        facts = adapter.model_facts(model)
        if launch_blocking:
            facts["launch_blocking"] = True
        facts.update(manifest or {})
        super().__init__(path, adapter, policy, rank=rank, world_size=world_size,
                         manifest=facts, overwrite=overwrite)
        self.model = model
        self.optimizer = optimizer
        self.launch_blocking = launch_blocking
        self.stop_on_nonfinite = stop_on_nonfinite
        self.scaler = scaler
        self._is_tensor = adapter.is_tensor
        self._handles: list[Any] = []
        self._bwd_attr_reset: list[Any] = []
        self._bstop: Any = None  # backward_stop.BackwardStop with stop_on_nonfinite
        self._stack: list[_Frame] = []
        self._calls: dict[tuple[str, str], int] = {}
        self._grad_names: set[str] = set()
        self._busy = False
        self._installed = False
        self._prev_ctx: Any = None
        self._op_ctx: Any = None
        self._tensor_ops: Any = None  # tensor_ops.TensorOperators while op level runs
        self._ops_seen = 0  # primitives and Tensor operators observed (see tensor_ops)
        self._update = 0
        self._skip = (_ms_dir(),)
        self.errors: list[str] = []
        self.notes: list[str] = []
        self._paths: dict[int, str] = {}
        self._native: dict[int, tuple[str, str]] = {}
        self._leaf_meta: dict[str, dict[str, Any]] = {}  # capture_notes "modules"
        self._opt_ids: set[int] = set()
        self._graph: GraphProbes | None = None
        self._graph_native: dict[str, tuple[str, str]] = {}
        self._timer: Any = None  # capture(..., timing=True): the MindSporeTiming sharing the writer
        self._prim_info: dict[int, tuple[Any, dict[str, Any]]] = {}
        # optimizers (nn.Optimizer): known (optimizer=, in the model, seen stepping), those
        # seen stepping in that order, and their learning rates ((step, index, [per group]))
        self._known_opts: list[Any] = []
        self._stepped_opts: list[Any] = []
        self._lr_log: list[tuple[int, int, list[float | None]]] = []
        self._optimizer_cls: Any = None

    # ---- install / remove ------------------------------------------------------------------
    def install(self) -> MindSporeCapture:
        """Register the hooks (idempotent)."""
        if self._installed:
            return self
        import mindspore as ms
        from mindspore import nn

        self._installed = True
        graph = ms.get_context("mode") == ms.GRAPH_MODE
        opt = self.optimizer
        if opt is not None and isinstance(opt, nn.Cell):
            self._opt_ids = {id(c) for _, c in opt.cells_and_names()}
        self._optimizer_cls = nn.Optimizer
        for _name, cell in [*self.model.cells_and_names(), ("", opt)]:
            if isinstance(cell, nn.Optimizer):
                self._opt_ids.update(id(c) for _, c in cell.cells_and_names())
                if all(cell is not o for o in self._known_opts):
                    self._known_opts.append(cell)
        if graph:
            if self.launch_blocking:
                self.notes.append("launch_blocking ignored: it applies to PyNative mode only "
                                  "(the manifest's launch_blocking fact was not applied)")
            self._install_graph()
            return self
        if self._timer is not None:
            # first: its pre-hooks run before the capture's, its post-hooks after (its module
            # times then hold the capture's work, as PyTorch's capture(timing=True) does)
            self._timer.install()
        if self.launch_blocking and not _launch_blocking_is_set():
            # one way: MindSpore has no call that turns it off again
            ms.runtime.launch_blocking()
            self.notes.append("mindspore.runtime.launch_blocking() was called: operators now run "
                              "synchronously in this process")
        cells = list(self.model.cells_and_names())
        if opt is not None and isinstance(opt, nn.Cell) and all(c is not opt for _, c in cells):
            cells.append(("optimizer", opt))
        for name, cell in cells:
            if id(cell) in self._opt_ids and not isinstance(cell, nn.Optimizer):
                continue  # inside an optimizer (its learning-rate Cell): compiled with it
            self._hook_forward(name, cell)
            if not isinstance(cell, nn.Cell):  # a compat-layer module: forward hooks only
                continue
            had_bwd = cell._cell_backward_hook is not None
            if (self.policy.modules and self.policy.wants_direction("backward")
                    and "backward" in self.policy.directions and id(cell) not in self._opt_ids):
                self._handles.append(cell.register_backward_hook(self._bwd))
            if self.stop_on_nonfinite and id(cell) not in self._opt_ids:
                from netparity.frameworks.mindspore.backward_stop import BackwardStop

                self._bstop = self._bstop or BackwardStop(self)
                self._handles.extend(self._bstop.install(cell))
            if not had_bwd and cell._cell_backward_hook is not None:
                self._bwd_attr_reset.append(cell)
        from netparity.frameworks.mindspore.loss_scale import scale_cells

        for cell, how in scale_cells(self.model, self.scaler):
            self._handles.append(cell.register_forward_hook(
                functools.partial(self._scale_post, how), with_kwargs=True))
        if "backward" in self.policy.directions:
            for p in self.model_params():
                if not p.requires_grad:
                    continue
                self._handles.append(p.register_hook(functools.partial(self._param_grad, p.name)))
        if self.policy.ops:
            from mindspore.graph import jit_context as jc

            prev = jc.jit_context()
            if prev is not None:
                self.notes.append("a JIT context was active: op-level interception skipped")
            else:
                self._op_ctx = _OpContext(self)
                jc.set_jit_context(self._op_ctx)
                from netparity.frameworks.mindspore.tensor_ops import TensorOperators

                ops = TensorOperators(self._observe_op, lambda: self._ops_seen,
                                      self._ops_quiet)
                if ops.install():
                    self._tensor_ops = ops
                else:
                    self.notes.append("another capture wraps MindSpore's Tensor operators: "
                                      "x * y, x - y, x / y are not recorded by this one")
        return self

    def model_params(self) -> list[Any]:
        """The model's parameters, without an optimizer's inside it (a ``TrainOneStepCell``
        root holds its optimizer: its state -- ``learning_rate``, ``accum.*``, ``moments.*`` --
        and the parameter list it (and the wrapper's ``weights``) was built with are the
        optimizer's, not the network's)."""
        if not any(id(c) in self._opt_ids for _, c in self.model.cells_and_names()):
            return list(self.model.get_parameters())
        held = {id(p) for c in self._known_opts for p in getattr(c, "parameters", ()) or ()}
        seen: dict[int, Any] = {}
        for name, cell in self.model.cells_and_names():
            own = getattr(cell, "parameters_and_names", None)
            if id(cell) in self._opt_ids or own is None:
                continue
            for _, p in own(expand=False):
                if name or id(p) not in held:  # the wrapper's own `weights`: the optimizer's
                    seen.setdefault(id(p), p)
        return list(seen.values())

    def _hook_forward(self, name: str, cell: Any) -> None:
        self._paths[id(cell)] = name
        self._native[id(cell)] = _native_of(type(cell))
        self._handles.append(cell.register_forward_pre_hook(self._pre, with_kwargs=True))
        self._handles.append(cell.register_forward_hook(self._post, with_kwargs=True,
                                                        always_call=True))

    def add_optimizer(self, opt: Any) -> None:
        """An optimizer Cell found after the capture started (zero-code ``netparity run``
        calls this as the script calls ``opt(grads)``): its calls are the update, its learning
        rates are recorded, its parameters count as optimized -- as ``optimizer=`` does."""
        if not self._installed or any(opt is o for o in self._known_opts):
            return
        self._known_opts.append(opt)
        self._opt_ids.update(id(c) for _, c in opt.cells_and_names())
        if self._graph is None and id(opt) not in self._paths:
            self._hook_forward("optimizer", opt)

    def _note_lr(self, opt: Any) -> None:
        """An optimizer is about to update: the learning rate of each of its groups at this
        step (:mod:`.optnotes`)."""
        from netparity.frameworks.mindspore.optnotes import group_lrs

        i = next((j for j, o in enumerate(self._stepped_opts) if o is opt), None)
        if i is None:
            i = len(self._stepped_opts)
            self._stepped_opts.append(opt)
            if all(opt is not o for o in self._known_opts):
                self._known_opts.append(opt)
        if self.active and not any(s == self.step_no and j == i for s, j, _ in self._lr_log[-8:]):
            busy, self._busy = self._busy, True
            try:
                self._lr_log.append((self.step_no, i, group_lrs(opt)))
            finally:
                self._busy = busy

    def _install_graph(self) -> None:
        """GRAPH_MODE: Cell hooks never run; probe each Cell's output inside the graph instead."""
        from netparity.frameworks.mindspore.graph import GraphProbes

        p = self.policy
        if not (p.modules and "forward" in p.directions):
            self.notes.append("GRAPH_MODE: Cell hooks do not run in compiled graphs; only "
                              "record/record_loss/step are captured (use msdump import)")
            return
        cells = [(n, c) for n, c in self.model.cells_and_names() if id(c) not in self._opt_ids]
        for name, cell in cells:
            self._paths[id(cell)] = name
            self._native[id(cell)] = _native_of(type(cell))
        self._graph = GraphProbes()
        self._graph.install(cells)
        self._graph_native = {name: self._native[id(c)] for name, c in cells}
        self.notes.append("GRAPH_MODE: Cell forward outputs captured through in-graph pyfunc "
                          "probes (single-Tensor outputs only); inputs, backward and ops need "
                          "the msdump import")

    def _drain_graph(self) -> None:
        """Turn the outputs the graph probes saw in this step into ``module`` records."""
        if self._graph is None:
            return
        seen = self._graph.drain()
        if not self.active:
            return
        from mindspore import Tensor

        for path, arr in seen:
            native, op = self._graph_native[path]
            if not self.policy.wants_name(path, op):
                continue
            call = self._next_call("forward", path)
            self._emit_call("module", path, native, op, call, 0, "forward", self.next_event(),
                            None, Tensor(arr), "")

    def remove(self) -> None:
        """Remove every hook and restore MindSpore's state exactly (idempotent)."""
        if not self._installed:
            return
        self._installed = False
        errors: list[BaseException] = []
        if self._timer is not None:
            self._timer.uninstall()
        if self._graph is not None:
            try:
                self._drain_graph()
            finally:
                self._graph.remove()
                self._graph = None
        if self._op_ctx is not None:
            from mindspore.graph import jit_context as jc

            if jc.jit_context() is self._op_ctx:
                jc.set_jit_context(None)
            self._op_ctx = None
        if self._tensor_ops is not None:
            self._tensor_ops.remove()
            self._tensor_ops = None
        for h in self._handles:
            try:
                h.remove()
            except BaseException as e:  # keep removing the others
                errors.append(e)
        self._handles.clear()
        # register_backward_hook leaves a CellBackwardHook primitive on the Cell even when its
        # hook dict is empty again; put the attribute back as it was.
        for cell in self._bwd_attr_reset:
            object.__setattr__(cell, "_cell_backward_hook", None)
        self._bwd_attr_reset.clear()
        self._stack.clear()
        if errors:
            raise errors[0]

    def uninstall(self) -> None:
        """Remove every hook and the op context (the shared lifecycle's name for :meth:`remove`)."""
        self.remove()

    def close(self) -> None:
        try:
            if self._timer is not None:
                self._timer.close()  # its last step and hooks (the writer is the capture's)
            self.remove()
        finally:
            self._write_notes()
            super().close()

    def _write_notes(self) -> None:
        """``capture_notes.json``: notes, hook errors, the optimizers (:mod:`.optnotes`), the
        leaf Cells' settings (``modules``: :func:`leaf_meta`)."""
        if self.writer is None:
            return
        from netparity.capture.notes import write_notes

        sections: dict[str, Any] = {}
        if self.notes or self.errors:
            sections.update(notes=self.notes, hook_errors=self.errors)
        if self._known_opts or self._lr_log:
            from netparity.frameworks.mindspore.optnotes import optimizer_section

            sections["optimizers"] = optimizer_section(self.model_params(), self._known_opts,
                                                       self._stepped_opts, self._lr_log)
        meta = {k: v for k, v in self._leaf_meta.items() if v}
        if meta:
            sections["modules"] = meta
        if sections:
            write_notes(self.writer.rank_dir, sections)

    # ---- user API ---------------------------------------------------------------------------
    def record_loss(self, loss: Any) -> None:
        """Record the loss (kind ``loss``, module ``""``, op ``loss``)."""
        if self.active:
            # same conventions as the PyTorch capture: call = n-th loss of the step
            self._emit_one(Record(kind="loss", op="loss", call=self._next_call("loss", "")),
                           loss)

    def record(self, name: str, tensor: Any, kind: str = "custom") -> None:
        """Record any tensor (or nested structure of tensors) by hand: ``kind`` custom or data."""
        if not self.active or not self.policy.wants_name(name):
            return
        ev = self.next_event()
        src = user_source(self._skip)
        call = self._next_call("custom", name)
        for arg, t in _flatten(tensor, "", self._is_tensor):
            self._emit_one(Record(kind=kind, op=name, module=name, call=call, arg=arg,
                                  event=ev, source=src), t)

    def record_grads(self, grads: Iterable[Any], params: Iterable[Any]) -> int:
        """Record parameter gradients by hand, e.g. from ``ms.value_and_grad(f, None, params)``.

        Gradients already captured automatically in this step (``Parameter.register_hook``)
        are not recorded twice. Returns the number recorded.

        Example:
            >>> # loss, grads = grad_fn(x, y); cap.record_grads(grads, optimizer.parameters)
        """
        n = 0
        if not self.active or "backward" not in self.policy.directions:
            return 0
        for g, p in zip(grads, params):
            name = p.name
            if name in self._grad_names or not self.policy.wants_name(name):
                continue
            self._grad_names.add(name)
            self._emit_one(Record(kind="grad", op="grad", module=name,
                                  direction="backward", role="grad"), g)
            n += 1
        return n

    def step(self) -> None:
        """Record parameters after the update, then start the next step."""
        if self._timer is not None:  # a timed step not ended by an optimizer ends here
            self._timer.step()
        self._drain_graph()
        if self.active:
            for p in self.model_params():
                if self.policy.wants_name(p.name):
                    self._emit_one(Record(kind="param", op="param",
                                          module=p.name, direction="update", role="param"), p)
        self._calls.clear()
        self._grad_names.clear()
        super().step()

    # ---- hooks ------------------------------------------------------------------------------
    def _emit_one(self, rec: Record, t: Any) -> None:
        busy, self._busy = self._busy, True
        try:
            if rec.event < 0:
                rec.event = self.next_event()
            if not rec.source:
                rec.source = user_source(self._skip)
            self.emit(rec, t)
        finally:
            self._busy = busy

    def _emit_call(self, kind: str, path: str, native: str, op: str, call: int, module_call: int,
                   direction: str, event: int, inputs: Any, outputs: Any, src: str,
                   extra: dict[str, Any] | None = None) -> None:
        busy, self._busy = self._busy, True
        pending = [extra] if extra else []  # on the call's first record
        try:
            for role, obj in (("input", inputs), ("output", outputs)):
                if obj is None:
                    continue
                for arg, t in _flatten(obj, "", self._is_tensor):
                    self.emit(Record(kind=kind, op=op, native=native, module=path, call=call,
                                     module_call=module_call, direction=direction, role=role,
                                     arg=arg, event=event, source=src,
                                     extra=pending.pop() if pending else {}), t)
        finally:
            self._busy = busy

    def _next_call(self, direction: str, path: str) -> int:
        k = (direction, path)
        c = self._calls.get(k, 0)
        self._calls[k] = c + 1
        return c

    def _guard(fn: Callable[..., Any]) -> Callable[..., Any]:  # noqa: N805  (decorator)
        """Hooks never break the user's run: errors are kept and reported in the manifest."""

        @functools.wraps(fn)
        def wrapper(self: MindSporeCapture, *args: Any) -> None:
            if self._busy:
                return None
            try:
                fn(self, *args)
            except Exception as e:
                self._busy = False
                if len(self.errors) < 20:
                    self.errors.append(f"{fn.__name__}: {type(e).__name__}: {e}")
                if len(self.errors) == 1:
                    warnings.warn(f"netparity capture hook failed: {e}", stacklevel=2)
            return None

        return wrapper

    @_guard
    def _scale_post(self, how: str, cell: Any, args: Any, kwargs: Any, output: Any) -> None:
        """A loss-scale Cell ran: record the scale it leaves and whether it overflowed."""
        import mindspore as ms
        import numpy as np

        from netparity.frameworks.mindspore.loss_scale import read_scale

        busy, self._busy = self._busy, True
        try:
            scale, over = read_scale(cell, how, tuple(args), output)
        finally:
            self._busy = busy
        if scale is not None:
            self.record("loss_scale", ms.Tensor(np.float32(scale)))
        if over is not None:
            self.record("loss_scale_overflow", ms.Tensor(np.float32(over)))

    @_guard
    def _pre(self, cell: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        cid = id(cell)
        path = self._paths.get(cid, "")
        update = cid in self._opt_ids
        direction = "update" if update else "forward"
        call = self._next_call(direction, path)
        frame = _Frame(path, call, self.next_event(), update)
        self._stack.append(frame)
        if update:
            self._update += 1
            if self._optimizer_cls is not None and isinstance(cell, self._optimizer_cls):
                self._note_lr(cell)
            return
        p = self.policy
        if self.active and p.ops and "forward" in p.directions:
            # The op hook runs after a primitive, so an input the primitive updates in place
            # (BatchNorm's moving_mean/moving_variance) would be recorded with its new value.
            # Keep a copy of the Cell's own non-trainable Parameters (its state, typically a
            # few small vectors) from before the call; _op records those instead.
            own = getattr(cell, "parameters_and_names", None)  # (compat modules: none)
            state = [q for _, q in own(expand=False) if not q.requires_grad] if own else []
            if state:
                from mindspore import Tensor

                busy, self._busy = self._busy, True
                try:
                    frame.state = {id(q): Tensor(q.asnumpy().copy()) for q in state}
                finally:
                    self._busy = busy
        if self.active and p.modules and "forward" in p.directions:
            native, op = self._native[cid]
            if p.wants_name(path, op):
                if path not in self._leaf_meta:
                    self._leaf_meta[path] = leaf_meta(cell)
                # positional args are "0", "1"...; keyword args "kw.name"
                if not kwargs:
                    self._emit_call("module", path, native, op, call, 0, "forward",
                                    frame.event, args, None, user_source(self._skip))
                else:
                    src = user_source(self._skip)
                    busy, self._busy = self._busy, True
                    try:
                        for arg, t in [*_flatten(args, "", self._is_tensor),
                                       *_flatten(kwargs, "kw", self._is_tensor)]:
                            self.emit(Record(kind="module", op=op, native=native, module=path,
                                             call=call, direction="forward", role="input",
                                             arg=arg, event=frame.event, source=src), t)
                    finally:
                        self._busy = busy

    @_guard
    def _post(self, cell: Any, args: Any, kwargs: Any, output: Any) -> None:
        cid = id(cell)
        # pop up to and including this Cell's frame (an inner Cell that raised may be left)
        frame = None
        path = self._paths.get(cid, "")
        while self._stack:
            f = self._stack.pop()
            if f.path == path:
                frame = f
                break
        if frame is None or frame.update:
            if frame is not None:
                self._update -= 1
            return
        p = self.policy
        if output is not None and self.active and p.modules and "forward" in p.directions:
            native, op = self._native[cid]
            if p.wants_name(path, op):
                self._emit_call("module", path, native, op, frame.call, 0, "forward",
                                frame.event, None, output, "")

    @_guard
    def _bwd(self, cell: Any, grad_input: Any, grad_output: Any) -> None:
        if not self.active:
            return
        cid = id(cell)
        path = self._paths.get(cid, "")
        native, op = self._native[cid]
        if not self.policy.wants_name(path, op):
            return
        call = self._next_call("backward", path)
        self._emit_call("module", path, native, op, call, 0, "backward", self.next_event(),
                        grad_output, grad_input, "")

    @_guard
    def _param_grad(self, name: str, grad: Any) -> None:
        if not self.active or name in self._grad_names or not self.policy.wants_name(name):
            return
        self._grad_names.add(name)
        self._emit_one(Record(kind="grad", op="grad", module=name,
                              direction="backward", role="grad", source="autodiff"), grad)

    def _ops_quiet(self) -> bool:
        """Whether Tensor operators go unobserved now (the capture's own work, or outside the
        captured steps; a Cell replayed by the backward stop is always observed)."""
        if self._bstop is not None and self._bstop.replay is not None:
            return False
        return self._busy or not self.active

    def _observe_op(self, prim: Any, res: Any, args: tuple[Any, ...]) -> None:
        """A primitive ran (reported by the JIT context, or a Tensor operator computed what
        ``prim`` computes): record it and, when asked, stop on a non-finite result."""
        self._ops_seen += 1
        if self._bstop is not None and self._bstop.replay is not None:
            self._bstop.replay.observe(prim, res, args)  # a Cell replayed by the backward stop
            return
        self._op(prim, res, args)
        if self.stop_on_nonfinite:
            from netparity.frameworks.mindspore.nonfinite import check_op

            check_op(self, prim, res, args)

    @_guard
    def _op(self, prim: Any, res: Any, args: tuple[Any, ...]) -> None:
        if not self.active:
            return
        if not any(True for _ in _flatten(res, "", self._is_tensor)):
            return  # metadata primitives (typeof, Print...) compute no tensor
        frame = self._stack[-1] if self._stack else None
        native = str(getattr(prim, "name", type(prim).__name__))
        op = canonical_op("mindspore", native)
        path = frame.path if frame is not None else ""
        if not self.policy.wants_name(path, op, native):
            if frame is not None:
                frame.ops += 1
            return
        direction = "update" if (self._update > 0) else "forward"
        if direction not in self.policy.directions and direction != "update":
            return
        call = frame.ops if frame is not None else 0
        if frame is not None:
            frame.ops += 1
        if frame is not None and frame.state:
            args = tuple(frame.state.get(id(a), a) for a in args)
        self._emit_call("op", path, native, op, call, frame.call if frame else 0, direction,
                        self.next_event(), args, res, user_source(self._skip),
                        self._op_extra(prim, args))

    def _op_extra(self, prim: Any, args: tuple[Any, ...]) -> dict[str, Any]:
        """The primitive's class, constructor arguments and non-tensor call arguments (see
        :mod:`.opcall`): what op-level replay needs to make the call again."""
        from netparity.frameworks.mindspore.opcall import call_scalars, prim_info

        hit = self._prim_info.get(id(prim))
        if hit is None or hit[0] is not prim:
            # primitives are mostly long-lived singletons: describe each once (kept alive here,
            # so its id is not reused while the capture runs)
            hit = (prim, prim_info(prim))
            if len(self._prim_info) < 4096:
                self._prim_info[id(prim)] = hit
        info = hit[1]
        scalars, missing = call_scalars(args, self._is_tensor)
        if missing:
            info = {**info, "unrecorded": [*info.get("unrecorded", []), *missing]}
        out: dict[str, Any] = {"prim": info}
        if scalars:
            out["scalars"] = scalars
        return out


def _make_op_context(cap: MindSporeCapture) -> Any:
    from mindspore.graph.jit_context import JitContext

    class OpContext(JitContext):
        """JIT context that only observes: every method returns MindSpore's own result."""

        def run_op(self, prim: Any, prim_res: Any, *args: Any) -> Any:
            cap._observe_op(prim, prim_res, args)
            return prim_res

        def prepare_op(self, prim_name: str, prim_res: Any, *args: Any) -> Any:
            return prim_res, [], [], args

        def run_graph(self, phase: str, prim_res: Any, *args: Any) -> Any:
            return prim_res

        def pass_trace_node(self, origin_obj: Any, new_obj: Any) -> None:
            return None

        def is_nested(self) -> bool:
            return False

        def default_output(self) -> Any:  # only used when compiled is True, which it never is
            from mindspore import Tensor

            return Tensor(0)

    return OpContext()


def _OpContext(cap: MindSporeCapture) -> Any:  # noqa: N802  (reads like the class it builds)
    return _make_op_context(cap)


def capture(
    model: Any,
    path: str | os.PathLike[str],
    *,
    level: str = "module",
    payload: str = "stats",
    steps: Any = None,
    ranks: Any = None,
    include: list[str] | str | None = None,
    exclude: list[str] | str | None = None,
    directions: tuple[str, ...] = ("forward", "backward"),
    max_bytes: int | None = None,
    overwrite: bool = False,
    optimizer: Any = None,
    rank: int | None = None,
    world_size: int | None = None,
    manifest: dict[str, Any] | None = None,
    launch_blocking: bool = False,
    stop_on_nonfinite: bool = False,
    scaler: Any = None,
    timing: bool = False,
    loader: Any = None,
) -> MindSporeCapture:
    """Capture a MindSpore network's Cells, primitives, loss, parameters and gradients.

    Args:
        model: the ``nn.Cell`` to observe (its sub-Cells get paths from ``cells_and_names()``).
        path: trace directory.
        level: ``module`` (Cells), ``op`` (primitives) or ``both``.
        payload: ``stats``, ``tensors`` or ``hash``.
        steps, ranks: which steps/ranks to capture (``None``: all; ``"0,2-4"`` accepted).
        include, exclude: glob patterns on Cell paths / op names / parameter names.
        directions: ``forward`` and/or ``backward``.
        max_bytes: payload byte budget.
        overwrite: replace an existing trace of this rank.
        optimizer: the optimizer Cell; its calls are marked ``direction="update"``.
        rank, world_size: default from ``RANK_ID`` / ``RANK_SIZE`` (MindSpore's variables).
        manifest: extra manifest facts.
        launch_blocking: PyNative only: call ``mindspore.runtime.launch_blocking()`` when the
            hooks are installed, so operators run synchronously. Every host statistics read
            otherwise waits for PyNative's asynchronous executor (~1 ms per tensor on CPU, and
            it serialises the pipeline); with it, a captured ResNet-50 step (CPU, batch 8,
            112x112) took 16.0 s instead of 22.7 s, against 13.8 s uninstrumented (15.3 s
            uninstrumented in blocking mode; benchmarks/capture_overhead_mindspore.py).
            MindSpore cannot switch it off again, so it stays on for the rest of the process;
            numbers do not change. Off by default; the parity workflow turns it on for
            MindSpore on CPU.
        stop_on_nonfinite: stop at the first primitive whose output holds NaN/Inf
            (:class:`~netparity.capture.nonfinite.NonFiniteStop`, its inputs saved under
            ``path/nonfinite/``); needs ``level="op"`` or ``"both"`` (PyNative). In backward,
            the first Cell whose input gradient goes non-finite from finite output gradients
            stops the run, naming the primitive whose backward did it (:mod:`.backward_stop`).
        scaler: a loss-scale Cell to read (``TrainOneStepWithLossScaleCell`` -- e.g. the
            ``_train_network`` that ``Model(..., loss_scale_manager=...)`` builds -- or a
            ``DynamicLossScaleUpdateCell``); those inside ``model`` are found without it. The
            scale and overflow of each call are recorded (see :mod:`.loss_scale`).
        timing: PyNative only: also record the light timing of each step
            (``netparity.profile``'s records: phases, Cell times; ``netparity perf`` reads
            them) into the same trace, numbered by this capture's steps. The optimizer Cell's
            call ends a timed step (without ``optimizer``: :meth:`step`). The times include the
            capture's own work: compare them only with runs captured the same way.
        loader: with ``timing``, the dataset/iterator whose ``next()`` waits are the data
            phase (as for ``profile``).

    Returns:
        A :class:`MindSporeCapture`; use it with ``with`` or as a decorator.

    Example:
        >>> import numpy as np, mindspore as ms, tempfile
        >>> net = ms.nn.Dense(3, 2)
        >>> with capture(net, tempfile.mkdtemp(), level="both") as cap:
        ...     cap.record_loss(net(ms.Tensor(np.ones((1, 3), np.float32))).sum())
        ...     cap.step()
    """
    if isinstance(include, str):
        include = [include]
    if isinstance(exclude, str):
        exclude = [exclude]
    policy = CapturePolicy(level=level, payload=payload, steps=steps, ranks=ranks,
                           include=include, exclude=exclude, directions=tuple(directions),
                           max_bytes=max_bytes)
    if stop_on_nonfinite and not policy.ops:
        raise UsageError("MindSpore: stop_on_nonfinite needs level='op' or 'both' (it checks "
                         "each primitive's outputs)")
    if rank is None:
        rank = int(os.environ.get("RANK_ID", "0") or 0)
    if world_size is None:
        world_size = int(os.environ.get("RANK_SIZE", "1") or 1)
    if not timing:
        return MindSporeCapture(model, path, policy, optimizer=optimizer, rank=rank,
                                world_size=world_size, manifest=manifest, overwrite=overwrite,
                                launch_blocking=launch_blocking,
                                stop_on_nonfinite=stop_on_nonfinite, scaler=scaler)
    import mindspore as ms

    from netparity.capture.timing import loader_facts
    from netparity.frameworks.mindspore.timing import MindSporeTiming, timing_facts

    if ms.get_context("mode") != ms.PYNATIVE_MODE:
        raise UsageError("capture(..., timing=True) needs PyNative mode (GRAPH_MODE compiles "
                         "the hooks into the graph): time a GRAPH_MODE run with "
                         "netparity.profile(train_cell, DIR) instead")
    cap = MindSporeCapture(model, path, policy, optimizer=optimizer, rank=rank,
                           world_size=world_size,
                           manifest={**timing_facts(model), "timing": "light",
                                     "loader": loader_facts(loader), **(manifest or {})},
                           overwrite=overwrite, launch_blocking=launch_blocking,
                           stop_on_nonfinite=stop_on_nonfinite, scaler=scaler)
    if cap.writer is not None:  # (a rank the policy leaves out writes nothing)
        cap._timer = MindSporeTiming(model, path, optimizer=optimizer, loader=loader,
                                     writer=cap.writer, step_of=lambda: cap.step_no,
                                     rank=cap.rank)
    return cap
