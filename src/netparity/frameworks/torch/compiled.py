"""``torch.compile``d models under capture: what is hooked, what is named, and the eager inside.

A compiled region is a module wrapped by ``torch.compile(module)`` (an ``OptimizedModule``
holding the original as ``_orig_mod``) or compiled in place by ``module.compile()`` (its
``_compiled_call_impl`` set). Dynamo traces whatever Python runs inside such a region -- the
capture's own hooks included, which failed with an assertion deep in fake tensors -- and an
inductor kernel fuses the modules inside, so their boundaries do not exist at run time.

What the capture does about it (the one place: :func:`hooked_modules`, used by
``_common.hook_forward`` for every capture and the light non-finite guard):

* **the compiled module's boundary** is hooked like any module: forward inputs and outputs,
  and the backward gradients through tensor hooks on its outputs and input edges (they run
  eagerly, around the compiled graph's ``CompiledFunctionBackward``); parameters, their
  gradients and the optimizer update are seen as for an eager model;
* **modules inside** a compiled region get no hooks (nothing there can be observed without
  changing the compiled code); global module hooks (the zero-code launcher's) return at once
  while dynamo traces them (:func:`eager_only`), so they vanish from the graph;
* **names** are those of the eager model: ``_orig_mod`` path segments are dropped
  (:func:`clean_name`) and the boundary is recorded with the original module's class, so an
  eager trace and a compiled one align module for module;
* ``capture(..., compiled="eager")`` runs every compiled region eagerly for the whole capture
  (``torch.compiler.set_stance("force_eager")``): the inside is seen module by module and op by
  op, the numbers are eager numbers (the same step, not the compiled kernels). Op level implies
  it: under the capture's dispatch mode dynamo runs the regions eagerly anyway, so the trace
  says so rather than claim compiled numbers.

Example:
    >>> import torch
    >>> m = torch.nn.Sequential(torch.nn.Linear(2, 2))
    >>> clean_name("_orig_mod.0"), [n for n, _ in hooked_modules(torch.compile(m))]
    ('0', [''])
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

#: the attribute under which ``torch.compile(module)`` keeps the original module
ORIG = "_orig_mod"


def _optimized_type() -> type | None:
    try:
        from torch._dynamo.eval_frame import OptimizedModule
    except ImportError:  # a torch without dynamo: nothing is compiled
        return None
    return OptimizedModule


def is_compiled(module: torch.nn.Module) -> bool:
    """Whether ``module`` starts a compiled region (``torch.compile(m)`` or ``m.compile()``)."""
    opt = _optimized_type()
    return ((opt is not None and isinstance(module, opt))
            or getattr(module, "_compiled_call_impl", None) is not None)


def has_compiled(model: torch.nn.Module | None) -> bool:
    """Whether any module of ``model`` starts a compiled region."""
    return model is not None and any(is_compiled(m) for m in model.modules())


def unwrap(module: torch.nn.Module) -> torch.nn.Module:
    """The module ``torch.compile`` wrapped (``module`` itself when it wraps nothing)."""
    opt = _optimized_type()
    while opt is not None and isinstance(module, opt):
        module = getattr(module, ORIG)
    return module


def clean_name(name: str) -> str:
    """A module or parameter path without the ``_orig_mod`` segments of compiled wrappers.

    Example:
        >>> clean_name("body._orig_mod.0.weight"), clean_name("_orig_mod")
        ('body.0.weight', '')
    """
    if ORIG not in name:
        return name
    return ".".join(p for p in name.split(".") if p != ORIG)


def hooked_modules(model: torch.nn.Module, inside: bool = False
                   ) -> Iterator[tuple[str, torch.nn.Module]]:
    """``(path, module)`` for each module the capture hooks: every module outside compiled
    regions and each region's boundary (once: an ``OptimizedModule`` and the module it wraps
    are one boundary), never a module inside one -- unless ``inside`` (the regions run
    eagerly): then every module, still the wrapper and its ``_orig_mod`` once."""
    opt = _optimized_type()

    def walk(m: torch.nn.Module, path: str) -> Iterator[tuple[str, torch.nn.Module]]:
        yield path, m
        if is_compiled(m) and not inside:
            return
        if opt is not None and isinstance(m, opt):  # its _orig_mod is this same boundary
            m = unwrap(m)
        for name, child in m.named_children():
            yield from walk(child, f"{path}.{name}" if path else name)

    seen: set[int] = set()
    for path, m in walk(model, ""):
        if id(m) not in seen:
            seen.add(id(m))
            yield clean_name(path), m


def eager_only(hook: Callable[..., Any]) -> Callable[..., Any]:
    """``hook`` for a global module hook: it returns at once while dynamo traces it (then it
    leaves nothing in the graph), and runs as written in eager code."""
    is_compiling = torch.compiler.is_compiling

    @functools.wraps(hook)
    def run(*args: Any, **kwargs: Any) -> Any:
        if is_compiling():
            return None
        return hook(*args, **kwargs)

    return run


def boundary_hook(module: torch.nn.Module, hook: Callable[..., Any]) -> Callable[..., Any]:
    """``hook`` for a hook on ``module``: run eagerly when ``module`` is compiled in place
    (``module.compile()`` traces its own hooks; ``torch.compiler.disable`` makes dynamo call
    them as they are, outside the graph). Other modules' hooks are returned unchanged."""
    if getattr(module, "_compiled_call_impl", None) is not None:
        return torch.compiler.disable(hook)
    return hook


def force_eager() -> Callable[[], None]:
    """Run every compiled region eagerly from now on (the same step, eager kernels: the inside
    becomes observable); returns the function that restores the compiler's previous stance."""
    stance = torch.compiler.set_stance("force_eager")  # (set at construction)
    return lambda: stance.__exit__(None, None, None)


def compiled_facts(model: torch.nn.Module | None, mode: str) -> dict[str, Any]:
    """The manifest's ``compiled`` fact: the compiled regions' paths and what the capture saw
    of them (``mode``); empty for a model without compiled regions."""
    if model is None:
        return {}
    regions = [p for p, m in hooked_modules(model) if is_compiled(m)]
    if not regions:
        return {}
    return {"compiled": {"regions": regions, "mode": mode,
                         "sees": ("every module, run eagerly" if mode == "eager"
                                  else "compiled modules at their boundaries")}}


# -- eager vs compiled bisection (used by netparity.workflow.compiled) ------------------------


def outputs_and_grads(model: Any, x: Any) -> list[Any]:
    """One forward (seeded) and backward of the sum of ``model(x)``'s outputs: the outputs and
    every parameter's gradient, as float64 arrays (what a compiled region changes)."""
    import numpy as np
    import torch

    torch.manual_seed(0)
    out = model(torch.as_tensor(x))
    outs = [o for o in (out if isinstance(out, (tuple, list)) else [out])
            if isinstance(o, torch.Tensor)]
    sum(o.float().sum() for o in outs).backward()  # type: ignore[union-attr]
    got = [o.detach().double().numpy() for o in outs]
    got += [p.grad.double().numpy() if p.grad is not None else np.zeros(tuple(p.shape))
            for p in model.parameters()]
    return got


def compile_region(base: Any, path: str, backend: str) -> Any:
    """A deep copy of ``base`` whose submodule ``path`` ("" = the whole model) is compiled
    (the compiler's caches reset first: each region is a fresh compile)."""
    import copy

    import torch

    torch._dynamo.reset()
    m = copy.deepcopy(base)
    m.get_submodule(path).compile(backend=backend)
    return m


def compiler_bisect(reproduces: Any) -> dict[str, Any] | None:
    """``torch._inductor.compiler_bisector``'s answer for a predicate that is False while the
    difference reproduces: ``{"backend", "subsystem", "bisect_number"}`` or None."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from torch._inductor.compiler_bisector import CompilerBisector

    sink = io.StringIO()  # (the bisector prints its progress)
    with redirect_stdout(sink), redirect_stderr(sink):
        res = CompilerBisector.do_bisect(reproduces)
    if res is None:
        return None
    return {"backend": res.backend, "subsystem": res.subsystem,
            "bisect_number": res.bisect_number}


def reset_compiler() -> None:
    """Forget every compiled graph (torch._dynamo.reset)."""
    import torch

    torch._dynamo.reset()
