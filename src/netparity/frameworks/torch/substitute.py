"""Module substitution for ``netparity bisect`` (PyTorch): pin random layers, observe which
modules a step calls and in what order, and replace chosen modules' outputs by another
implementation's (the reference's module, in the reference's configuration) while a step runs.

The replacement is a forward hook that returns the new output: the candidate's module still
runs (its output is discarded), so whatever the module does to the step's state (BatchNorm
running statistics) happens as before, and hooks are removed on exit, even on exceptions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import _disable_current_modes

from netparity.frameworks._substitute import observe as _observe

#: module classes (by name) that draw random numbers: pinned (probability 0) on both sides
RANDOM_LAYERS = ("Dropout", "DropPath", "DropBlock")
#: classes that compute nothing once random layers are pinned: never a region to bisect
PASSIVE = ("Identity", *RANDOM_LAYERS)

Inputs = list[tuple[str, np.ndarray, str]]


def pin_random(model: torch.nn.Module) -> list[str]:
    """Set every dropout-like module's probability to 0 (the same masks on both sides: none);
    returns their paths."""
    pinned = []
    for name, m in model.named_modules():
        if any(k in type(m).__name__ for k in RANDOM_LAYERS):
            for attr in ("p", "drop_prob"):
                if isinstance(getattr(m, attr, None), float) and getattr(m, attr) > 0:
                    setattr(m, attr, 0.0)
                    pinned.append(name)
    return pinned


def _flat(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[tuple[str, Any]] | None:
    """``(argument path, tensor)`` of a call whose arguments are all tensors (or ``None``
    keywords); ``None`` when one is not (the call cannot be rebuilt from tensors)."""
    out: list[tuple[str, Any]] = []
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            return None
        out.append((str(i), a))
    for k, v in kwargs.items():
        if v is None:
            continue
        if not isinstance(v, torch.Tensor):
            return None
        out.append((f"kw.{k}", v))
    return out


def _outputs(out: Any) -> list[torch.Tensor] | None:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, tuple | list) and out and all(isinstance(t, torch.Tensor) for t in out):
        return list(out)
    return None


def observe(model: torch.nn.Module, run: Callable[[], Any]) -> dict[str, dict[str, Any]]:
    """Run ``run()`` with every module watched (see
    :func:`netparity.frameworks._substitute.observe`)."""

    def install(m: Any, on_call: Callable[..., None], on_return: Callable[..., None]) -> list[Any]:
        return [m.register_forward_pre_hook(on_call, with_kwargs=True),
                m.register_forward_hook(on_return, with_kwargs=True)]

    return _observe(model.named_modules(), install,
                    lambda a, k, o: _flat(a, k) is not None and _outputs(o) is not None,
                    PASSIVE, run)


def _host(t: torch.Tensor) -> np.ndarray:
    x = t.detach().cpu()
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    return np.array(x.numpy(), copy=True)


def as_inputs(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Inputs:
    """A call's tensors as ``(argument path, array, dtype)`` (the replay convention)."""
    flat = _flat(args, kwargs) or []
    return [(a, _host(t), str(t.dtype).removeprefix("torch.")) for a, t in flat]


def like(arrays: list[np.ndarray], out: Any) -> Any:
    """``arrays`` shaped as the module's own output ``out`` (a tensor or a tuple of them), each
    in the dtype and on the device of the tensor it replaces."""
    outs = _outputs(out) or []
    new = [torch.from_numpy(np.ascontiguousarray(a).reshape(tuple(o.shape))).to(o.device, o.dtype)
           for a, o in zip(arrays, outs, strict=True)]
    return new[0] if isinstance(out, torch.Tensor) else type(out)(new)


def native_call(ref_model: torch.nn.Module, path: str, dtype_name: str) -> Callable[..., Any]:
    """A substitute that calls the reference's own module ``path`` (same framework) in the
    reference configuration: autocast and dispatch modes (``--emulate``) off, floating inputs in ``dtype_name`` and on its device;
    the result cast back to the candidate's output dtypes and device. The autograd graph is
    kept (the candidate's backward runs through the reference's module)."""
    ref_module = ref_model.get_submodule(path) if path else ref_model
    dtype = getattr(torch, dtype_name)
    dev = next((p.device for p in ref_module.parameters()), torch.device("cpu"))

    def conv(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return v.to(dev, dtype)
        return v.to(dev) if isinstance(v, torch.Tensor) else v

    def call(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> Any:
        # the reference configuration: no autocast, and no dispatch mode (``--emulate``)
        with _no_autocast(), _disable_current_modes():
            got = ref_module(*[conv(a) for a in args], **{k: conv(v) for k, v in kwargs.items()})
        mine, theirs = _outputs(out), _outputs(got)
        if mine is None or theirs is None or len(mine) != len(theirs):
            return got
        new = [t.to(o.device, o.dtype) for t, o in zip(theirs, mine, strict=True)]
        return new[0] if isinstance(out, torch.Tensor) else type(out)(new)

    return call


@contextmanager
def _no_autocast() -> Iterator[None]:
    kinds = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    ctxs = [torch.autocast(device_type=k, enabled=False) for k in kinds]
    for c in ctxs:
        c.__enter__()
    try:
        yield
    finally:
        for c in reversed(ctxs):
            c.__exit__(None, None, None)


@contextmanager
def substituted(model: torch.nn.Module,
                subs: Mapping[str, Callable[[tuple[Any, ...], dict[str, Any], Any], Any]]
                ) -> Iterator[None]:
    """While the context lasts, the output of each module ``path`` of ``subs`` is what
    ``subs[path](args, kwargs, own_output)`` returns."""
    mods = dict(model.named_modules())
    handles = []
    try:
        for path, fn in subs.items():
            handles.append(mods[path].register_forward_hook(
                lambda m, a, k, o, fn=fn: fn(a, k, o), with_kwargs=True))
        yield
    finally:
        for h in handles:
            h.remove()


__all__ = ["PASSIVE", "RANDOM_LAYERS", "as_inputs", "like", "native_call", "observe",
           "pin_random", "substituted"]
