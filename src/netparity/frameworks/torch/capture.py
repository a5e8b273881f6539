"""Capture what a PyTorch model computes: module boundaries, every aten op, gradients, updates.

Mechanisms are chosen so that capture never changes the run and survives in-place code; each
lives in its own unit, and :class:`TorchCapture` assembles them on one session object:

* :mod:`.module_hooks` -- module forward records; module gradients through tensor hooks on
  outputs and on the autograd edges into inputs (never ``register_full_backward_hook``).
* :mod:`.op_dispatch` -- every aten op (forward, backward, ``optimizer.step()``) through a
  ``TorchDispatchMode``, attributed to the innermost running module.
* :mod:`.attribution` -- which module an op run by autograd belongs to (claimed nodes).
* :mod:`.optimizer_hooks` -- the ``update`` direction, gradients and parameters after a step.
* :mod:`.stats_plan` -- every record's statistics (on the tensor's device, via
  :class:`~netparity.frameworks.torch.adapter.TorchAdapter`, dispatch disabled), batched;
  unchanged memory reuses statistics, an in-place ReLU's output and summed gradients are
  predicted instead of re-read.

This module keeps the lifecycle (install, uninstall, step, close) and the user API.

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
import weakref
from collections.abc import Iterable
from typing import Any

import torch
import torch.optim.optimizer as _optim_mod

from netparity.capture.phases import OutsidePhase
from netparity.capture.policy import CapturePolicy
from netparity.errors import UsageError
from netparity.frameworks.torch._common import _TLS, _flatten, _Tensor, hook_forward
from netparity.frameworks.torch.adapter import TorchAdapter
from netparity.frameworks.torch.attribution import BackwardAttribution
from netparity.frameworks.torch.compiled import clean_name, compiled_facts, force_eager
from netparity.frameworks.torch.loss_scale import ScalerWatch
from netparity.frameworks.torch.module_hooks import ModuleHooks
from netparity.frameworks.torch.nonfinite import NonFiniteGuard
from netparity.frameworks.torch.nonfinite_light import LightGuard
from netparity.frameworks.torch.op_dispatch import OpDispatch, _OpMode
from netparity.frameworks.torch.optimizer_hooks import OptimizerHooks, note_optimizer
from netparity.frameworks.torch.stats_plan import StatsPlanner
from netparity.trace.schema import Record


class TorchCapture(ScalerWatch, LightGuard, NonFiniteGuard, OptimizerHooks, OpDispatch, ModuleHooks, BackwardAttribution,
                   StatsPlanner):
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
        stop_on_nonfinite: bool = False,
        light: bool = False,
        scaler: Any = None,
        compiled: str = "boundary",
    ):
        if model is not None and not isinstance(model, torch.nn.Module):
            raise UsageError(f"capture expects a torch.nn.Module, got {type(model).__name__}")
        if compiled not in ("boundary", "eager"):
            raise UsageError(f"compiled must be 'boundary' or 'eager', not {compiled!r}")
        if policy.ops:  # dynamo runs compiled code eagerly under the op level's dispatch mode
            compiled = "eager"
        facts = compiled_facts(model, compiled)
        if facts:
            manifest = {**facts, **(manifest or {})}
        if rank is None or world_size is None:
            r, w = _dist_rank()
            rank = r if rank is None else rank
            world_size = w if world_size is None else world_size
        self.adapter_t = TorchAdapter()
        if light and stop_on_nonfinite:  # the trace holds losses and data only: say why
            manifest = dict(manifest or {}, stop_on_nonfinite="light")
        super().__init__(path, self.adapter_t, policy, rank=rank, world_size=world_size,
                         manifest=manifest, overwrite=overwrite)
        self.model = model
        self.optimizer = optimizer
        self.global_mode = global_mode
        self.auto_step = auto_step
        self.detect_loss = detect_loss
        self.stop_on_nonfinite = stop_on_nonfinite
        # the light stop (no level asked for): checks only, records only losses and data
        self.light = light and stop_on_nonfinite
        self.scaler = scaler
        self.compiled = compiled
        self._stance: Any = None  # compiled="eager": restores the compiler's stance
        self._names = {}
        self._param_names = {}
        self._roots = 0
        self._trees = []
        self._opts = [] if optimizer is None else [weakref.ref(optimizer)]
        self._lr_log = []
        if optimizer is not None:
            note_optimizer(optimizer)
        if model is not None:
            self._name_tree(model, "")
        self._tls = _TLS()
        self._busy = False
        self._installed = False
        self._closed = False
        self._timer: Any = None  # capture(..., timing=True): the TorchTiming sharing the writer
        self._pid = os.getpid()
        self._hooks: list[Any] = []  # module/optimizer hook handles (until uninstall)
        self._step_hooks = []  # tensor/node hook handles (until step end)
        self._mode: _OpMode | None = None
        self._on = self.active
        self._fwd_calls = {}
        self._bwd_calls = {}
        self._hooked = set()  # paths whose backward hooks exist this step
        self._claimed = {}
        # statistics reuse: memory key -> SeenEntry (see stats_plan)
        self._seen = {}
        # (module path, forward call) -> output args that feed an in-place ReLU (learned; kept
        # across steps)
        self._relu_feeds = {}
        # summed input gradients: ids of the parts -> SumEntry (see stats_plan)
        self._sums = {}
        # id of an autograd node -> the (module call, [(gradient index, input arg)]) of each
        # module-input hook on it, in hook order; taken by the node's first hook to run
        self._node_edges = {}
        self._outside_fwd = 0
        self._outside_bwd = 0
        self._phase = OutsidePhase()
        self._in_update = 0
        self._update_ops = 0
        self._update_no = 0
        self._params_done = -1
        self._grads_seen = {}
        self._custom_calls = {}
        self._op_names = {}
        self._canon_mod = {}
        self._leaf_meta = {}
        ref = weakref.ref(self)

        def in_child() -> None:  # a forked data-loader worker must not record into our writer
            c = ref()
            if c is not None:
                c._on = False

        os.register_at_fork(after_in_child=in_child)

    def install(self) -> TorchCapture:
        """Install hooks (and the dispatch mode for op level). Idempotent."""
        if self._installed:
            return self
        if self._closed:
            raise UsageError("this capture is closed; create a new one")
        self._installed = True
        try:
            inside = self.compiled == "eager"
            if inside:
                self._stance = force_eager()
            if self.light:
                self._install_light()
            else:
                hook_forward(self._hooks, self.model, self._names, self.global_mode,
                             self._global_pre, self._global_post, self._pre_hook,
                             self._post_hook, inside=inside)
            if not self.light and not self.global_mode and self.model is not None:
                # Parameter gradients as backward produces them (before any unscaling, clipping
                # or zeroing by the training loop): the same moment MindSpore's
                # Parameter.register_hook sees, so loss-scaled runs compare like for like.
                for name, prm in self.model.named_parameters():
                    if prm.requires_grad:
                        self._hooks.append(prm.register_post_accumulate_grad_hook(
                            functools.partial(self._acc_grad, clean_name(name))))
            om = _optim_mod
            if not self.light:
                self._hooks.append(om.register_optimizer_step_pre_hook(self._opt_pre))
                self._hooks.append(om.register_optimizer_step_post_hook(self._opt_post))
            if self.policy.ops and not self.light:
                self._mode = _OpMode(self)
                self._mode.__enter__()
            if not self.light:
                self._install_guard()
            self._install_scaler()
            if self._timer is not None:
                self._timer.install()
        except BaseException:
            self.uninstall()
            raise
        return self

    def uninstall(self) -> None:
        """Remove every hook and pop the dispatch mode. Safe to call twice."""
        if self._stance is not None:
            restore, self._stance = self._stance, None
            restore()
        self._remove_scaler()
        self._remove_guard()
        if self._timer is not None:
            self._timer.uninstall()
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(None, None, None)
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        self._clear_step_hooks()
        self._tls.stack.clear()
        self._tls.bwd.clear()
        if self.light and self._installed:
            self._lg_stack.clear()
            self._lg_clear()
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
        if self._timer is not None:
            self._timer.close()  # its last step, its hooks (the writer is ours)
        self.uninstall()
        self._closed = True
        self._busy = True
        try:
            with torch._C._DisableTorchDispatch():
                if not self.light:
                    self._write_optimizer_notes()
                    self._write_module_notes()
                super().close()
        finally:
            self._busy = False

    def record_loss(self, loss: Any) -> None:
        """Record the loss of this step (``kind="loss"``, ``op="loss"``, module ``""``)."""
        if self.light and self._installed and isinstance(loss, _Tensor):
            self._lg_check_loss(loss)
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
        if self.light and self._installed:
            self._lg_clear()
        elif self._on and self._params_done != self.step_no and (
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
        self._phase = OutsidePhase()
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
    level: str | None = None,
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
    stop_on_nonfinite: bool = False,
    scaler: Any = None,
    timing: bool = False,
    loader: Any = None,
    compiled: str = "boundary",
) -> TorchCapture:
    """Capture ``model`` into the trace directory ``path``.

    Args:
        model: the ``torch.nn.Module`` to observe (module paths are relative to it).
        path: trace directory; ``rank{N}/`` is written inside it.
        level: ``module`` (the default), ``op`` (every aten op) or ``both``. Left out with
            ``stop_on_nonfinite=True``: the light stop, which records nothing but losses and
            data (see :mod:`.nonfinite_light`).
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
        timing: also record the light timing of each step (``netparity.profile``'s records:
            phases, module times, gradient-ready times; ``netparity perf`` reads them) into the
            same trace, numbered by this capture's steps. The times include the capture's own
            work: compare them with runs captured the same way. ``loader``: as for ``profile``.
        stop_on_nonfinite: stop the run at the first op whose output holds NaN/Inf: its
            inputs are saved to ``<path>/nonfinite/`` and
            :class:`~netparity.capture.nonfinite.NonFiniteStop` is raised with one line
            naming the op, module, direction, step, source and cause.
        scaler: the ``torch.amp.GradScaler`` whose scale and overflow are recorded after each
            ``update()`` (``loss_scale``, ``loss_scale_overflow``); ``None``: any GradScaler
            used while the capture is installed (see :mod:`.loss_scale`).
        compiled: for ``torch.compile``d modules (see :mod:`.compiled`): ``"boundary"`` records
            each compiled module at its boundary (forward and backward) and runs it compiled;
            ``"eager"`` runs the compiled modules eagerly while installed, so that the inside
            is recorded too (eager numbers).

    Returns:
        A :class:`TorchCapture`: a context manager and a decorator, with ``record_loss``,
        ``record`` and ``step``.

    Example:
        >>> import tempfile, torch
        >>> m = torch.nn.Linear(2, 2)
        >>> with capture(m, tempfile.mkdtemp(), level="both") as cap:
        ...     _ = m(torch.ones(1, 2)); cap.step()
    """
    light = level is None and stop_on_nonfinite
    policy = CapturePolicy(level=level or "module", payload=payload, steps=steps, ranks=ranks,
                           include=include, exclude=exclude, directions=tuple(directions),
                           max_bytes=max_bytes)
    if not timing:
        return TorchCapture(model, path, policy, optimizer=optimizer, rank=rank,
                            world_size=world_size, manifest=manifest, overwrite=overwrite,
                            stop_on_nonfinite=stop_on_nonfinite, light=light, scaler=scaler,
                            compiled=compiled)
    from netparity.frameworks.torch.timing import TorchTiming, timing_facts

    cap = TorchCapture(model, path, policy, optimizer=optimizer, rank=rank,
                       world_size=world_size, manifest={**timing_facts(model, loader),
                                                        **(manifest or {})},
                       overwrite=overwrite, stop_on_nonfinite=stop_on_nonfinite, light=light,
                       scaler=scaler, compiled=compiled)
    if cap.writer is not None:  # (a rank the policy leaves out writes nothing)
        cap._timer = TorchTiming(model, path, optimizer=optimizer, loader=loader,
                                 global_optimizer=optimizer is None, writer=cap.writer,
                                 step_of=lambda: cap.step_no, rank=cap.rank)
    return cap
