"""The light ``stop_on_nonfinite`` for PyTorch: check module outputs, replay one module at op level.

The default of ``capture(model, path, stop_on_nonfinite=True)`` when no ``level`` is asked for.
Nothing is recorded per module or op; instead:

* **forward** -- each module's floating-point outputs get one reduction each (a ``float32``
  sum: a NaN/Inf makes it non-finite, a finite sum proves every element finite; an output that
  is the same tensor as a child's, already checked, is not read again). A module call keeps
  references to its inputs (and the CPU RNG state) until its output is checked. When an output
  is non-finite while the inputs are finite and unchanged (no in-place write moved their version
  counters), that module alone is run again on those inputs under a checking
  ``TorchDispatchMode`` (buffers and the RNG state restored afterwards, train/eval mode
  untouched), which names the first aten op whose output is non-finite, its cause and source
  line, and saves its inputs -- the same stop, message and files as the op-level guard of
  :mod:`.nonfinite`. When the inputs were already non-finite the parent module (whose code
  made them) is the candidate; at the root, the NaN came in with the batch.
* **backward** -- the gradient arriving at each module output (a tensor hook) and each
  parameter's accumulated gradient get the same reduction. At the first non-finite one, the
  module calls whose backward produced it (the consumers of that output, then the modules
  enclosing its producer; for a parameter, its owner) are replayed one by one: forward again
  on their saved inputs (anomaly mode on, only there, to learn each node's forward line), then
  ``torch.autograd.grad`` with the finite output gradient under the checking mode, which names
  the backward op, its autograd node (``SqrtBackward0``) and the forward source line.
* **loss** -- ``cap.record_loss(loss)`` checks the loss: finite model outputs and a non-finite
  loss name the loss computation.

When a replay does not reproduce the value (non-deterministic code, inputs written in place)
the stop names the module instead of an op. The stop raises
:class:`~netparity.capture.nonfinite.NonFiniteStop`, one line, after saving
``<trace>/nonfinite/rank{N}.npz`` / ``.json``.

Example:
    >>> with capture(model, d, stop_on_nonfinite=True) as cap:   # doctest: +SKIP
    ...     loss = model(x)                                     # NonFiniteStop at the log op
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.optim.optimizer as _optim_mod
from torch.utils._python_dispatch import TorchDispatchMode

from netparity import hoststats
from netparity.capture.nonfinite import NonFiniteStop, save_origin, stop_message
from netparity.frameworks.torch._common import _flatten, _flatten_call, _in_backward, hook_forward
from netparity.frameworks.torch.adapter import _HOST_READY, _kernel_view
from netparity.frameworks.torch.nonfinite import computed_outputs

_Tensor = torch.Tensor
_HALF = (torch.float16, torch.bfloat16)
#: up to this many elements the statistics kernel's one pass beats torch.sum on a CPU tensor
_KERNEL_MAX = 1 << 18
_TORCH_DIR = os.path.dirname(torch.__file__)
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
_nn = torch.nn
#: modules that only select, clamp or move values: finite inputs give finite outputs and
#: finite gradients, so when every input was already checked their outputs are not read
_SAFE_MODULES = frozenset({
    _nn.ReLU, _nn.ReLU6, _nn.Hardtanh, _nn.Identity, _nn.Flatten, _nn.Unflatten, _nn.MaxPool1d,
    _nn.MaxPool2d, _nn.MaxPool3d, _nn.AdaptiveMaxPool1d, _nn.AdaptiveMaxPool2d,
    _nn.AdaptiveMaxPool3d, _nn.Dropout, _nn.Dropout1d, _nn.Dropout2d, _nn.Dropout3d,
})
#: modules whose backward turns finite gradients and finite inputs into finite gradients
#: (short of overflow): the gradients at their inputs and outputs are not checked. A NaN/Inf
#: they pass back reaches the next checked gradient -- the input of an enclosing or
#: consuming module of another type (user code), whose replay contains them.
_BACKWARD_SAFE = _SAFE_MODULES | frozenset({
    _nn.Linear, _nn.Bilinear, _nn.Conv1d, _nn.Conv2d, _nn.Conv3d, _nn.ConvTranspose1d,
    _nn.ConvTranspose2d, _nn.ConvTranspose3d, _nn.BatchNorm1d, _nn.BatchNorm2d,
    _nn.BatchNorm3d, _nn.LayerNorm, _nn.GroupNorm, _nn.Embedding, _nn.Sequential,
    _nn.ModuleList, _nn.ModuleDict, _nn.Tanh, _nn.Sigmoid, _nn.GELU, _nn.SiLU, _nn.Softmax,
    _nn.LogSoftmax, _nn.AvgPool1d, _nn.AvgPool2d, _nn.AvgPool3d, _nn.AdaptiveAvgPool1d,
    _nn.AdaptiveAvgPool2d, _nn.AdaptiveAvgPool3d, _nn.LeakyReLU, _nn.ELU,
})


def light_nonfinite(t: torch.Tensor) -> bool:
    """Does ``t`` hold NaN/Inf? One fused reduction (a sum accumulated in float32 for half
    types, no temporary); only a non-finite sum -- NaN/Inf, or finite values whose sum
    overflows -- takes the exact ``isfinite`` test.

    Example:
        >>> light_nonfinite(torch.tensor([1.0, float("nan")])), light_nonfinite(torch.ones(3))
        (True, False)
    """
    if not t.is_floating_point() or not t.numel():
        return False
    kernel = hoststats._kernel
    if kernel is not None and t.numel() <= _KERNEL_MAX:  # small CPU float32/64: faster in C
        a = _kernel_view(t.detach(), _HOST_READY)
        if a is not None:  # (None also for finite values beyond float16's range: look again)
            return kernel.vec(a, 1) is None and not bool(np.isfinite(a).all())
    s = t.detach().sum(dtype=torch.float32) if t.dtype in _HALF else t.detach().sum()
    if math.isfinite(float(s)):
        return False
    return not bool(torch.isfinite(t).all())


class _LCall:
    """One module call as the light guard keeps it: its inputs until its output is checked
    (and, when the backward may need to replay it, until the next forward)."""

    __slots__ = ("path", "module", "args", "kwargs", "vers", "rng", "parent", "out_ids", "safe",
                 "watch")

    def __init__(self, path: str, module: torch.nn.Module, args: Any, kwargs: Any,
                 parent: _LCall | None):
        self.path = path
        self.module = module
        self.args = args
        self.kwargs = kwargs
        self.parent = parent
        self.vers = _versions(args, kwargs)
        # the RNG state a replay starts from: only where random numbers may be drawn
        self.rng = torch.get_rng_state() if _may_draw(module) else None
        self.out_ids: list[int] = []
        self.safe = False
        # the gradients at its inputs and outputs are checked (not a _BACKWARD_SAFE type, or
        # the root)
        self.watch = parent is None or type(module) not in _BACKWARD_SAFE


#: module -> may a call of it draw random numbers (weak: a capture must not keep models alive)
_DRAWS: weakref.WeakKeyDictionary[torch.nn.Module, bool] = weakref.WeakKeyDictionary()
_RANDOM = (_nn.Dropout, _nn.Dropout1d, _nn.Dropout2d, _nn.Dropout3d, _nn.AlphaDropout,
           _nn.FeatureAlphaDropout, _nn.RReLU)


def _may_draw(module: torch.nn.Module) -> bool:
    """May a call of ``module`` draw random numbers? A dropout-like module, or code outside
    ``torch.nn`` (a user's forward may call ``torch.rand``), anywhere in its tree."""
    hit = _DRAWS.get(module)
    if hit is None:
        hit = _DRAWS[module] = any(
            isinstance(m, _RANDOM) or not type(m).__module__.startswith("torch.nn.")
            for m in module.modules())
    return hit


def _versions(args: Any, kwargs: Any) -> tuple[int, ...]:
    """Version counters of the top-level tensor arguments (in-place writes move them)."""
    out = []
    for a in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(a, _Tensor):
            try:
                out.append(a._version)
            except RuntimeError:  # inference tensors have none (and cannot be written)
                out.append(-1)
    return tuple(out)


class _ReplayMode(TorchDispatchMode):
    """Checks every op output while one module call is replayed."""

    def __init__(self, guard: LightGuard, direction: str, call: _LCall):
        super().__init__()
        self.guard, self.direction, self.call = guard, direction, call

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        outs = computed_outputs(func, out)
        with torch._C._DisableTorchDispatch():
            bad = any(light_nonfinite(t) for _, t in outs)
        if bad:
            self.guard._lg_op_stop(func, args, kwargs, outs, self.direction, self.call)
        return out


class LightGuard:
    """Mixin of :class:`~netparity.frameworks.torch.capture.TorchCapture`: the light stop."""

    light = False
    # provided by the capture this is mixed into (annotations only)
    _stopped: bool
    _scaler_seen: bool
    _hooks: list[Any]
    _names: dict[int, str]
    model: Any
    global_mode: bool
    auto_step: bool
    path: Any
    rank: int
    step_no: int
    adapter_t: Any

    def _install_light(self) -> None:
        """Register the light hooks (instead of the recording ones)."""
        self._stopped = False
        self._lg_stack: list[_LCall] = []
        self._lg_calls: list[_LCall] = []  # this forward's calls (for a backward replay)
        self._lg_ok: dict[int, tuple[torch.Tensor, int]] = {}  # outputs already checked
        self._lg_consumers: dict[int, list[_LCall]] = {}
        self._lg_grads: dict[int, torch.Tensor] = {}  # finite output gradients by tensor id
        self._lg_hooked: dict[int, torch.Tensor] = {}  # tensors whose gradient is checked
        self._lg_replay: list[str] | None = None  # module paths while a replay runs
        self._lg_last: _LCall | None = None  # the last root call (its outputs feed the loss)
        hook_forward(self._hooks, self.model, self._names, self.global_mode, self._lg_gpre,
                     self._lg_gpost, self._lg_pre, self._lg_post)
        if not self.global_mode and self.model is not None:
            # float16/bfloat16 parameters only: a float32 weight gradient made from a finite
            # output gradient and finite inputs (both checked) cannot overflow short of 3e38;
            # one made non-finite inside a module (a reparametrised weight) is caught at the
            # next forward, in the updated parameter
            for name, prm in self.model.named_parameters():
                if prm.requires_grad and prm.dtype in _HALF:
                    self._hooks.append(prm.register_post_accumulate_grad_hook(
                        functools.partial(self._lg_param_grad, name)))
        if self.auto_step:  # netparity run: an optimizer step ends a step
            self._hooks.append(_optim_mod.register_optimizer_step_post_hook(
                self._lg_opt_post))

    def _lg_opt_post(self, opt: Any, args: Any, kwargs: Any) -> None:
        if self._owns(opt) and not self._scaler_seen:  # type: ignore[attr-defined]
            self.step()  # type: ignore[attr-defined]  # (with a scaler: at its update())

    def _lg_clear(self) -> None:
        for d in (self._lg_calls, self._lg_ok, self._lg_consumers, self._lg_grads,
                  self._lg_hooked):
            d.clear()

    # -- forward ---------------------------------------------------------------------------

    def _lg_gpre(self, module: torch.nn.Module, args: Any) -> None:
        n = self._names.get(id(module))
        if n is None:
            n = self._lg_name(module)
        self._lg_pre(n, module, args, {})

    def _lg_name(self, module: torch.nn.Module) -> str:
        """Global mode: name a module seen for the first time (as the recording hooks do)."""
        parent = self._lg_replay[-1] if self._lg_replay else (
            self._lg_stack[-1].path if self._lg_stack else None)
        return self._name_of(module, parent)  # type: ignore[attr-defined,no-any-return]

    def _lg_gpost(self, module: torch.nn.Module, args: Any, kwargs: Any, out: Any = None
                  ) -> None:
        self._lg_post("", module, args, kwargs, out)

    def _lg_pre(self, path: str, module: torch.nn.Module, args: Any, kwargs: Any) -> None:
        if self._lg_replay is not None:
            self._lg_replay.append(path)
            return
        if self._stopped:
            return
        st = self._lg_stack
        if not st and not _in_backward() and not self._lg_feeds(args):
            # a new forward: the last one's calls are done -- unless this root call takes that
            # forward's outputs (a loss module called by the script, zero-code), whose backward
            # runs through them
            self._lg_clear()
        c = _LCall(path, module, args, kwargs, st[-1] if st else None)
        st.append(c)
        if type(module) in _SAFE_MODULES and not kwargs:
            ok = self._lg_ok
            c.safe = all(ok.get(id(a), (None, -1))[0] is a and ok[id(a)][1] == a._version
                         for a in args if isinstance(a, _Tensor) and a.is_floating_point())
        cons = self._lg_consumers
        grad = c.watch and torch.is_grad_enabled()
        for a in args:
            if isinstance(a, _Tensor):
                cons.setdefault(id(a), []).append(c)
                if grad and a.requires_grad and a.is_floating_point():
                    self._lg_watch(a, None)

    def _lg_feeds(self, args: Any) -> bool:
        """Whether ``args`` hold an output checked in the current forward."""
        ok = self._lg_ok
        return any(isinstance(a, _Tensor) and ok.get(id(a), (None, 0))[0] is a for a in args)

    def _lg_watch(self, t: torch.Tensor, producer: _LCall | None) -> None:
        """Check the gradient that reaches ``t`` (one hook per tensor)."""
        tid = id(t)
        if self._lg_hooked.get(tid) is t:
            return
        self._lg_hooked[tid] = t
        t.register_hook(functools.partial(self._lg_grad, producer, tid))

    def _lg_post(self, path: str, module: torch.nn.Module, args: Any, kwargs: Any,
                 out: Any) -> None:
        if self._lg_replay is not None:
            if len(self._lg_replay) > 1:
                self._lg_replay.pop()
            return
        st = self._lg_stack
        if not st or st[-1].module is not module:
            return
        c = st.pop()
        if self._stopped:
            return
        outs: list[tuple[str, torch.Tensor]] = []
        if isinstance(out, _Tensor):
            outs.append(("", out))
        else:
            _flatten(out, "", outs)
        ok = self._lg_ok
        hooks = torch.is_grad_enabled()
        for a, t in outs:
            if not t.is_floating_point():
                continue
            c.out_ids.append(id(t))
            seen = ok.get(id(t))
            if seen is not None and seen[0] is t and seen[1] == t._version:
                continue  # a child's output returned as is: checked there
            if c.safe:  # finite in, finite out (and finite gradients back)
                ok[id(t)] = (t, t._version)
                continue
            if light_nonfinite(t):
                self._lg_forward_bad(c, a)
                return
            ok[id(t)] = (t, t._version)
        if hooks and c.watch:
            for _, t in outs:
                if t.requires_grad and t.is_floating_point():
                    self._lg_watch(t, c)
        if hooks:
            self._lg_calls.append(c)
        if not st:
            self._lg_last = c

    def _lg_forward_bad(self, c: _LCall, arg: str) -> None:
        """Output ``arg`` of call ``c`` is non-finite: replay it, or leave it to its parent."""
        ins, _ = _flatten_call(tuple(c.args), dict(c.kwargs or {}))
        bad_in = [a for a, t in ins if light_nonfinite(t)]
        written = _versions(c.args, c.kwargs) != c.vers
        if not bad_in and not written:
            self._lg_replay_forward(c)  # raises at the op when it reproduces
            self._lg_module_stop(c, "forward", "introduced",
                                 f"output {arg or '0'} is non-finite while its inputs are finite;"
                                 " the op was not found again on a replay (non-deterministic?)")
        if c.parent is not None:
            # the parent's code made (or passed on) the bad input, or this call overwrote its
            # inputs: the parent, replayed on its own inputs, is the candidate
            return
        if bad_in:
            self._lg_module_stop(c, "forward", "entered",
                                 f"NaN/Inf already in input {bad_in[0]} of this top-level "
                                 "module (the data batch, or a value made outside any module)")
        self._lg_module_stop(c, "forward", "introduced",
                             "output non-finite; its inputs were written in place since the call,"
                             " so it cannot be replayed (the saved inputs are the overwritten "
                             "ones)")

    # -- backward --------------------------------------------------------------------------

    def _lg_grad(self, producer: _LCall | None, tid: int, grad: torch.Tensor) -> None:
        """The gradient reaching a checked tensor (the output of ``producer``, or an input of a
        checked module): at the first non-finite one, replay the calls whose backward made it
        -- the tensor's consumers, latest first, then the modules enclosing them."""
        if (self._stopped or self._lg_replay is not None or not isinstance(grad, _Tensor)
                or self._scaler_seen):  # loss scaling: overflowing gradients are expected
            return
        if not light_nonfinite(grad):
            self._lg_grads[tid] = grad
            return
        cons = self._lg_consumers.get(tid, [])
        cands = list(reversed(cons))
        p = (cons[0] if cons else producer)
        p = p.parent if p is not None else None
        while p is not None:
            cands.append(p)
            p = p.parent
        for k in cands:
            self._lg_replay_backward(k)
        where = producer or (cons[0] if cons else None)
        if where is None:
            return
        if not cons and where.parent is None:
            self._lg_module_stop(where, "backward", "introduced",
                                 "the gradient of the model's output is non-finite: the loss "
                                 "computation (outside the model) made it", loss=True)
        self._lg_module_stop(where, "backward", "introduced",
                             "first non-finite gradient checked here (made by the backward of "
                             "the code that consumed this tensor; not found again on a replay)")

    def _lg_param_grad(self, name: str, prm: torch.Tensor) -> None:
        if (self._stopped or self._lg_replay is not None or prm.grad is None
                or self._scaler_seen):
            return
        if not light_nonfinite(prm.grad):
            return
        owner = name.rsplit(".", 1)[0] if "." in name else ""
        calls = [c for c in self._lg_calls if c.path == owner]
        for c in reversed(calls):
            self._lg_replay_backward(c)
        if calls:
            self._lg_module_stop(calls[-1], "backward", "introduced",
                                 f"gradient of parameter {name} is non-finite (not found again "
                                 "on a replay)")

    # -- replay ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _lg_sandbox(self, c: _LCall) -> Iterator[None]:
        """Run a replay of ``c`` without lasting effect: buffers (batch-norm statistics) and
        the RNG state are put back; the RNG starts where the call started (same dropout)."""
        bufs = [(b, b.detach().clone()) for b in c.module.buffers()]
        rng = torch.get_rng_state()
        if c.rng is not None:
            torch.set_rng_state(c.rng)
        self._lg_replay = [c.path]
        try:
            yield
        finally:
            self._lg_replay = None
            torch.set_rng_state(rng)
            with torch.no_grad():
                for b, v in bufs:
                    b.copy_(v)

    def _lg_replay_forward(self, c: _LCall) -> None:
        try:
            with self._lg_sandbox(c), _ReplayMode(self, "forward", c):
                c.module.forward(*c.args, **(c.kwargs or {}))
        except NonFiniteStop:
            raise
        except Exception:  # noqa: BLE001 - a module that cannot run again: name it instead
            return

    def _lg_replay_backward(self, c: _LCall) -> None:
        """Replay ``c``'s forward on its saved inputs, then its backward from the saved (finite)
        gradients of its outputs under the checking mode (a call that cannot run again is
        skipped: the stop then names a module)."""
        try:
            self._lg_replay_backward_call(c)
        except NonFiniteStop:
            raise
        except Exception:  # noqa: BLE001
            return

    def _lg_replay_backward_call(self, c: _LCall) -> None:
        if _versions(c.args, c.kwargs) != c.vers:
            return
        grads = [self._lg_grads.get(i) for i in c.out_ids]
        if not any(g is not None for g in grads):
            return

        def fresh(x: Any) -> Any:
            if isinstance(x, _Tensor) and x.is_floating_point():
                return x.detach().requires_grad_(x.requires_grad)
            return x

        args = tuple(fresh(a) for a in c.args)
        kwargs = {k: fresh(v) for k, v in (c.kwargs or {}).items()}
        with self._lg_sandbox(c):
            with torch.enable_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with torch.autograd.detect_anomaly(check_nan=False):
                    out = c.module.forward(*args, **kwargs)
            outs: list[tuple[str, torch.Tensor]] = []
            _flatten(out, "", outs)
            floats = [t for _, t in outs if t.is_floating_point()]
            pairs = [(t, g) for t, g in zip(floats, grads)
                     if g is not None and t.requires_grad and t.shape == g.shape]
            targets = [a for a in (*args, *kwargs.values())
                       if isinstance(a, _Tensor) and a.requires_grad]
            targets += [p for p in c.module.parameters() if p.requires_grad]
            if not pairs or not targets:
                return
            with _ReplayMode(self, "backward", c):
                torch.autograd.grad([t for t, _ in pairs], targets, [g for _, g in pairs],
                                    allow_unused=True)

    # -- the stop --------------------------------------------------------------------------

    def _lg_op_stop(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                    outs: list[tuple[str, torch.Tensor]], direction: str, c: _LCall) -> None:
        """The replay met the origin op: describe it like the op-level guard and stop."""
        node = torch._C._current_autograd_node() if direction == "backward" else None
        if direction == "forward":
            module = self._lg_replay[-1] if self._lg_replay else c.path
            src = self._source()  # type: ignore[attr-defined]
        else:
            module = c.path
            src = _forward_line(node)
        where = {"direction": direction, "module": module, "source": src}
        self._nonfinite_stop(func, args, kwargs, outs, where)  # type: ignore[attr-defined]

    def _lg_module_stop(self, c: _LCall, direction: str, verdict: str, cause: str,
                        loss: bool = False) -> None:
        """Stop naming module call ``c`` (no op found): save its inputs."""
        self._stopped = True
        ins, _ = _flatten_call(tuple(c.args), dict(c.kwargs or {}))
        ad = self.adapter_t
        with torch._C._DisableTorchDispatch():
            st = ad.resolve_stats([ad.stats_handle(t) for _, t in ins])
            in_st = [dict(s, arg=a, dtype=ad.dtype_name(t), numel=t.numel())
                     for (a, t), s in zip(ins, st)]
            arrays = {a: (t.detach().float() if t.dtype == torch.bfloat16 else t.detach())
                      .cpu().numpy() for a, t in ins}
        origin = {"op": "loss" if loss else type(c.module).__name__,
                  "native": type(c.module).__name__,
                  "module": "(loss, outside the model)" if loss else c.path,
                  "direction": direction, "step": self.step_no, "rank": self.rank,
                  "source": "", "verdict": verdict, "cause": cause, "scalars": {},
                  "autograd_node": "", "inputs": in_st, "outputs": [], "pid": os.getpid(),
                  "level": "module"}
        npz = save_origin(self.path, self.rank, origin, arrays)
        origin["saved"] = str(npz)
        self.flush()  # type: ignore[attr-defined]
        raise NonFiniteStop(stop_message(origin), origin)

    def _lg_check_loss(self, loss: torch.Tensor) -> None:
        """``record_loss``: a non-finite loss from finite model outputs names the loss code."""
        if self._stopped or not light_nonfinite(loss):
            return
        c = self._lg_last
        if c is None:
            return
        self._lg_module_stop(c, "forward", "introduced",
                             "the model's outputs are finite but the loss is not: the loss "
                             "computation (outside the model) made it", loss=True)


def _forward_line(node: Any) -> str:
    """``file:line`` in user code of the forward op behind autograd ``node`` (anomaly mode's
    traceback, recorded during the replay's forward)."""
    try:
        tb = node.metadata.get("traceback_") if node is not None else None
    except Exception:  # noqa: BLE001 - a line is a nicety
        return ""
    for entry in reversed(tb or []):
        first = str(entry).strip().splitlines()[0] if str(entry).strip() else ""
        if not first.startswith('File "'):
            continue
        fn = first[6:first.index('"', 6)]
        if fn.startswith((_TORCH_DIR, _OWN_DIR)) or "<frozen" in fn:
            continue
        line = first.split(", line ", 1)[1].split(",", 1)[0] if ", line " in first else "?"
        return f"{os.path.basename(fn)}:{line}"
    return ""
