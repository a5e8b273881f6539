"""Shared pieces of the PyTorch capture units: the per-call state (:class:`CallInfo`), the
thread-local stacks, argument flattening, record constructors and the common base class.

The capture is split into units, each a class adding one mechanism to
:class:`TorchCaptureBase` (all share the one session object, so the hot paths pay no extra
indirection): :mod:`.stats_plan` (statistics fast paths), :mod:`.module_hooks` (module
forward/backward), :mod:`.attribution` (backward attribution of ops), :mod:`.op_dispatch`
(``TorchDispatchMode``), :mod:`.optimizer_hooks` (updates, gradients, parameters), assembled by
:class:`netparity.frameworks.torch.capture.TorchCapture`.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Container, Iterable
from typing import TYPE_CHECKING, Any

import torch

from netparity.capture.session import CaptureSession
from netparity.trace.schema import Record

if TYPE_CHECKING:
    from netparity.capture.phases import OutsidePhase
    from netparity.frameworks.torch.adapter import TorchAdapter
    from netparity.frameworks.torch.stats_plan import GradSlot, ReluPlan, SeenEntry, SumEntry

_TORCH_DIR = os.path.dirname(torch.__file__)
_ReLU = torch.nn.ReLU
_SKIP = (_TORCH_DIR,)
_Tensor = torch.Tensor


def _in_grad_seed() -> bool:
    """True inside ``torch.autograd``'s ``_make_grads`` (the seed of ``backward()``)."""
    f: Any = sys._getframe(2)
    while f is not None:
        if f.f_code.co_name == "_make_grads" and f.f_code.co_filename.startswith(_TORCH_DIR):
            return True
        f = f.f_back
    return False

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


def _flatten_call(args: tuple[Any, ...], kwargs: dict[str, Any]
                  ) -> tuple[list[tuple[str, torch.Tensor]], dict[str, Any]]:
    """The tensors of an op call's arguments (``0``, ``1.2``, ``kw.x``) and its scalars."""
    scalars: dict[str, Any] = {}
    ins: list[tuple[str, torch.Tensor]] = []
    for i, a in enumerate(args):
        _flatten(a, str(i), ins, scalars)
    for k, v in kwargs.items():
        _flatten(v, f"kw.{k}", ins, scalars)
    return ins, scalars


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
        # arg -> the gradient contributions to that input (see GradSlot)
        self.in_acc: dict[str, GradSlot] = {}
        # an exact in-place ReLU: its output's statistics, read with its input
        self.relu: ReluPlan | None = None


class _TLS(threading.local):
    def __init__(self) -> None:
        self.stack: list[_Call] = []  # forward module stack
        self.bwd: list[_Call | None] = []  # backward module context (node pre/post hooks)


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


class TorchCaptureBase(CaptureSession):
    """The state every unit of the PyTorch capture shares (set up by ``TorchCapture``), and,
    for type checking, the methods one unit calls on another."""

    adapter_t: TorchAdapter
    model: torch.nn.Module | None
    optimizer: torch.optim.Optimizer | None
    global_mode: bool
    auto_step: bool
    detect_loss: bool
    _names: dict[int, str]
    _param_names: dict[int, str]
    _roots: int
    #: every named module tree (the model; global mode: each root module called)
    _trees: list[torch.nn.Module]
    #: optimizers this capture saw step, in that order; (step, index, [lr of each group])
    _opts: list[Any]
    _lr_log: list[tuple[int, int, list[float | None]]]
    _tls: _TLS
    _busy: bool
    _on: bool
    _pid: int
    _step_hooks: list[Any]
    _fwd_calls: dict[str, int]
    _bwd_calls: dict[str, int]
    _hooked: set[str]
    _claimed: dict[Any, _Call]
    _seen: dict[Any, SeenEntry]
    _relu_feeds: dict[tuple[str, int], set[str]]
    _sums: dict[tuple[int, ...], SumEntry]
    _node_edges: dict[int, list[tuple[_Call, list[tuple[int, str]]]]]
    _outside_fwd: int
    _outside_bwd: int
    #: ops outside every module: the phase they run in (phases.py)
    _phase: OutsidePhase
    _in_update: int
    _scaler_seen: bool  # a GradScaler scaled a loss (loss_scale.ScalerWatch)
    _update_ops: int
    _update_no: int
    _params_done: int
    _grads_seen: dict[str, int]
    _custom_calls: dict[str, int]
    _op_names: dict[Any, tuple[str, str]]
    _canon_mod: dict[type, tuple[str, str]]
    #: leaf torch.nn modules seen: path -> class and plain attributes (capture_notes' ``modules``)
    _leaf_meta: dict[str, dict[str, Any]]

    if TYPE_CHECKING:  # implemented by the units; declared here for cross-unit calls only
        def _source(self) -> str: ...

        def _emit_t(self, rec: Record, t: torch.Tensor, relu: bool = False) -> Any: ...

        def _queue(self, rec: Record, t: torch.Tensor, handle: Any, payload: Any = None,
                   nbytes: int = 0) -> None: ...

        def _emit_all(self, make: Callable[[str], Record],
                      items: Iterable[tuple[str, torch.Tensor]],
                      relu: Container[str] = ()) -> Any: ...

        def _record_module(self, info: _Call, obj: Any, role: str, prefix: str,
                           relu: Container[str] = ()) -> Any: ...

        def _relu_input(self, info: _Call, t: torch.Tensor) -> None: ...

        def _relu_output(self, info: _Call, out: Any) -> bool: ...

        def _grad_hook(self, info: _Call, role: str, arg: str, grad: torch.Tensor,
                       extra: dict[str, Any] | None = None) -> None: ...

        def _sum_with_last_part(self, entries: list[tuple[_Call, list[tuple[int, str]]]],
                                grad_inputs: Any) -> None: ...

        def _record_grad_sum(self, info: _Call, arg: str,
                             parts: list[tuple[torch.Tensor, int]]) -> None: ...

        def _start_bwd(self, info: _Call) -> None: ...

        def _claim(self, info: _Call, roots: list[Any]) -> None: ...

        def _on_op(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any: ...

        def record_loss(self, loss: Any) -> None: ...


def hook_forward(hooks: list[Any], model: torch.nn.Module | None, names: dict[int, str],
                 global_mode: bool, global_pre: Callable[..., Any],
                 global_post: Callable[..., Any], pre: Callable[..., Any],
                 post: Callable[..., Any], *, inside: bool = False) -> None:
    """Forward pre/post hooks for a capture, appended to ``hooks``: on every module there is
    (``global_mode``: ``global_pre(module, args)`` / ``global_post(module, args, kwargs,
    output)``), else on each module of ``model`` (``pre(path, module, args, kwargs)`` /
    ``post(path, module, args, kwargs, output)``, ``path`` from ``names``). The post hooks run
    even when the forward raises.

    Compiled regions (:mod:`.compiled`): only their boundaries are hooked, and global hooks
    leave nothing in a compiled graph; ``inside`` (the regions run eagerly) hooks every module.
    """
    import functools

    from netparity.frameworks.torch.compiled import boundary_hook, eager_only, hooked_modules

    mm = torch.nn.modules.module
    if global_mode:
        hooks.append(mm.register_module_forward_pre_hook(eager_only(global_pre)))
        hooks.append(mm.register_module_forward_hook(eager_only(global_post), with_kwargs=True,
                                                     always_call=True))
    elif model is not None:
        for path, m in hooked_modules(model, inside):
            hooks.append(m.register_forward_pre_hook(
                boundary_hook(m, functools.partial(pre, path)), with_kwargs=True))
            hooks.append(m.register_forward_hook(
                boundary_hook(m, functools.partial(post, path)), with_kwargs=True,
                always_call=True))


def _autograd_node() -> str:
    """Name of the autograd node running now (``SqrtBackward0``), ``""`` when unknown."""
    get = getattr(torch._C, "_current_autograd_node", None)
    try:
        node = get() if get is not None else None
        return str(node.name()) if node is not None else ""
    except Exception:  # noqa: BLE001 - a name is a nicety; never fail the stop over it
        return ""
