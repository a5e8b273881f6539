"""Eager <-> compiled as a pair type: the ``compile`` option of a spec (``netparity step``).

``netparity step spec.py spec.py --cand-opt compile=true`` runs the same network eagerly (the
reference) and compiled (the candidate). The option is the workflow's, not the spec's (a spec
whose ``build`` takes ``compile`` itself handles it; a spec may also return ``"compile": ...``):

* PyTorch: ``model.compile(backend=...)`` in place (``true`` = inductor, a string names the
  backend), so the spec's own ``train_step`` runs the compiled model. The capture records the
  compiled model at its boundary (forward and backward) with the eager model's names, and every
  parameter's gradient and update (:mod:`netparity.frameworks.torch.compiled`).
* MindSpore: the network's ``construct`` wrapped in ``mindspore.jit`` (graph compilation of the
  whole network from PyNative: MindSpore's GRAPH_MODE for that Cell, without changing the global
  mode the other side runs in).

Example:
    >>> pop_compile(lambda **kw: {}, {"compile": True, "depth": 18})
    (True, {'depth': 18})
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from netparity.errors import UsageError

#: the spec option (and ``build()`` result key) that asks for the compiled run
KEY = "compile"


def pop_compile(build: Callable[..., Any], options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """(the ``compile`` request, the options left for ``build``); a ``build`` that names a
    ``compile`` argument keeps it (the request is then the spec's to honour: ``None``)."""
    return pop_request(build, options, KEY)


def pop_request(build: Callable[..., Any], options: dict[str, Any],
                key: str) -> tuple[Any, dict[str, Any]]:
    """(``options[key]``, the options left for ``build``) for an option netparity itself
    honours; ``(None, options)`` when absent or when ``build`` names ``key`` itself."""
    import inspect

    try:
        own = key in inspect.signature(build).parameters
    except (TypeError, ValueError):
        own = False
    if key not in options or own:
        return None, options
    rest = dict(options)
    return rest.pop(key), rest


def compile_model(framework: str, model: Any, how: Any, source: str) -> str | None:
    """Compile ``model`` in place as ``how`` asks (false/None: nothing); returns a one-line
    description for the manifest, or ``None`` when nothing was compiled."""
    if how in (None, False, 0, "", "false", "no", "eager"):
        return None
    if framework == "torch":
        backend = how if isinstance(how, str) and how not in ("true", "yes") else "inductor"
        if not callable(getattr(model, "compile", None)):
            raise UsageError(f"{source}: compile={how!r}: the model has no compile() "
                             "(torch >= 2.2 needed)")
        model.compile(backend=backend)
        return f"torch.compile(backend={backend!r})"
    if framework == "mindspore":
        from netparity.frameworks.mindspore.graph import jit_construct

        jit_construct(model)
        return "mindspore.jit(construct)"
    raise UsageError(f"{source}: compile is not supported for framework {framework!r}")


@dataclass
class CompiledBisection:
    """Where a compiled run's difference from its eager run starts (:func:`bisect_compiled`).

    Attributes:
        region: path of the smallest module whose compilation alone (the rest eager) reproduces
            the difference (``""``: the whole model; ``None``: no difference to bisect).
        native: its class.
        full: the whole model compiled: largest relative difference from eager (outputs and
            parameter gradients of one forward/backward on the first batch).
        tried: ``[path, difference]`` of each region compiled alone, in order.
        compiler: ``torch._inductor.compiler_bisector``'s answer on that region (``backend``:
            the first backend that reproduces -- ``eager`` means dynamo's graph capture, before
            any compiler; ``subsystem``/``bisect_number``: the compiler pass), or ``None``.
    """

    region: str | None
    native: str = ""
    full: float = 0.0
    tried: list[list[Any]] = field(default_factory=list)
    compiler: dict[str, Any] | None = None

    def line(self) -> str:
        """One line for the step report's notes."""
        if self.region is None:
            return (f"compiled vs eager: no difference beyond rounding in one forward/backward "
                    f"(largest {self.full:.3g})")
        where = self.region or "<root>"
        s = (f"compiled vs eager: the smallest compiled region that reproduces the difference "
             f"is {where} ({self.native}), compiled alone ({self.full:.3g} relative with the "
             f"whole model compiled)")
        c = self.compiler
        if c:
            s += f"; torch's compiler bisector: first backend that reproduces it {c['backend']!r}"
            if c.get("backend") == "eager":
                s += " (dynamo's graph capture, before any compiler)"
            if c.get("subsystem"):
                s += f", pass {c['subsystem']!r} #{c.get('bisect_number')}"
        return s


def _difference(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    worst = 0.0
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return float("inf")
        d = float(np.linalg.norm((x - y).ravel()))
        worst = max(worst, d / max(float(np.linalg.norm(y.ravel())), 1e-30))
    return worst if len(a) == len(b) else float("inf")


def bisect_compiled(source: str, options: dict[str, Any] | None = None, *,
                    backend: str = "inductor", rtol: float = 1e-4,
                    compiler_bisector: bool = True) -> CompiledBisection:
    """Find the smallest compiled region of a PyTorch spec's model that differs from eager.

    One forward on the spec's first batch and a backward of the outputs' sum, seeded alike,
    compares outputs and parameter gradients with the eager run's. The whole model compiled
    gives the difference ``full``; a region *reproduces* it when, compiled alone (the rest
    eager), it gives at least half of it. From the root, the first child that reproduces is
    entered, until no child does (the difference needs the region's children compiled together)
    or the region is a leaf. ``torch._inductor.compiler_bisector`` then bisects the compiler on
    that region alone (which backend and pass), where ``compiler_bisector``.

    Example:
        >>> r = bisect_compiled("tests/compiled/specs/tiny_torch.py",       # doctest: +SKIP
        ...                     {"bug": "compiled-eps"})
        >>> r.region                                                         # doctest: +SKIP
        '2'
    """
    import copy

    from netparity.frameworks.torch.compiled import (
        compile_region,
        compiler_bisect,
        outputs_and_grads,
        reset_compiler,
    )
    from netparity.workflow.spec import load_spec

    opts = {k: v for k, v in (options or {}).items() if k != KEY}
    spec = load_spec(source, **opts)
    if spec.framework != "torch":
        raise UsageError(f"{source}: bisecting compiled regions needs a PyTorch spec")
    base = copy.deepcopy(spec.model)
    x = spec.batches[0][0]
    ref = outputs_and_grads(copy.deepcopy(base), x)

    def compiled_alone(path: str) -> float:
        return _difference(outputs_and_grads(compile_region(base, path, backend), x), ref)

    full = compiled_alone("")
    out = CompiledBisection(region=None, full=full, tried=[["", full]])
    if full <= rtol:
        return out
    region = ""
    while True:
        children = [f"{region}.{n}" if region else n
                    for n, _ in base.get_submodule(region).named_children()]
        for c in children:
            d = compiled_alone(c)
            out.tried.append([c, d])
            if d >= full / 2:
                region = c
                break
        else:
            break
    out.region, out.native = region, type(base.get_submodule(region)).__name__
    if compiler_bisector:
        res = compiler_bisect(lambda: compiled_alone(region) < full / 2)
        if res is not None:
            out.compiler = res
    reset_compiler()
    return out




def name_compiled_region(result: Any, ref: Any, cand: Any, say: Any) -> None:
    """After ``netparity step`` of eager vs compiled (the workflow's ``compile`` option on one
    side, PyTorch): when the forward, loss or backward phase diverges, bisect the compiled
    side's model (:func:`bisect_compiled`) and name the smallest compiled region in the first
    diverging phase (``where``, ``summary``, ``evidence["compiled_region"]``) and the notes."""
    first = next((p for p in result.phases if p.status == "fail"
                  and p.name in ("forward", "loss", "backward", "later-steps")), None)
    sides = [s for s in (cand, ref) if s.extra.get(KEY) not in (None, False) and
             s.framework == "torch"]
    if first is None or not sides:
        return
    side = sides[0]
    how = side.extra[KEY]
    say.stage("bisect the compiled regions")
    b = bisect_compiled(side.source, side.options,
                        backend=how if isinstance(how, str) and how not in ("true", "yes")
                        else "inductor")
    line = b.line()
    result.notes.append(line)
    first.evidence["compiled_region"] = {"region": b.region, "native": b.native,
                                         "full": b.full, "tried": b.tried,
                                         "compiler": b.compiler}
    if b.region:  # (the root is where the phase already points)
        first.where = b.region
    first.summary = f"{first.summary}; {line}" if first.summary else line
