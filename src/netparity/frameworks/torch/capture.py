"""Capture what a PyTorch model computes: module boundaries, every aten op, gradients, updates.

Mechanisms (chosen so that capture never changes the run and survives in-place code):

* **Module level.** Forward pre/post hooks (``with_kwargs=True``, ``always_call=True``) record
  inputs and outputs. Backward gradients use *tensor* hooks registered on the module's outputs
  (gradient w.r.t. the outputs, role ``input``) and inputs (gradient w.r.t. the inputs, role
  ``output``) rather than ``register_full_backward_hook``, whose identity autograd function turns
  outputs into views and breaks ``nn.ReLU(inplace=True)`` after batch-norm. A tensor hook
  registered before an in-place update receives the gradient of the value before the update,
  which is exactly the module's input/output value.
* **Op level.** A ``TorchDispatchMode`` sees every aten op below autograd (forward, backward and
  ``optimizer.step()``) without whitelists or patching. Forward ops are attributed to the
  innermost running module (a stack kept by the module hooks). Backward ops are attributed by
  walking, in each module's forward post-hook, the autograd nodes its outputs depend on (down to
  the nodes of its inputs) and giving each not-yet-claimed node a pre-hook/post-hook pair that
  sets the "current backward module"; inner modules' hooks run first, so they claim their own
  nodes and the parent keeps the rest (e.g. a residual add).
* **Statistics** are computed on the tensor's device by :class:`TorchAdapter` with dispatch
  disabled (so they are never captured themselves), batched and fetched in one transfer per
  batch. A tensor over the same memory (address, shape, strides, dtype) as a recently
  recorded tensor that is still alive, with neither written since (version counters), reuses
  its statistics instead of recomputing them. Two writes are predicted instead of re-read: an
  exact ``nn.ReLU(inplace=True)``'s output (its input's pass also yields the statistics of
  ``max(x, 0)``; the module feeding such a ReLU is learned after one call) and a block input's
  total gradient (autograd adds its contributions in place into the first one).

Example:
    >>> import tempfile, torch
    >>> from netparity.frameworks.torch.capture import capture
    >>> from netparity.trace import open_trace
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> d = tempfile.mkdtemp()
    >>> with capture(model, d, optimizer=opt) as cap:
    ...     loss = model(torch.ones(2, 4)).sum()
    ...     cap.record_loss(loss)
    ...     loss.backward(); opt.step(); cap.step()
    >>> sorted({r.module for r in open_trace(d).records(kind="module")})
    ['', '0', '1']
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import weakref
from collections.abc import Callable, Container, Iterable
from typing import Any

import torch
import torch.optim.optimizer as _optim_mod
from torch.utils._python_dispatch import TorchDispatchMode

from netparity.capture.policy import CapturePolicy
from netparity.capture.session import CaptureSession, user_source
from netparity.errors import UsageError
from netparity.frameworks.torch.adapter import TorchAdapter
from netparity.trace.schema import Record
from netparity.trace.vocab import canonical_op

_TORCH_DIR = os.path.dirname(torch.__file__)
_ReLU = torch.nn.ReLU
_SKIP = (_TORCH_DIR,)
# Ops that write into an input without declaring it in their schema, so autograd's version
# counter does not move: training-mode batch norm updates running_mean/running_var in place.
# The statistics/payload reuse keyed on (tensor, version) must forget their inputs afterwards,
# or the buffers recorded after the step would repeat the values from before the update.
_SILENT_WRITERS = frozenset({"native_batch_norm", "cudnn_batch_norm", "miopen_batch_norm"})


def _in_grad_seed() -> bool:
    """True inside ``torch.autograd``'s ``_make_grads`` (the seed of ``backward()``)."""
    f: Any = sys._getframe(2)
    while f is not None:
        if f.f_code.co_name == "_make_grads" and f.f_code.co_filename.startswith(_TORCH_DIR):
            return True
        f = f.f_back
    return False
_Tensor = torch.Tensor

try:
    _graph_task_id = torch._C._current_graph_task_id
except AttributeError:  # pragma: no cover - very old torch
    def _graph_task_id() -> int:
        return -1


def _in_backward() -> bool:
    return _graph_task_id() != -1


def _native_name(cls: type) -> str:
    mod = cls.__module__ or ""
    if mod.startswith("torch.nn.modules."):
        return f"torch.nn.{cls.__name__}"
    return f"{mod}.{cls.__qualname__}"


def _flatten(obj: Any, prefix: str, out: list[tuple[str, torch.Tensor]],
             scalars: dict[str, Any] | None = None, depth: int = 0) -> None:
    """Collect tensors of a nested structure with their argument paths (``0``, ``1.2``, ``kw.x``)."""
    if isinstance(obj, _Tensor):
        out.append((prefix, obj))
    elif isinstance(obj, (list, tuple)) and depth < 6:
        for i, v in enumerate(obj):
            _flatten(v, f"{prefix}.{i}" if prefix else str(i), out, scalars, depth + 1)
    elif isinstance(obj, dict) and depth < 6:
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out, scalars, depth + 1)
    elif scalars is not None and (obj is None or isinstance(obj, (bool, int, float, str))):
        scalars[prefix] = obj
    elif scalars is not None and isinstance(obj, (torch.dtype, torch.device, torch.memory_format,
                                                  torch.layout)):
        scalars[prefix] = str(obj)


class _Call:
    """One module call: forward identity and, once its backward starts, backward identity."""

    __slots__ = ("path", "module", "native", "op", "fwd_call", "event", "nops", "bwd_call",
                 "bwd_event", "bwd_nops", "recompute", "source", "in_nodes", "in_edges", "in_acc",
                 "relu")

    def __init__(self, path: str, module: torch.nn.Module, native: str, op: str):
        self.path = path
        self.module = module
        self.native = native
        self.op = op
        self.fwd_call = 0
        self.event = -1
        self.nops = 0
        self.bwd_call = -1
        self.bwd_event = -1
        self.bwd_nops = 0
        self.recompute = False
        self.source = ""
        self.in_nodes: set[Any] = set()
        # (arg, grad_fn or None, output_nr, tensor) of inputs that need a gradient
        self.in_edges: list[tuple[str, Any, int, Any]] = []
        # arg -> [contributions expected, arrived, [(gradient, its version) so far]]
        self.in_acc: dict[str, list[Any]] = {}
        # an in-place ReLU: (statistics of its output, its input tensor, the input's version)
        self.relu: tuple[Any, torch.Tensor, int] | None = None


class _TLS(threading.local):
    def __init__(self) -> None:
        self.stack: list[_Call] = []  # forward module stack
        self.bwd: list[_Call | None] = []  # backward module context (node pre/post hooks)


class _OpMode(TorchDispatchMode):
    """Dispatch mode forwarding every aten op to the capture."""

    def __init__(self, cap: TorchCapture):
        super().__init__()
        self.cap = cap

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return self.cap._on_op(func, args, kwargs or {})


class TorchCapture(CaptureSession):
    """A capture of a PyTorch model; use :func:`capture` to create one.

    Context manager (hooks installed on enter; removed and the trace closed on exit) and
    decorator (hooks installed for each call of the function; the trace is flushed after each
    call and closed by :meth:`close` or at interpreter exit).
    """

    def __init__(
        self,
        model: torch.nn.Module | None,
        path: str | os.PathLike[str],
        policy: CapturePolicy,
        *,
        optimizer: torch.optim.Optimizer | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        manifest: dict[str, Any] | None = None,
        overwrite: bool = False,
        global_mode: bool = False,
        auto_step: bool = False,
        detect_loss: bool = False,
    ):
        if model is not None and not isinstance(model, torch.nn.Module):
            raise UsageError(f"capture expects a torch.nn.Module, got {type(model).__name__}")
        if rank is None or world_size is None:
            r, w = _dist_rank()
            rank = r if rank is None else rank
            world_size = w if world_size is None else world_size
        self.adapter_t = TorchAdapter()
        super().__init__(path, self.adapter_t, policy, rank=rank, world_size=world_size,
                         manifest=manifest, overwrite=overwrite)
        self.model = model
        self.optimizer = optimizer
        self.global_mode = global_mode
        self.auto_step = auto_step
        self.detect_loss = detect_loss
        self._names: dict[int, str] = {}
        self._param_names: dict[int, str] = {}
        self._roots = 0
        if model is not None:
            self._name_tree(model, "")
        self._tls = _TLS()
        self._busy = False
        self._installed = False
        self._closed = False
        self._pid = os.getpid()
        self._hooks: list[Any] = []  # module/optimizer hook handles (until uninstall)
        self._step_hooks: list[Any] = []  # tensor/node hook handles (until step end)
        self._mode: _OpMode | None = None
        self._on = self.active
        self._fwd_calls: dict[str, int] = {}
        self._bwd_calls: dict[str, int] = {}
        self._hooked: set[str] = set()  # paths whose backward hooks exist this step
        self._claimed: dict[Any, _Call] = {}
        # statistics reuse: memory key -> (weakref of the tensor, its version, statistics
        # handle, snapshot, handle of max(t, 0) or None, the record that computed them or None)
        self._seen: dict[Any, tuple[Any, int, Any, Any, Any, Record | None]] = {}
        # (module path, forward call) -> output args that feed an in-place ReLU (learned; kept
        # across steps)
        self._relu_feeds: dict[tuple[str, int], set[str]] = {}
        # summed input gradients: ids of the parts -> ([(weakref, version)], statistics)
        self._sums: dict[tuple[int, ...], tuple[list[tuple[Any, int]], Any]] = {}
        # id of an autograd node -> the (module call, [(gradient index, input arg)]) of each
        # module-input hook on it, in hook order; taken by the node's first hook to run
        self._node_edges: dict[int, list[tuple[_Call, list[tuple[int, str]]]]] = {}
        self._outside_fwd = 0
        self._outside_bwd = 0
        self._in_update = 0
        self._update_ops = 0
        self._update_no = 0
        self._params_done = -1
        self._grads_seen: dict[str, int] = {}
        self._custom_calls: dict[str, int] = {}
        self._op_names: dict[Any, tuple[str, str]] = {}
        self._canon_mod: dict[type, tuple[str, str]] = {}
        ref = weakref.ref(self)

        def in_child() -> None:  # a forked data-loader worker must not record into our writer
            c = ref()
            if c is not None:
                c._on = False

        os.register_at_fork(after_in_child=in_child)

    # ---- naming ----------------------------------------------------------------------------
    def _name_tree(self, root: torch.nn.Module, prefix: str) -> None:
        for name, m in root.named_modules(prefix=prefix):
            self._names.setdefault(id(m), name)
        for name, p in root.named_parameters(prefix=prefix):
            self._param_names.setdefault(id(p), name)

    def _name_of(self, module: torch.nn.Module) -> str:
        n = self._names.get(id(module))
        if n is not None:
            return n
        # global mode: a module seen for the first time; a root (nothing running) names its tree
        if not self._tls.stack:
            prefix = "" if self._roots == 0 else type(module).__name__
            self._roots += 1
            self._name_tree(module, prefix)
            return self._names[id(module)]
        parent = self._tls.stack[-1].path
        n = f"{parent}.<{type(module).__name__}>" if parent else f"<{type(module).__name__}>"
        self._names[id(module)] = n
        return n

    def _module_names(self, module: torch.nn.Module) -> tuple[str, str]:
        t = type(module)
        hit = self._canon_mod.get(t)
        if hit is None:
            hit = (_native_name(t), canonical_op("torch", t.__name__))
            self._canon_mod[t] = hit
        return hit

    # ---- install / uninstall ---------------------------------------------------------------
    def install(self) -> TorchCapture:
        """Install hooks (and the dispatch mode for op level). Idempotent."""
        if self._installed:
            return self
        if self._closed:
            raise UsageError("this capture is closed; create a new one")
        self._installed = True
        try:
            mm = torch.nn.modules.module
            if self.global_mode:
                self._hooks.append(mm.register_module_forward_pre_hook(self._global_pre))
                self._hooks.append(mm.register_module_forward_hook(
                    self._global_post, with_kwargs=True, always_call=True))
            elif self.model is not None:
                for m in self.model.modules():
                    path = self._names[id(m)]
                    self._hooks.append(m.register_forward_pre_hook(
                        functools.partial(self._pre_hook, path), with_kwargs=True))
                    self._hooks.append(m.register_forward_hook(
                        functools.partial(self._post_hook, path), with_kwargs=True,
                        always_call=True))
                # Parameter gradients as backward produces them (before any unscaling, clipping
                # or zeroing by the training loop): the same moment MindSpore's
                # Parameter.register_hook sees, so loss-scaled runs compare like for like.
                for name, prm in self.model.named_parameters():
                    if prm.requires_grad:
                        self._hooks.append(prm.register_post_accumulate_grad_hook(
                            functools.partial(self._acc_grad, name)))
            om = _optim_mod
            self._hooks.append(om.register_optimizer_step_pre_hook(self._opt_pre))
            self._hooks.append(om.register_optimizer_step_post_hook(self._opt_post))
            if self.policy.ops:
                self._mode = _OpMode(self)
                self._mode.__enter__()
        except BaseException:
            self.uninstall()
            raise
        return self

    def uninstall(self) -> None:
        """Remove every hook and pop the dispatch mode. Safe to call twice."""
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(None, None, None)
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        self._clear_step_hooks()
        self._tls.stack.clear()
        self._tls.bwd.clear()
        self._installed = False

    def _clear_step_hooks(self) -> None:
        for h in self._step_hooks:
            h.remove()
        self._step_hooks.clear()
        self._claimed.clear()
        self._hooked.clear()
        self._seen.clear()
        self._sums.clear()
        self._node_edges.clear()

    def close(self) -> None:
        """Uninstall, write everything pending and close the trace. Safe to call twice."""
        if self._closed:
            return
        if os.getpid() != self._pid:  # a forked child (data-loader worker) owns nothing
            self._closed = True
            return
        self.uninstall()
        self._closed = True
        self._busy = True
        try:
            with torch._C._DisableTorchDispatch():
                super().close()
        finally:
            self._busy = False

    # ---- recording core --------------------------------------------------------------------
    def _source(self) -> str:
        return user_source(_SKIP)

    def _emit_t(self, rec: Record, t: torch.Tensor, relu: bool = False) -> Any:
        """Like :meth:`CaptureSession.emit`, with statistics reuse for unchanged tensors; with
        ``relu``, a tensor read now also yields the statistics of ``max(t, 0)``. Returns the
        reuse-cache entry that describes ``t`` (``None`` when nothing is cached)."""
        if self.writer is None:
            return None
        a = self.adapter_t
        try:
            ver = t._version
        except RuntimeError:  # inference tensors have no version counter
            ver = None
        key = _reuse_key(t)
        hit = self._seen.get(key) if ver is not None else None
        # The cached tensor must still be alive (so its memory cannot have been reused) and
        # neither it nor this tensor may have been written since (both version counters).
        src = hit[0]() if hit is not None else None
        p = self.policy
        if hit is not None and src is not None and hit[1] == ver and (
                src is t or src._version == ver):
            handle, snap, rh, prod = hit[2], hit[3], hit[4], hit[5]
        else:
            hit = None
            rh = None
            if relu and not (p.tensors or p.hashes):
                handle, rh = a.stats_handle_relu(t)
            else:
                handle = a.stats_handle(t)
            snap = None
            prod = rec
        payload = None
        nbytes = 0
        if p.tensors or p.hashes:
            size = t.numel() * t.element_size()
            if p.hashes or p.max_bytes is None or self.payload_bytes + size <= p.max_bytes:
                if snap is None:
                    snap = a.snapshot(t)
                payload, nbytes = snap
                if p.tensors:
                    self.payload_bytes += nbytes
            else:
                rec.extra["payload_skipped"] = "max_bytes"
        if ver is not None and (hit is None or hit[3] is not snap):
            # bounded: reuse is almost always between neighbouring records
            if len(self._seen) > 1024:
                self._seen.clear()
            hit = (weakref.ref(t), ver, handle, snap, rh, prod)
            self._seen[key] = hit
        self._queue(rec, t, handle, payload, nbytes)
        return hit

    def _queue(self, rec: Record, t: torch.Tensor, handle: Any, payload: Any = None,
               nbytes: int = 0) -> None:
        """Queue ``rec`` describing ``t`` (dtype, shape) with its statistics ``handle``."""
        rec.dtype = self.adapter_t.dtype_name(t)
        rec.shape = tuple(t.shape)
        self._enqueue(rec, handle, payload, nbytes)

    def _emit_all(self, make: Callable[[str], Record], items: Iterable[tuple[str, torch.Tensor]],
                  relu: Container[str] = ()) -> Any:
        """Record each ``(arg, tensor)`` of ``items`` (those whose arg is in ``relu`` with the
        statistics of their ReLU too); returns the last one's reuse-cache entry."""
        busy = self._busy
        self._busy = True
        entry = None
        try:
            # (no no_grad(): statistics and snapshots work on detached tensors, which build no
            # graph, and it costs more than a whole small-tensor record)
            with torch._C._DisableTorchDispatch():
                for arg, t in items:
                    entry = self._emit_t(make(arg), t, arg in relu)
        finally:
            self._busy = busy
        return entry

    # ---- module hooks ----------------------------------------------------------------------
    def _global_pre(self, module: torch.nn.Module, args: Any) -> None:
        if self._busy or os.getpid() != self._pid:
            return
        self._pre(self._name_of(module), module, args, {})

    def _global_post(self, module: torch.nn.Module, args: Any, kwargs: Any, out: Any) -> None:
        if self._busy or os.getpid() != self._pid:
            return
        st = self._tls.stack
        if not st or st[-1].module is not module:
            return
        info = st[-1]
        if kwargs and self._on and not info.recompute and self.policy.modules:
            # global pre-hooks get no keyword arguments: record them here
            self._record_module(info, kwargs, "input", "kw")
        self._post(info.path, module, out)
        if (self.detect_loss and not st and not info.recompute and self._on
                and isinstance(module, torch.nn.modules.loss._Loss)
                and isinstance(out, _Tensor)):
            self.record_loss(out)

    def _pre_hook(self, path: str, module: torch.nn.Module, args: Any, kwargs: Any) -> None:
        if self._busy:
            return None
        self._pre(path, module, args, kwargs)
        return None

    def _post_hook(self, path: str, module: torch.nn.Module, args: Any, kwargs: Any,
                   out: Any) -> None:
        if self._busy:
            return None
        self._post(path, module, out)
        return None

    def _pre(self, path: str, module: torch.nn.Module, args: Any, kwargs: Any) -> None:
        native, op = self._module_names(module)
        info = _Call(path, module, native, op)
        info.recompute = _in_backward()  # forward re-run inside backward: checkpointing
        p = self.policy
        if self._on and not info.recompute:
            info.fwd_call = self._fwd_calls.get(path, 0)
            self._fwd_calls[path] = info.fwd_call + 1
            info.event = self.next_event()
            wanted = p.wants_name(path, op)
            if p.modules and wanted:
                info.source = self._source()
                if p.wants_direction("forward"):
                    if (type(module) is _ReLU and module.inplace and not kwargs
                            and len(args) == 1 and isinstance(args[0], _Tensor)
                            and not (p.tensors or p.hashes)):
                        self._relu_input(info, args[0])
                    else:
                        self._record_module(info, args, "input", "")
                    if kwargs:
                        self._record_module(info, kwargs, "input", "kw")
        if self._on and p.wants_direction("backward") and torch.is_grad_enabled():
            # (under no_grad -- e.g. the first pass of a reentrant checkpoint -- this call
            # builds no graph, so it gets no gradient hooks)
            fresh = path not in self._hooked
            if fresh or not info.recompute:
                tensors: list[tuple[str, torch.Tensor]] = []
                _flatten(args, "", tensors)
                if kwargs:
                    _flatten(kwargs, "kw", tensors)
                for arg, t in tensors:
                    if t.requires_grad:
                        if p.modules and p.wants_name(path, op):
                            # resolved in _post into hooks on the edges that feed this input
                            info.in_edges.append((arg, t.grad_fn, t.output_nr, t))
                        if p.ops and t.grad_fn is not None:
                            info.in_nodes.add(t.grad_fn)
        self._tls.stack.append(info)

    def _post(self, path: str, module: torch.nn.Module, out: Any) -> None:
        st = self._tls.stack
        if not st or st[-1].module is not module:
            return
        info = st.pop()
        if out is None or not self._on:
            return
        p = self.policy
        if (not info.recompute and p.modules and p.wants_direction("forward")
                and p.wants_name(path, info.op)
                and (info.relu is None or not self._relu_output(info, out))):
            self._record_module(info, out, "output", "",
                                self._relu_feeds.get((path, info.fwd_call), ()))
        if not p.wants_direction("backward"):
            return
        fresh = path not in self._hooked
        if info.recompute and not fresh:
            return  # non-reentrant checkpoint: the original graph already carries the hooks
        tensors: list[tuple[str, torch.Tensor]] = []
        _flatten(out, "", tensors)
        roots = []
        for arg, t in tensors:
            if t.requires_grad:
                if p.modules and p.wants_name(path, info.op):
                    self._step_hooks.append(t.register_hook(
                        functools.partial(self._grad_hook, info, "input", arg)))
                if t.grad_fn is not None:
                    roots.append(t.grad_fn)
        if info.in_edges:
            self._hook_input_grads(info, tensors)
        if any(t.requires_grad for _, t in tensors):
            self._hooked.add(path)
        if p.ops and roots:
            self._claim(info, roots)

    def _record_module(self, info: _Call, obj: Any, role: str, prefix: str,
                       relu: Container[str] = ()) -> Any:
        """Record the tensors of a forward input/output structure; returns the last one's
        reuse-cache entry (see :meth:`_emit_all`)."""
        tensors: list[tuple[str, torch.Tensor]] = []
        _flatten(obj, prefix, tensors)
        if not tensors:
            return None

        return self._emit_all(lambda arg: _fwd_record(info, role, arg), tensors, relu)

    def _relu_input(self, info: _Call, t: torch.Tensor) -> None:
        """Record the input of an exact ``nn.ReLU(inplace=True)`` and keep the statistics of
        ``max(t, 0)`` for its output. When the input's statistics were reused from the module
        that produced it, without the ReLU's, learn that its output feeds a ReLU: from its next
        call on, its own pass computes both."""
        entry = self._record_module(info, (t,), "input", "", ("0",))
        if entry is None:
            return
        if entry[4] is not None:
            info.relu = (entry[4], t, entry[1])
            return
        prod = entry[5]
        if (prod is not None and prod.kind == "module" and prod.direction == "forward"
                and prod.role == "output" and prod.module != info.path):
            self._relu_feeds.setdefault((prod.module, prod.call), set()).add(prod.arg)

    def _relu_output(self, info: _Call, out: Any) -> bool:
        """Record an in-place ReLU's output from the statistics read with its input; ``False``
        (nothing recorded) unless ``out`` is that very tensor written exactly once since."""
        rh, t, ver = info.relu  # type: ignore[misc]
        info.relu = None
        if out is not t or self.writer is None or out._version != ver + 1:
            return False
        rec = _fwd_record(info, "output", "")
        self._seen[_reuse_key(out)] = (weakref.ref(out), ver + 1, rh, None, None, rec)
        self._queue(rec, out, rh)
        return True

    def _grad_hook(self, info: _Call, role: str, arg: str, grad: torch.Tensor,
                   extra: dict[str, Any] | None = None) -> None:
        if not self._on or grad is None or self._busy:
            return None
        self._start_bwd(info)
        self._emit_all(lambda a: _bwd_record(info, role, a, extra), [(arg, grad)])
        return None

    def _hook_input_grads(self, info: _Call, outs: list[tuple[str, torch.Tensor]]) -> None:
        """Record the gradient w.r.t. each input *through this module* (what
        ``register_full_backward_hook`` reports), not the input tensor's total gradient.

        A tensor hook on an input would see the sum over every use of the tensor (a ResNet
        block's input feeds ``conv1`` and the shortcut). Instead, walk the autograd nodes between
        the module's outputs and its inputs and hook the edges that end at an input: their
        gradients, summed, are the module's contribution. In-place updates inside the module
        keep working because the input's node is taken before the module runs. An output that
        *is* an input (identity, in-place activation without a node of its own) passes the
        output's gradient through.
        """
        keys: dict[tuple[int, int], str] = {}
        leaves: dict[int, str] = {}
        stop: set[Any] = set()
        for arg, node, nr, t in info.in_edges:
            if node is None:
                leaves[id(t)] = arg
            else:
                keys[(id(node), nr)] = arg
                stop.add(node)
        info.in_edges = []  # drop tensor references
        acc = info.in_acc
        hooks = self._step_hooks
        todo: list[Any] = []
        for _, t in outs:
            if not t.requires_grad:
                continue
            if t.grad_fn is None:
                continue
            hit = keys.get((id(t.grad_fn), t.output_nr))
            if hit is not None:  # the output is the input itself: gradient passes through
                acc.setdefault(hit, [0, 0, []])[0] += 1
                hooks.append(t.register_hook(functools.partial(self._in_grad_tensor, info, hit)))
            else:
                todo.append(t.grad_fn)
        edges: dict[Any, list[tuple[int, str]]] = {}
        seen: set[Any] = set()
        budget = 100_000  # bounds the walk if the outputs depend on a huge outside graph
        while todo and budget:
            node = todo.pop()
            if node in seen or node in stop:
                continue
            seen.add(node)
            budget -= 1
            for j, (nxt, nr) in enumerate(node.next_functions):
                if nxt is None:
                    continue
                found = keys.get((id(nxt), nr))
                if found is None and leaves:
                    var = getattr(nxt, "variable", None)
                    found = leaves.get(id(var)) if var is not None else None
                if found is not None:
                    edges.setdefault(node, []).append((j, found))
                    acc.setdefault(found, [0, 0, []])[0] += 1
                elif nxt not in stop:
                    todo.append(nxt)
        for node, lst in edges.items():
            key = id(node)
            self._node_edges.setdefault(key, []).append((info, lst))
            hooks.append(node.register_hook(
                functools.partial(self._in_grad_node, info, lst, key)))

    def _in_grad_node(self, info: _Call, lst: list[tuple[int, str]], key: int,
                      grad_inputs: Any, grad_outputs: Any) -> None:
        entries = self._node_edges.pop(key, None)  # (the node's first hook to run)
        if entries is not None and len(entries) > 1:
            self._sum_with_last_part(entries, grad_inputs)
        for j, arg in lst:
            self._in_grad_part(info, arg, grad_inputs[j] if j < len(grad_inputs) else None)
        return None

    def _in_grad_tensor(self, info: _Call, arg: str, grad: torch.Tensor) -> None:
        self._in_grad_part(info, arg, grad)
        return None

    def _in_grad_part(self, info: _Call, arg: str, grad: torch.Tensor | None) -> None:
        if not self._on or self._busy:
            return
        slot = info.in_acc.get(arg)
        if slot is None:
            return
        slot[1] += 1
        if grad is not None:
            if slot[0] == 1:  # the usual case: one edge, record it now, no copy
                self._grad_hook(info, "output", arg, grad)
                return
            # Keep a reference, no copy: autograd's input buffer adds a contribution into a
            # gradient in place only when it holds the last reference (InputBuffer's
            # accumulate), which this one prevents; the version is checked anyway.
            slot[2].append((grad, grad._version))
        if slot[1] >= slot[0] and slot[2]:
            parts, slot[2] = slot[2], []
            self._record_grad_sum(info, arg, parts)

    def _sum_with_last_part(self, entries: list[tuple[_Call, list[tuple[int, str]]]],
                            grad_inputs: Any) -> None:
        """One autograd node's gradient w.r.t. a tensor that is both an inner module's input
        through one edge (a ResNet block's ``conv1``, recorded as it arrives) and the last
        contribution to an outer module's summed input gradient (the block's): describe both
        from one pass over the contributions, before the node's hooks record them in turn,
        by leaving the results where those records look first (``_seen``, ``_sums``).

        Every entry left is an exact description of tensors as they are now (the last part's
        own statistics; the sum of exactly these parts at their versions), so an entry nobody
        asks for costs only its pass."""
        p = self.policy
        if p.tensors or p.hashes or self.writer is None or not self._on or self._busy:
            return
        for info, lst in entries:
            for j, arg in lst:
                slot = info.in_acc.get(arg)
                if (slot is None or slot[0] < 2 or slot[1] + 1 != slot[0]
                        or len(slot[2]) != slot[0] - 1 or j >= len(grad_inputs)):
                    continue
                g = grad_inputs[j]
                if g is None or any(t._version != v for t, v in slot[2]):
                    continue
                grads = [t for t, _ in slot[2]]
                grads.append(g)
                ids = tuple(id(t) for t in grads)
                if ids in self._sums:  # (a container sharing the same parts)
                    continue
                with torch._C._DisableTorchDispatch():
                    hsum, hlast = self.adapter_t.stats_handle_sum_last(grads)
                if hsum is not None:
                    self._keep_sum(ids, grads, hsum)
                if hlast is not None:
                    self._seen[_reuse_key(g)] = (weakref.ref(g), g._version, hlast, None, None,
                                                 None)

    def _keep_sum(self, ids: tuple[int, ...], grads: list[torch.Tensor], handle: Any) -> None:
        """Remember the statistics ``handle`` of the sum of ``grads`` (as they are now)."""
        if len(self._sums) > 64:  # bounded: a sum is asked for right after it is made
            self._sums.clear()
        self._sums[ids] = ([(weakref.ref(g), g._version) for g in grads], handle)

    def _record_grad_sum(self, info: _Call, arg: str,
                         parts: list[tuple[torch.Tensor, int]]) -> None:
        """Record the sum of a module's gradient contributions to one input (added in arrival
        order, as autograd adds them). With statistics only, on CPU float32, the kernel reads
        the contributions and never materialises the sum (one read of each instead of a copy,
        an addition and a read of the sum)."""
        grads = [g for g, _ in parts]
        if any(g._version != v for g, v in parts):
            # only code that writes gradients in place inside backward gets here
            self._grad_hook(info, "output", arg, _sum_in_order(grads),
                            extra={"warning": "a gradient contribution was written in place "
                                              "during backward; this sum may be off"})
            return
        p = self.policy
        if not (p.tensors or p.hashes) and self.writer is not None:
            # A container and its first child share an input and so the same contributions
            # (a ResNet stage and its first block): one sum serves both.
            key = tuple(id(g) for g in grads)
            hit = self._sums.get(key)
            if hit is not None and all(r() is g and g._version == v
                                       for (r, v), g in zip(hit[0], grads)):
                handle = hit[1]
            else:
                with torch._C._DisableTorchDispatch():  # (the caller checked _on and _busy)
                    handle = self.adapter_t.stats_handle_sum(grads)
                self._keep_sum(key, grads, handle)
            if handle is not None:
                self._start_bwd(info)
                rec = _bwd_record(info, "output", arg, None)
                self._queue(rec, grads[0], handle)
                # Autograd adds the later contributions into the first one in place when
                # nothing else holds its storage (InputBuffer), so the input's total gradient
                # -- seen next by the hooks of whatever produced the input -- is this very sum
                # when it lives in the first part's memory with exactly len(parts) - 1 writes
                # since: every one of these parts is added to that buffer, so one more write
                # (a contribution from elsewhere, an in-place hook) or a copy fails the check.
                first, v0 = parts[0]
                self._seen[_reuse_key(first)] = (weakref.ref(first), v0 + len(parts) - 1,
                                                 handle, None, None, rec)
                return
        self._grad_hook(info, "output", arg, _sum_in_order(grads))

    def _start_bwd(self, info: _Call) -> None:
        if info.bwd_call < 0:
            info.bwd_call = self._bwd_calls.get(info.path, 0)
            self._bwd_calls[info.path] = info.bwd_call + 1
            info.bwd_event = self.next_event()

    # ---- backward attribution for ops ------------------------------------------------------
    def _claim(self, info: _Call, roots: list[Any]) -> None:
        """Give the autograd nodes behind ``roots`` (not claimed by inner modules) to ``info``."""
        claimed = self._claimed
        stop = info.in_nodes
        todo = list(roots)
        pre = functools.partial(self._node_pre, info)
        post = self._node_post
        hooks = self._step_hooks
        seen: set[Any] = set()
        while todo:
            node = todo.pop()
            if node is None or node in stop or node in seen:
                continue
            seen.add(node)
            owner = claimed.get(node)
            if owner is not None:
                # an inner module's subgraph: resume below its inputs instead of re-walking it
                todo.extend(owner.in_nodes)
                continue
            claimed[node] = info
            hooks.append(node.register_prehook(pre))
            hooks.append(node.register_hook(post))
            for nxt, _ in node.next_functions:
                if nxt is not None:
                    todo.append(nxt)

    def _node_pre(self, info: _Call, grad_outputs: Any) -> None:
        self._start_bwd(info)
        self._tls.bwd.append(info)
        return None

    def _node_post(self, grad_inputs: Any, grad_outputs: Any) -> None:
        if self._tls.bwd:
            self._tls.bwd.pop()
        return None

    # ---- ops -------------------------------------------------------------------------------
    def _names_of_op(self, func: Any) -> tuple[str, str]:
        hit = self._op_names.get(func)
        if hit is None:
            native = str(func)
            hit = (native, canonical_op("torch", native))
            self._op_names[func] = hit
        return hit

    def _on_op(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self._busy or not self._on:
            return func(*args, **kwargs)
        tls = self._tls
        if self._in_update:
            direction = "update"
            info = None
        elif _in_backward():
            if tls.stack:  # checkpoint recomputation: a repeat of forward ops, not recorded
                return func(*args, **kwargs)
            direction = "backward"
            info = tls.bwd[-1] if tls.bwd else None
        else:
            direction = "forward"
            info = tls.stack[-1] if tls.stack else None
            if info is None and _in_grad_seed():
                # loss.backward() builds the seed gradient (ones_like) before the engine runs:
                # it belongs to the backward pass, not to the forward ops around the loss
                direction = "backward"
        p = self.policy
        if not p.wants_direction(direction):
            return func(*args, **kwargs)
        native, op = self._names_of_op(func)
        if direction == "update":
            module, mcall, idx = "", self._update_no, self._update_ops
            self._update_ops += 1
        elif info is None:
            module, mcall = "", -1
            if direction == "forward":
                idx = self._outside_fwd
                self._outside_fwd += 1
            else:
                idx = self._outside_bwd
                self._outside_bwd += 1
        elif direction == "forward":
            module, mcall, idx = info.path, info.fwd_call, info.nops
            info.nops += 1
        else:
            module, mcall, idx = info.path, info.bwd_call, info.bwd_nops
            info.bwd_nops += 1
        if not p.wants_name(module, op):
            return func(*args, **kwargs)
        scalars: dict[str, Any] = {}
        ins: list[tuple[str, torch.Tensor]] = []
        for i, a in enumerate(args):
            _flatten(a, str(i), ins, scalars)
        for k, v in kwargs.items():
            _flatten(v, f"kw.{k}", ins, scalars)
        event = self.next_event()
        source = info.source if (info is not None and info.source) else ""
        if not source:
            source = self._source()

        extra: list[dict[str, Any]] = [{"scalars": scalars}] if scalars else []

        def make(role: str, arg: str) -> Record:
            # operator scalars (alpha, stride, dim...) go on the call's first record
            return Record(kind="op", op=op, native=native, module=module, call=idx,
                          module_call=mcall, direction=direction, role=role, arg=arg,
                          event=event, source=source, extra=extra.pop() if extra else {})

        self._busy = True
        try:
            # inputs before the op: an in-place op would overwrite them
            for arg, t in ins:
                self._emit_t(make("input", arg), t)
        finally:
            self._busy = False
        out = func(*args, **kwargs)
        if native.partition(".")[2].partition(".")[0] in _SILENT_WRITERS:
            for _, t in ins:  # written without a version bump: forget their statistics
                self._seen.pop(_reuse_key(t), None)
        outs: list[tuple[str, torch.Tensor]] = []
        _flatten(out, "", outs)
        if outs:
            self._busy = True
            try:
                for arg, t in outs:
                    self._emit_t(make("output", arg), t)
            finally:
                self._busy = False
        return out

    # ---- optimizer -------------------------------------------------------------------------
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
        if self._on:
            self._record_params(opt, grads=True, params=False)

    def _opt_post(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._busy or not self._owns(opt):
            return
        self._in_update = max(0, self._in_update - 1)
        if self._on:
            self._record_params(opt, grads=False, params=True)
            self._params_done = self.step_no
        self._update_no += 1
        if self.auto_step:
            self.step()

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

    def _record_params(self, opt: torch.optim.Optimizer | None, *, grads: bool,
                       params: bool) -> None:
        if opt is not None:
            plist = [p for g in opt.param_groups for p in g["params"]]
        elif self.model is not None:
            plist = list(self.model.parameters())
        else:
            plist = []
        names = self._param_names
        pol = self.policy
        items_g: list[tuple[str, torch.Tensor]] = []
        items_p: list[tuple[str, torch.Tensor]] = []
        for prm in plist:
            name = names.get(id(prm))
            # a parameter passes when its name or its module's path does ("conv" -> conv.weight)
            if name is None or not pol.wants_name(name, name.rpartition(".")[0]):
                continue
            if (grads and prm.grad is not None and pol.wants_direction("backward")
                    and name not in self._grads_seen):
                items_g.append((name, prm.grad))
            if params:
                items_p.append((name, prm))
        if params and self.model is not None:
            # Buffers that training updates (BatchNorm running statistics) belong to the state
            # after the step; MindSpore keeps them as parameters (moving_mean/variance).
            for name, buf in self.model.named_buffers():
                if name.endswith("num_batches_tracked") or not buf.is_floating_point():
                    continue
                if pol.wants_name(name, name.rpartition(".")[0]):
                    items_p.append((name, buf))
        recs = ([_param_record("grad", name, "backward", "") for name, _ in items_g]
                + [_param_record("param", name, "update", "") for name, _ in items_p])
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

    # ---- user API --------------------------------------------------------------------------
    def record_loss(self, loss: Any) -> None:
        """Record the loss of this step (``kind="loss"``, ``op="loss"``, module ``""``)."""
        if not self._on or not isinstance(loss, _Tensor):
            return
        n = self._custom_calls.get("\0loss", 0)
        self._custom_calls["\0loss"] = n + 1
        ev = self.next_event()
        src = self._source()
        self._emit_all(lambda a: Record(kind="loss", op="loss", module="", call=n, arg=a,
                                        event=ev, source=src), [("", loss)])

    def record(self, name: str, tensor: Any, kind: str = "custom") -> None:
        """Record any tensor (or nested tuple/dict of tensors) under ``name``.

        ``kind`` is ``custom`` or ``data`` (a batch from the data pipeline).
        """
        if kind not in ("custom", "data"):
            raise UsageError(f"record kind must be 'custom' or 'data', not {kind!r}")
        if not self._on:
            return
        items: list[tuple[str, torch.Tensor]] = []
        _flatten(tensor, "", items)
        n = self._custom_calls.get(name, 0)
        self._custom_calls[name] = n + 1
        ev = self.next_event()
        src = self._source()
        self._emit_all(lambda a: Record(kind=kind, op=name, module=name, call=n, arg=a,
                                        event=ev, source=src), items)

    def step(self) -> None:
        """End of a training iteration: record parameters and gradients unless an optimizer
        step hook already did, then advance the step counter."""
        if self._on and self._params_done != self.step_no and (
            self.model is not None or self._param_names
        ):
            self._record_params(None if self.optimizer is None else self.optimizer,
                                grads=True, params=True)
        busy = self._busy
        self._busy = True
        try:
            with torch._C._DisableTorchDispatch():
                super().step()
        finally:
            self._busy = busy
        self._clear_step_hooks()
        self._fwd_calls.clear()
        self._bwd_calls.clear()
        self._custom_calls.clear()
        self._grads_seen.clear()
        self._outside_fwd = self._outside_bwd = 0
        self._update_ops = 0
        self._update_no = 0
        self._on = self.active and os.getpid() == self._pid

    def flush(self) -> None:
        busy = self._busy
        self._busy = True
        try:
            with torch._C._DisableTorchDispatch():
                super().flush()
        finally:
            self._busy = busy

    def resolve(self) -> None:
        busy = self._busy
        self._busy = True
        try:
            with torch._C._DisableTorchDispatch():
                super().resolve()
        finally:
            self._busy = busy


def _reuse_key(t: torch.Tensor) -> Any:
    """Key of the statistics-reuse cache: the memory the tensor reads, not the object. An op's
    output is often a new object (alias, view, detach) over exactly the elements of a tensor
    recorded just before, e.g. a module's output seen again as the next op's input.

    The address is ``t.data_ptr()`` (storage address plus offset), never
    ``t.untyped_storage()``: that creates a Python storage object which stays alive with the
    tensor and raises the storage's use count, and autograd then stops adding gradient
    contributions in place (its input buffer only reuses a gradient whose storage nobody else
    holds) -- the captured run would allocate a new tensor for every summed gradient."""
    try:
        return (t.data_ptr(), t.shape, t.stride(), t.dtype, t.device)
    except (RuntimeError, NotImplementedError):  # no plain storage (sparse, functional...)
        return id(t)


def _fwd_record(info: _Call, role: str, arg: str) -> Record:
    """A module forward record of ``info``'s call."""
    return Record(kind="module", op=info.op, native=info.native, module=info.path,
                  call=info.fwd_call, direction="forward", role=role, arg=arg,
                  event=info.event, source=info.source)


def _bwd_record(info: _Call, role: str, arg: str, extra: dict[str, Any] | None) -> Record:
    """A module backward record of ``info``'s backward call (started)."""
    return Record(kind="module", op=info.op, native=info.native, module=info.path,
                  call=info.bwd_call, direction="backward", role=role, arg=arg,
                  event=info.bwd_event, source=info.source, extra=dict(extra) if extra else {})


def _sum_in_order(grads: list[torch.Tensor]) -> torch.Tensor:
    """``grads[0] + grads[1] + ...`` left to right, outside autograd and dispatch capture."""
    with torch._C._DisableTorchDispatch(), torch.no_grad():
        total = grads[0].detach()
        for g in grads[1:]:
            total = total + g
    return total


def _param_record(kind: str, name: str, direction: str, arg: str) -> Record:
    return Record(kind=kind, op=kind, module=name, direction=direction, role=kind)


def _dist_rank() -> tuple[int, int]:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:
        pass
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


def capture(
    model: torch.nn.Module,
    path: str | os.PathLike[str],
    *,
    level: str = "module",
    payload: str = "stats",
    steps: Any = None,
    ranks: Any = None,
    include: Any = None,
    exclude: Any = None,
    directions: Iterable[str] = ("forward", "backward"),
    max_bytes: int | None = None,
    overwrite: bool = False,
    optimizer: torch.optim.Optimizer | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    manifest: dict[str, Any] | None = None,
) -> TorchCapture:
    """Capture ``model`` into the trace directory ``path``.

    Args:
        model: the ``torch.nn.Module`` to observe (module paths are relative to it).
        path: trace directory; ``rank{N}/`` is written inside it.
        level: ``module``, ``op`` (every aten op) or ``both``.
        payload: ``stats``, ``tensors`` (also store every tensor) or ``hash``.
        steps, ranks: which steps / ranks to capture (``"0,2-4"``, a list, or ``None`` = all).
        include, exclude: glob patterns on module paths, op names and parameter names.
        directions: ``forward`` and/or ``backward`` (updated parameters are always recorded).
        max_bytes: stop storing payloads after this many bytes (statistics continue).
        overwrite: replace an existing trace of this rank.
        optimizer: the optimizer whose ``step()`` delimits the update; when ``None`` any
            optimizer holding the model's parameters is detected by a global step hook.
        rank, world_size: default to ``torch.distributed`` or the ``RANK``/``WORLD_SIZE``
            environment variables.
        manifest: extra facts for ``manifest.json`` (seeds, notes...).

    Returns:
        A :class:`TorchCapture`: a context manager and a decorator, with ``record_loss``,
        ``record`` and ``step``.

    Example:
        >>> import tempfile, torch
        >>> m = torch.nn.Linear(2, 2)
        >>> with capture(m, tempfile.mkdtemp(), level="both") as cap:
        ...     _ = m(torch.ones(1, 2)); cap.step()
    """
    policy = CapturePolicy(level=level, payload=payload, steps=steps, ranks=ranks,
                           include=include, exclude=exclude, directions=tuple(directions),
                           max_bytes=max_bytes)
    return TorchCapture(model, path, policy, optimizer=optimizer, rank=rank,
                        world_size=world_size, manifest=manifest, overwrite=overwrite)
