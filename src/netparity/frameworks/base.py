"""What a framework must provide to netparity: the :class:`FrameworkAdapter` base class.

One adapter per framework lives in its own subpackage (``netparity.frameworks.torch``,
``...mindspore``, ``...numpy``) and is found through :mod:`netparity.frameworks.registry`.
Everything framework-specific that the rest of netparity needs goes through these methods:
detection of the framework's objects, tensor -> NumPy, dtype names, statistics handles, model
walking, the capture entry point, checkpoint read/write, seeding and run facts.

Abstract methods are those without which an adapter is useless (detection, dtype name, host
copy). The others have a working default (statistics on the host copy) or raise
:class:`~netparity.errors.FrameworkError` with a one-line message saying that this framework
does not support the operation.

Example:
    >>> from netparity.frameworks.numpy import NumpyAdapter
    >>> import numpy as np
    >>> a = NumpyAdapter()
    >>> a.name, a.dtype_name(np.zeros(3, dtype=np.float32))
    ('numpy', 'float32')
"""

from __future__ import annotations

import abc
import contextlib
import importlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from netparity.errors import FrameworkError
from netparity.hoststats import host_stats


@dataclass
class ParamCounts:
    """Parameter counts of a model (elements, not tensors)."""

    total: int
    trainable: int
    tensors: int
    trainable_tensors: int
    buffers: int  # non-trainable state stored with the weights (BN running statistics)


@dataclass
class CheckpointData:
    """What a framework's checkpoint reader found in a file (arrays in storage dtypes).

    ``netparity.ckpt`` turns it into its ``CheckpointDict``; the framework side only knows
    NumPy and the framework's own file format.
    """

    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)
    source_key: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def call_arguments(inputs: Sequence[tuple[str, Any]]) -> tuple[list[Any], dict[str, Any]]:
    """Positional and keyword arguments of a call from ``(argument path, value)`` pairs as a
    capture records them (``0``, ``1``: positional; ``kw.name``: keyword; ``kw.name.0``,
    ``kw.name.1``: the elements of a tuple argument, rebuilt as a tuple -- transformers passes
    the rotary ``position_embeddings=(cos, sin)`` that way).

    Raises :class:`FrameworkError` for what tensors alone cannot rebuild: arguments nested
    twice (``0.1.2``), a tuple with a gap, or a gap in the positions (a non-tensor argument in
    between).

    Example:
        >>> call_arguments([("0", "x"), ("kw.mask", "m"), ("kw.pe.0", "c"), ("kw.pe.1", "s")])
        (['x'], {'mask': 'm', 'pe': ('c', 's')})
    """
    pos: dict[int, Any] = {}
    kw: dict[str, Any] = {}
    parts: dict[tuple[bool, str], dict[int, Any]] = {}
    for arg, v in inputs:
        is_kw = arg.startswith("kw.")
        top, _, rest = (arg[3:] if is_kw else arg).partition(".")
        if rest.isdigit() and (is_kw or top.isdigit()):
            parts.setdefault((is_kw, top), {})[int(rest)] = v
        elif is_kw and not rest:
            kw[top] = v
        elif arg.isdigit():
            pos[int(arg)] = v
        else:
            raise FrameworkError(f"argument {arg or '<single>'!r} is nested; the call cannot be "
                                 "rebuilt from its tensors")
    for (is_kw, top), elems in parts.items():
        if sorted(elems) != list(range(len(elems))) or (top in kw if is_kw else int(top) in pos):
            raise FrameworkError(f"argument {top!r} is nested with a non-tensor element; the "
                                 "call cannot be rebuilt from its tensors")
        value = tuple(elems[i] for i in range(len(elems)))
        if is_kw:
            kw[top] = value
        else:
            pos[int(top)] = value
    if sorted(pos) != list(range(len(pos))):
        raise FrameworkError("a positional argument is not a tensor; the call cannot be rebuilt "
                             "from its tensors")
    return [pos[i] for i in range(len(pos))], kw


#: the key under which an optimizer state copy keeps the optimizer object's own plain attributes
ATTRS_KEY = "__netparity_attrs__"


def plain_attributes(obj: Any) -> dict[str, Any]:
    """Copies of the attributes of ``obj`` itself that hold numbers: ints, floats, NumPy
    scalars and arrays, and framework tensors that are plain attributes (not registered
    parameters or buffers). A hand-written optimizer keeps its step counter so (``self.t +=
    1``): a replay that saved and restored only its tensors' state ran Adam's bias correction of
    step 9 at step 1 (its first update 0.4888x the reference's). Bools and strings are
    settings, not state: they are left out."""
    out: dict[str, Any] = {}
    for k, v in vars(obj).items():
        if isinstance(v, bool):
            continue
        if isinstance(v, int | float | np.number):
            out[k] = v
        elif isinstance(v, np.ndarray) and v.size <= 1 << 16:
            out[k] = v.copy()
        elif type(v).__name__ == "Tensor" and hasattr(v, "clone") and hasattr(v, "detach") \
                and getattr(v, "numel", lambda: 1 << 20)() <= 1 << 16:
            out[k] = v.detach().clone()  # a PyTorch tensor held as an attribute
    return out


def restore_attributes(obj: Any, attrs: Mapping[str, Any]) -> None:
    """Set the attributes :func:`plain_attributes` copied back on ``obj`` (only those that
    changed: a framework's own bookkeeping is not touched for nothing)."""
    for k, v in attrs.items():
        cur = getattr(obj, k, None)
        same = (cur is v or (isinstance(v, int | float | np.number) and not isinstance(cur, bool)
                             and isinstance(cur, int | float | np.number) and cur == v))
        if not same:
            setattr(obj, k, v.copy() if isinstance(v, np.ndarray) else
                    v.clone() if hasattr(v, "clone") else v)


class Moments(Mapping[str, tuple[np.ndarray, str]]):
    """The per-parameter entries of an optimizer state (:meth:`FrameworkAdapter.optimizer_moments`)
    read one at a time: each lookup converts that entry to float64 (a fresh array), so a
    whole-model float64 copy of every moment is never held at once.

    Example:
        >>> m = Moments({"0.momentum_buffer": (np.ones(2, np.float32), "float32")},
        ...             lambda v: np.asarray(v, np.float64))
        >>> m["0.momentum_buffer"][0].dtype, len(m)
        (dtype('float64'), 1)
    """

    def __init__(self, raw: dict[str, tuple[Any, str]],
                 to_float64: Callable[[Any], np.ndarray]) -> None:
        self._raw, self._convert = raw, to_float64

    def __getitem__(self, key: str) -> tuple[np.ndarray, str]:
        v, dt = self._raw[key]
        return np.asarray(self._convert(v)).ravel(), dt

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __contains__(self, key: object) -> bool:
        return key in self._raw


class OptimizerStates(abc.ABC):
    """What a framework's optimizer watcher keeps (:meth:`FrameworkAdapter.watch_steps`): the
    optimizer's state just before each step (``states``; ``state`` the first) and, once
    :meth:`close` ran, the one after the last step (``final``), so that :meth:`after` is the
    state after any step. A subclass registers a hook that appends :meth:`_copy` before each
    step and keeps its handle in ``_handle``. ``quiet`` (a context-manager factory, e.g. a
    capture's ``paused``) is for copies that would otherwise be recorded as ops of the step."""

    def __init__(self, optimizer: Any) -> None:
        self.states: Any = []  # a list, or a disk-backed one (keep_on_disk)
        self.quiet: Callable[[], Any] | None = None
        self._final: Any = None
        self._store: Any = None
        self._opt: Any = optimizer
        self._handle: Any = None

    def keep_on_disk(self, store: Any) -> None:
        """Keep the states in ``store`` (a :class:`netparity.statestore.StateStore`)
        instead of memory: each is written as it is taken and read back (a fresh copy) each
        time it is looked up -- an Adam's states are two copies of the weights per step."""
        from netparity.statestore import KeptList

        kept = KeptList(store)
        for s in self.states:
            kept.append(s)
        self.states, self._store = kept, store
        if self._final is not None and not hasattr(self._final, "load"):
            self._final = store.keep(self._final)

    @property
    def final(self) -> Any:
        """The state after the last step (kept by :meth:`close`; a fresh copy when on disk)."""
        return self._final.load() if hasattr(self._final, "load") else self._final

    @abc.abstractmethod
    def _copy(self, optimizer: Any) -> Any:
        """The optimizer's state now, in this framework's format (a copy)."""

    def _live(self, optimizer: Any) -> Any:
        """The optimizer's state now as :meth:`_copy` gives it, but holding the optimizer's
        own tensors where the framework allows (no copy): only for writing it to disk at once,
        before the optimizer changes it. Default: :meth:`_copy`."""
        return self._copy(optimizer)

    def _take(self, optimizer: Any) -> Any:
        """The state now, to keep: a copy in memory, or on disk (:meth:`keep_on_disk`) the
        live state written as it is -- no copy in memory first (an Adam's state is two copies
        of the weights: a 300M-parameter model's, 2.3 GB at each step)."""
        if self._store is None:
            return self._copy(optimizer)
        with self.quiet() if self.quiet is not None else contextlib.nullcontext():
            return self._store.keep(self._live(optimizer))

    @property
    def state(self) -> Any:
        """The state before the first step (``None`` until it ran)."""
        return self.states[0] if self.states else None

    def after(self, step: int) -> Any:
        """The state after step ``step`` (before the next one, or kept by :meth:`close`)."""
        if step + 1 < len(self.states):
            return self.states[step + 1]
        return self.final if step + 1 == len(self.states) else None

    def close(self) -> None:
        """Remove the hook (never from inside it: the optimizer is iterating its hooks) and
        keep the state after the last step."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        if self._opt is not None and self.states:
            self._final = self._take(self._opt)
        self._opt = None


class FrameworkAdapter(abc.ABC):
    """The contract between netparity and one framework. The NumPy adapter is the reference.

    Class attributes:
        name: short name used in manifests (``"torch"``, ``"mindspore"``, ``"numpy"``).
        module: the top-level module whose presence in ``sys.modules`` makes this adapter a
            candidate for an object (frameworks are never imported just to test an object).
    """

    name: ClassVar[str] = "base"
    module: ClassVar[str] = ""

    # ---- detection -------------------------------------------------------------------------
    @abc.abstractmethod
    def is_tensor(self, obj: Any) -> bool:
        """True for this framework's tensors (and parameters), subclasses included."""

    def is_model(self, obj: Any) -> bool:
        """True for this framework's models (``nn.Module``, ``nn.Cell``), subclasses included:
        a third-party class deriving from the framework's base is a model of the framework."""
        return False

    def is_optimizer(self, obj: Any) -> bool:
        """True for this framework's optimizers."""
        return False

    def owns(self, obj: Any) -> bool:
        """True for any object of this framework (tensor, model or optimizer)."""
        return self.is_tensor(obj) or self.is_model(obj) or self.is_optimizer(obj)

    # ---- tensors ---------------------------------------------------------------------------
    @abc.abstractmethod
    def dtype_name(self, t: Any) -> str:
        """Canonical dtype name (see :mod:`netparity.dtypes`), mapped from the dtype object by
        identity, never from ``str()`` (a third-party library may patch a dtype's ``__str__``)."""

    def shape(self, t: Any) -> tuple[int, ...]:
        return tuple(int(d) for d in t.shape)

    @abc.abstractmethod
    def to_numpy(self, t: Any) -> np.ndarray:
        """Host copy of ``t`` in its storage dtype (bf16 as uint16 bits)."""

    def stats_handle(self, t: Any) -> Any:
        """Start computing statistics of ``t`` on its own device; returns an opaque handle.

        Must not synchronise the device: the host fetch happens in :meth:`resolve_stats`.
        """
        return host_stats(self.to_numpy(t), self.dtype_name(t))

    def resolve_stats(self, handles: list[Any]) -> list[dict[str, Any]]:
        """Fetch many statistics handles to the host at once (one transfer, not one per tensor)."""
        return list(handles)

    def snapshot(self, t: Any) -> tuple[Callable[[], np.ndarray], int]:
        """Copy ``t`` now (it may be mutated in place later) and return a host-copy thunk.

        The thunk runs on the trace writer's thread and returns the tensor's *storage* array
        (see :func:`netparity.dtypes.storage_dtype`); the int is its size in bytes.
        """
        arr = np.array(self.to_numpy(t), copy=True)
        return (lambda: arr), arr.nbytes

    def from_numpy(self, arr: np.ndarray) -> Any:
        """A tensor of this framework holding ``arr`` (to record data batches)."""
        return np.ascontiguousarray(arr)

    def scalar(self, value: float) -> Any:
        """A float32 scalar tensor holding ``value`` (to record a loss)."""
        return np.float32(value)

    # ---- models ----------------------------------------------------------------------------
    def named_parameters(self, model: Any) -> Iterator[tuple[str, Any]]:
        """``(name, parameter)`` of every parameter (trainable or not) of ``model``."""
        raise self._unsupported("model walking")

    def named_modules(self, model: Any) -> Iterator[tuple[str, Any]]:
        """``(path, submodule)`` of ``model`` and all its submodules (root first, path ``""``)."""
        raise self._unsupported("model walking")

    def param_counts(self, model: Any) -> ParamCounts:
        """Parameter counts, BatchNorm statistics counted as buffers on every framework."""
        raise self._unsupported("parameter counts")

    def model_state(self, model: Any) -> list[tuple[str, np.ndarray, str]]:
        """``(name, storage array, canonical dtype)`` of every saved tensor, in the model's
        order, copied bit for bit (bfloat16 as uint16 bits): what a checkpoint of it holds."""
        raise self._unsupported("reading a model's state")

    def model_layout(self, model: Any) -> tuple[dict[str, str], dict[str, bool]]:
        """``({module path: canonical layer type}, {tensor name: trainable})`` for the modules
        that hold saved tensors (the checkpoint name mapper's view of a model)."""
        raise self._unsupported("walking a model's layers")

    def set_weights(self, model: Any, arrays: Mapping[str, np.ndarray],
                    dtypes: Mapping[str, str]) -> list[str]:
        """Copy ``arrays`` into the parameters of the same names (cast to their dtypes)."""
        raise self._unsupported("setting weights")

    def optimizer_settings(self, optimizer: Any, model: Any) -> dict[str, dict[str, Any]]:
        """Per-parameter ``{"weight_decay", "momentum", "lr"}``; empty when unknown."""
        return {}

    def run_module(self, model: Any, path: str, inputs: Sequence[tuple[str, np.ndarray, str]],
                   train: bool = True) -> list[tuple[str, np.ndarray]]:
        """Call the submodule at ``path`` (``""``: the model) on given tensors, without
        gradients, and return its outputs: the replay behind "introduced here" (see
        :mod:`netparity.analyzers.replay`).

        ``inputs`` are ``(argument path, values, canonical dtype)`` as a capture records them
        (``0``, ``1`` positional, ``kw.name`` keyword); the submodule runs in training mode when
        ``train`` (its mode is restored afterwards). Outputs come back flattened under the same
        argument convention (``""`` for a single tensor), as float32/float64/integer arrays.
        Raises :class:`FrameworkError` when the call cannot be rebuilt from tensors alone
        (nested arguments) or the path names no submodule.
        """
        return self._unit("replay", "replaying a module").run_module(
            model, path, inputs, train)

    def run_module_backward(self, model: Any, path: str,
                            inputs: Sequence[tuple[str, np.ndarray, str]],
                            grad_outputs: Sequence[tuple[str, np.ndarray]],
                            train: bool = True,
                            params: bool = False) -> list[tuple[str, np.ndarray]]:
        """The backward of :meth:`run_module`: call the submodule on ``inputs``, feed
        ``grad_outputs`` (``(output argument path, gradient)``) back through it and return the
        gradients with respect to its floating-point inputs, ``(input argument path, array)``;
        with ``params`` also those of its own trainable parameters (not its children's),
        ``("param:<full name in the model>", array)``: what this call adds to them.
        """
        return self._unit("replay", "replaying a module's backward").run_module_backward(
            model, path, inputs, grad_outputs, train, params=params)

    def rounding_jitter(self, model: Any, path: str, seed: int) -> Any:
        """A context manager under which every module *inside* the submodule ``path`` (not
        the submodule itself) moves its float outputs one unit in the last place, up or down at
        random (seeded by ``seed``), and the gradients flowing back into them likewise: replayed
        in it, a container samples the rounding another implementation makes at each of its
        layers, not only at its inputs and weights (see :mod:`netparity.workflow.replay`).
        Frameworks without it give a context that changes nothing."""
        try:
            unit = self._unit("replay", "rounding jitter")
        except FrameworkError:
            return contextlib.nullcontext()
        fn = getattr(unit, "rounding_jitter", None)
        return contextlib.nullcontext() if fn is None else fn(model, path, seed)

    def in_float64(self, model: Any, path: str) -> Any:
        """A context manager under which the submodule ``path``'s floating parameters and
        buffers are float64 (each restored to its own dtype on exit, values unchanged: a
        float32 value survives the round trip), so a replay given float64 inputs computes in
        float64 -- the golden run a replay's candidate is held to when it computes in a finer
        precision than the reference (:mod:`netparity.workflow.replay`). Raises
        :class:`FrameworkError` for frameworks without it."""
        fn = getattr(self._unit("replay", "a float64 replay"), "in_float64", None)
        if fn is None:
            raise FrameworkError(f"{self.name}: no float64 replay of a module")
        return fn(model, path)

    def run_op(self, native: str, inputs: Sequence[tuple[str, np.ndarray, str]],
               scalars: Mapping[str, Any],
               op_info: Mapping[str, Any] | None = None) -> list[tuple[str, np.ndarray]]:
        """Call the operator a capture recorded as ``native`` (PyTorch: the aten overload,
        ``aten.convolution.default``; MindSpore: the primitive's name, built again from
        ``op_info``) on given tensors and its recorded non-tensor arguments (``scalars``:
        argument path -> value, as the op record's ``extra["scalars"]`` holds them; ``op_info``:
        the record's ``extra["prim"]``, MindSpore's primitive class and constructor arguments)
        and return its outputs (``(output argument path, array)``): op-level replay.
        Raises :class:`FrameworkError` when the call cannot be rebuilt (an argument missing
        from the trace). An op that writes into its arguments writes into copies."""
        return self._unit("replay", "replaying an operator").run_op(
            native, inputs, dict(scalars), dict(op_info) if op_info is not None else None)

    def watch_steps(self, optimizer: Any) -> Any:
        """Start keeping ``optimizer``'s state as it is just before each of its steps; the
        returned object's ``.states`` lists them (``.state``: the first one) in this framework's
        format, for :meth:`replay_step`; setting its ``quiet`` to a context-manager factory
        (a capture's ``paused``) keeps the copies out of an op-level capture; its ``close()``
        removes the hook and keeps the state after the last step, so that ``.after(k)`` is the
        state after step ``k`` (the one before step ``k + 1``; None when not kept)."""
        return self._unit("optreplay", "optimizer replay").StepStates(optimizer)

    def watch_first_step(self, optimizer: Any) -> Any:
        """:meth:`watch_steps` (its ``.state`` is the state before the first step)."""
        return self.watch_steps(optimizer)

    def replay_step(self, optimizer: Any, model: Any, state: Any,
                    grads: Mapping[str, np.ndarray], keep_state: bool = False,
                    owned: bool = False) -> Any:
        """One optimizer step from ``state`` (kept by :meth:`watch_steps`) with the
        model's parameters given ``grads`` (by name); the parameters keep the stepped values,
        the optimizer its own state. With ``keep_state`` returns the optimizer's state after
        the step (same format), to replay the next step from. ``owned``: ``state`` is a copy
        the caller gives away (read back from disk): it is loaded without another copy and
        may be changed."""
        return self._unit("optreplay", "optimizer replay").replay_step(
            optimizer, model, state, grads, keep_state, owned)

    def load_optimizer_state(self, optimizer: Any, state: Any) -> None:
        """Put ``state`` (format of :meth:`watch_steps`) into ``optimizer``; it keeps and
        updates ``state``'s arrays (pass a copy to keep one). Optimizer replay swaps a small
        state in for the optimizer's own while it runs (an Adam's are two copies of the
        weights) and puts the one after the last step back after."""
        self._unit("optreplay", "optimizer replay").load_state(optimizer, state)

    def optimizer_moments(self, optimizer: Any, state: Any) -> dict[str, tuple[np.ndarray, str]]:
        """The per-parameter arrays of an optimizer state (format of :meth:`watch_steps`:
        momentum buffers, Adam moments) as (float64 values, stored dtype), by a key stable
        across states of one optimizer; step counters, learning rates and other settings are
        left out. Optimizer replay reads the gradients the optimizer was given off them
        (clipping, a loss scale)."""
        return self._unit("optreplay", "optimizer replay").moments(optimizer, state)

    def optimizer_loss_scale(self, optimizer: Any) -> float:
        """The factor an optimizer divides the gradients it is given by itself before its
        update (MindSpore's ``Optimizer(loss_scale=...)``), 1 for those that take them as they
        are (PyTorch's). Optimizer replay needs it to tell a loss scale undone inside the
        optimizer from gradients handed over at another scale."""
        v = getattr(optimizer, "loss_scale", 1.0)
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) \
            and v > 0 else 1.0

    def merge_optimizer_state(self, optimizer: Any, moments: Any, settings: Any) -> Any:
        """An optimizer state (format of :meth:`watch_steps`) with the per-parameter entries
        (momentum buffers, Adam moments) of ``moments`` and the rest (learning rates, step
        counters, hyper-parameters the training code set) of ``settings``: a replayed
        optimizer's state carried to the next step, with that step's settings."""
        return self._unit("optreplay", "optimizer replay").merge_state(
            optimizer, moments, settings)

    # ---- capture ---------------------------------------------------------------------------
    def capture(self, model: Any, path: str | os.PathLike[str], **kwargs: Any) -> Any:
        """Start a capture of ``model`` into the trace directory ``path`` (a CaptureSession)."""
        raise self._unsupported("capture")

    def capture_defaults(self) -> dict[str, Any]:
        """Capture keyword arguments a workflow that owns its process should pass (e.g.
        MindSpore on CPU: ``launch_blocking=True``); empty by default."""
        return {}

    # ---- checkpoints -----------------------------------------------------------------------
    def read_checkpoint(self, path: Path, *, shapes_only: bool = False) -> CheckpointData:
        """Read this framework's own checkpoint file (arrays in storage dtypes; with
        ``shapes_only`` zero-stride stand-ins of the right shape and dtype, no data read)."""
        raise self._unsupported("reading checkpoints")

    def write_checkpoint(self, path: Path, items: list[tuple[str, str, np.ndarray]]) -> None:
        """Write ``(name, canonical dtype, storage array)`` items with the framework's writer."""
        raise self._unsupported("writing checkpoints")

    # ---- run facts and seeding -------------------------------------------------------------
    def facts(self) -> dict[str, Any]:
        """Manifest facts: framework, framework_version, device, precision flags."""
        return {"framework": self.name}

    def model_facts(self, model: Any) -> dict[str, Any]:
        """Manifest facts of one model (mixed-precision settings...)."""
        return {}

    def seed(self, seed: int, deterministic: bool = True) -> dict[str, Any]:
        """Seed this framework's generators (and ask for determinism); return what was set."""
        return {}

    def _unit(self, unit: str, what: str) -> Any:
        """The framework subpackage's module ``unit`` (e.g. ``netparity.frameworks.torch.replay``),
        imported on first use; a framework without it does not support ``what``."""
        try:
            return importlib.import_module(f"netparity.frameworks.{self.name}.{unit}")
        except ModuleNotFoundError as e:
            if e.name != f"netparity.frameworks.{self.name}.{unit}":
                raise
            raise self._unsupported(what) from None

    def _unsupported(self, what: str) -> FrameworkError:
        return FrameworkError(f"{what} is not supported for {self.name} objects")
