"""Replay one submodule of a PyTorch model on given tensors (``TorchAdapter.run_module`` and
``run_module_backward``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from netparity.errors import FrameworkError
from netparity.frameworks.base import call_arguments
from netparity.frameworks.torch._common import _flatten

_TORCH_DTYPES = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
                 "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32,
                 "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
                 "bool": torch.bool}


def _host(t: torch.Tensor) -> np.ndarray:
    x = t.detach().cpu()
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    return np.array(x.numpy(), copy=True)


def _submodule(model: torch.nn.Module, path: str) -> torch.nn.Module:
    try:
        return model.get_submodule(path) if path else model
    except AttributeError as e:
        raise FrameworkError(f"no submodule {path!r} in the model") from e


def _tensors(mod: torch.nn.Module,
             inputs: Sequence[tuple[str, np.ndarray, str]]) -> list[tuple[str, torch.Tensor]]:
    dev = next((p.device for p in mod.parameters()), torch.device("cpu"))
    out = []
    for arg, arr, dtype in inputs:
        want = _TORCH_DTYPES.get(dtype)
        if want is None:
            raise FrameworkError(f"argument {arg}: dtype {dtype} cannot be replayed")
        t = torch.from_numpy(np.array(arr, copy=True))  # trace payloads are read-only maps
        out.append((arg, t.to(device=dev, dtype=want)))
    return out


@contextmanager
def _mode(mod: torch.nn.Module, train: bool) -> Iterator[None]:
    modes = [(m, m.training) for m in mod.modules()]
    mod.train(train)
    try:
        yield
    finally:
        for m, was in modes:
            m.training = was


def _last_bit(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """``t`` with every element moved one ulp up or down at random (float tensors; finite
    values stay finite), as :func:`netparity.compare.noise.perturb_last_bit` does on arrays."""
    if not t.is_floating_point() or t.numel() == 0:
        return t
    with torch.no_grad():
        up = torch.rand(t.shape, generator=gen, device="cpu").to(t.device) < 0.5
        inf = torch.full((), float("inf"), dtype=t.dtype, device=t.device)
        hi, lo = torch.nextafter(t, inf), torch.nextafter(t, -inf)
        moved = torch.where(up, hi, lo)
        moved = torch.where(torch.isinf(moved) & torch.isfinite(t), torch.where(up, lo, hi),
                            moved)
    return t + (moved - t).detach()


@contextmanager
def rounding_jitter(model: torch.nn.Module, path: str, seed: int) -> Iterator[None]:
    """See :meth:`netparity.frameworks.base.FrameworkAdapter.rounding_jitter`."""
    mod = _submodule(model, path)
    gen = torch.Generator().manual_seed(seed)

    def moved(t: Any) -> Any:
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            return t
        out = _last_bit(t, gen)
        if out.requires_grad:
            out.register_hook(lambda g: _last_bit(g, gen))
        return out

    def hook(_m: torch.nn.Module, _args: Any, out: Any) -> Any:
        if isinstance(out, torch.Tensor):
            return moved(out)
        if isinstance(out, tuple | list):
            return type(out)(moved(o) for o in out)
        return out

    handles = [m.register_forward_hook(hook) for name, m in mod.named_modules() if name]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@contextmanager
def in_float64(model: torch.nn.Module, path: str) -> Iterator[None]:
    """See :meth:`netparity.frameworks.base.FrameworkAdapter.in_float64`."""
    mod = _submodule(model, path)
    held = [(t, t.data) for t in (*mod.parameters(), *mod.buffers()) if t.is_floating_point()]
    try:
        for t, data in held:
            t.data = data.to(torch.float64)
        yield
    finally:
        for t, data in held:
            t.data = data


def run_module(model: torch.nn.Module, path: str,
               inputs: Sequence[tuple[str, np.ndarray, str]],
               train: bool = True) -> list[tuple[str, np.ndarray]]:
    """See :meth:`netparity.frameworks.base.FrameworkAdapter.run_module`."""
    mod = _submodule(model, path)
    args, kwargs = call_arguments(_tensors(mod, inputs))
    with _mode(mod, train), torch.no_grad():
        out: Any = mod(*args, **kwargs)
    flat: list[tuple[str, torch.Tensor]] = []
    _flatten(out, "", flat)
    return [(a, _host(t)) for a, t in flat]


def run_module_backward(model: torch.nn.Module, path: str,
                        inputs: Sequence[tuple[str, np.ndarray, str]],
                        grad_outputs: Sequence[tuple[str, np.ndarray]],
                        train: bool = True, params: bool = False) -> list[tuple[str, np.ndarray]]:
    """See :meth:`netparity.frameworks.base.FrameworkAdapter.run_module_backward`."""
    mod = _submodule(model, path)
    prefix = f"{path}." if path else ""
    # its own parameters (not its children's: a child's gradients are its own replay's)
    owned = ([(f"param:{prefix}{n}", q) for n, q in mod.named_parameters(recurse=False)
              if q.requires_grad] if params else [])
    tensors = _tensors(mod, inputs)
    for _, t in tensors:
        if t.is_floating_point():
            t.requires_grad_(True)
    args, kwargs = call_arguments(tensors)
    with _mode(mod, train), torch.enable_grad():
        out: Any = mod(*args, **kwargs)
    flat: list[tuple[str, torch.Tensor]] = []
    _flatten(out, "", flat)
    given = dict(grad_outputs)
    outs = [(t, torch.from_numpy(np.array(given[a], copy=True)).to(t.device, t.dtype))
            for a, t in flat if a in given and t.requires_grad]
    wrt = [(a, t) for a, t in tensors if t.requires_grad] + owned
    if not outs or not wrt:
        raise FrameworkError("nothing to differentiate: no output gradient or no float input")
    grads = torch.autograd.grad([o for o, _ in outs], [t for _, t in wrt],
                                [g for _, g in outs], allow_unused=True)
    return [(a, _host(g) if g is not None else np.zeros(tuple(t.shape), np.float32))
            for (a, t), g in zip(wrt, grads)]


def _overload(native: str) -> Any:
    """The aten overload a capture recorded (``aten.convolution.default``)."""
    ns, _, rest = native.partition(".")
    name, _, overload = rest.partition(".")
    try:
        packet = getattr(getattr(torch.ops, ns), name)
        return getattr(packet, overload or "default")
    except (AttributeError, RuntimeError) as e:
        raise FrameworkError(f"no operator {native!r} in this PyTorch") from e


def _nest(values: dict[str, Any]) -> tuple[dict[int, Any], dict[str, Any]]:
    """Positional and keyword arguments from flattened argument paths (``0``, ``3.1``,
    ``kw.approximate``): a path with a second part is an element of a list argument."""
    pos: dict[int, Any] = {}
    kw: dict[str, Any] = {}
    for path, v in values.items():
        top, _, rest = (path[3:] if path.startswith("kw.") else path).partition(".")
        target: dict[Any, Any] = kw if path.startswith("kw.") else pos
        key: Any = top if path.startswith("kw.") else int(top)
        if not rest:
            target[key] = v
            continue
        if "." in rest:
            raise FrameworkError(f"argument {path!r} is nested twice; the call cannot be rebuilt")
        lst = target.setdefault(key, {})
        if not isinstance(lst, dict):
            raise FrameworkError(f"argument {path!r} is both a value and a list")
        lst[int(rest)] = v
    for target in (pos, kw):
        for key, v in list(target.items()):
            if isinstance(v, dict):
                if sorted(v) != list(range(len(v))):
                    raise FrameworkError(f"list argument {key!r} has a gap")
                target[key] = [v[i] for i in range(len(v))]
    return pos, kw


def _scalar(value: Any, type_str: str) -> Any:
    """A recorded non-tensor argument back in the type the schema wants (dtypes and devices
    were recorded as strings)."""
    if isinstance(value, str) and value.startswith("torch."):
        obj = getattr(torch, value[6:], None)
        if obj is not None:
            return obj
    if isinstance(value, str) and "Device" in type_str:
        return torch.device(value)
    return value


def run_op(native: str, inputs: Sequence[tuple[str, np.ndarray, str]],
           scalars: dict[str, Any], op_info: dict[str, Any] | None = None
           ) -> list[tuple[str, np.ndarray]]:
    """See :meth:`netparity.frameworks.base.FrameworkAdapter.run_op` (the aten overload named
    by ``native`` is the whole description of the operator: ``op_info`` is not needed)."""
    op = _overload(native)
    # An op that writes into its arguments (relu_, add_, out=, batch norm's running statistics)
    # writes into the fresh copies made here; its inputs were recorded before it ran and its
    # outputs after, so it is replayed like any other.
    values: dict[str, Any] = {}
    for arg, arr, dtype in inputs:
        want = _TORCH_DTYPES.get(dtype)
        if want is None:
            raise FrameworkError(f"argument {arg}: dtype {dtype} cannot be replayed")
        values[arg] = torch.from_numpy(np.array(arr, copy=True)).to(dtype=want)
    values.update({k: v for k, v in scalars.items() if k not in values})
    pos, kw = _nest(values)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for i, a in enumerate(op._schema.arguments):
        t = str(a.type)
        if a.kwarg_only:
            if a.name in kw:
                kwargs[a.name] = _scalar(kw.pop(a.name), t)
            continue
        if i in pos:
            args.append(_scalar(pos.pop(i), t))
        elif a.has_default_value():
            if any(j > i for j in pos):  # a later argument given: this one must be too
                args.append(a.default_value)
            else:
                break
        elif t.startswith("Optional["):
            args.append(None)  # None leaves no path when it was inside a list argument
        elif t.startswith("List["):
            args.append([])  # nor does an empty list
        else:
            raise FrameworkError(f"{native}: argument {a.name!r} is not in the trace (captured "
                                 "without its non-tensor arguments)")
    if pos or kw:
        raise FrameworkError(f"{native}: recorded arguments {sorted(map(str, pos))} "
                             f"{sorted(kw)} do not fit its schema")
    with torch.no_grad():
        out: Any = op(*args, **kwargs)
    flat: list[tuple[str, torch.Tensor]] = []
    _flatten(out, "", flat)
    return [(a, _host(t)) for a, t in flat]
