"""Specs: small Python files that describe one side of a migration for ``netparity step``.

A spec is a Python file (or importable module) with a function ``build(**options)`` returning a
dict. Required keys:

``framework``   ``"torch"`` or ``"mindspore"``
``model``       the network (``nn.Module`` / ``nn.Cell``) with its initial weights
``batches``     a list of ``(inputs, labels)`` numpy arrays, deterministic: no shuffling, no
                random augmentation (the workflow compares them between the sides)
``train_step``  ``callable(inputs, labels) -> float``: forward, loss, backward and optimizer
                update for one batch, with this side's learning-rate schedule
Optional keys: ``optimizer`` (lets capture mark the update phase), ``eval`` (``callable() ->
dict`` of metrics such as ``loss``/``top_1_accuracy``: evaluation on ``batches``),
``lr_schedule`` (list of per-step learning rates, shown in reports), ``name_map``
(``{this side's parameter name: reference name}``, used when automatic mapping is ambiguous),
``description``, ``compile`` (run this side compiled: ``torch.compile`` / ``mindspore.jit``; also
an option of every spec, ``--cand-opt compile=true``: :mod:`netparity.workflow.compiled`).

The built-in ResNet specs (``netparity.examples.resnet.specs.torch_spec`` / ``ms_spec``) are
templates to copy.

Example:
    >>> spec = load_spec("netparity.examples.resnet.specs.torch_spec", depth=18)  # doctest: +SKIP
    >>> spec.framework                                                              # doctest: +SKIP
    'torch'
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from netparity.errors import NetparityError, UsageError
from netparity.precision.emulate import KEY as EMULATE_KEY
from netparity.precision.emulate import emulated, mark
from netparity.untrusted import load_json
from netparity.workflow.compiled import compile_model, pop_compile, pop_request

REQUIRED = ("framework", "model", "batches", "train_step")


@dataclass
class Spec:
    """One side of a migration, as built by a spec file."""

    source: str
    framework: str
    model: Any
    batches: list[tuple[np.ndarray, np.ndarray]]
    train_step: Callable[[Any, Any], float]
    optimizer: Any = None
    eval: Callable[[], dict[str, Any]] | None = None
    lr_schedule: list[float] | None = None
    name_map: dict[str, str] | None = None
    description: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


def _import(source: str) -> Any:
    """Import a spec from a file path or a dotted module name."""
    p = Path(source)
    if source.endswith(".py") or p.exists():
        if not p.is_file():
            raise UsageError(f"{source}: spec file not found")
        # the spec's own directory is importable, as for `python spec.py`: a spec often imports
        # a helper module that sits next to it
        folder = str(p.resolve().parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        name = f"netparity_spec_{abs(hash(str(p.resolve())))}"
        spec = importlib.util.spec_from_file_location(name, p)
        if spec is None or spec.loader is None:
            raise UsageError(f"{source}: cannot load as a Python file")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        try:
            spec.loader.exec_module(mod)
        except SyntaxError as e:
            raise UsageError(f"{source}:{e.lineno}: syntax error in spec ({e.msg})") from None
        return mod
    try:
        return importlib.import_module(source)
    except ModuleNotFoundError as e:
        if e.name and source.startswith(e.name):
            raise UsageError(f"{source}: no such spec file or module") from None
        raise


def _accepts(fn: Any, name: str) -> bool:
    """Whether ``fn`` takes a keyword argument ``name`` (by name or through ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
               or p.kind == p.VAR_KEYWORD for p in params)


def load_spec(source: str | os.PathLike[str], *, defaults: dict[str, Any] | None = None,
              **options: Any) -> Spec:
    """Build one side from a spec file or module; validates the returned dict (one-line errors).

    Args:
        source: a ``.py`` path or a dotted module name with ``build(**options)``.
        defaults: passed to ``build`` when it accepts them and ``options`` do not set them
            (the workflow's ``steps``: a spec that prepares batches and an LR schedule per step
            needs to know how many).
        options: passed to ``build``.
    """
    src = os.fspath(source)
    mod = _import(src)
    build = getattr(mod, "build", None)
    if not callable(build):
        raise UsageError(f"{src}: a spec must define build(**options) -> dict")
    for k, v in (defaults or {}).items():
        if k not in options and _accepts(build, k):
            options[k] = v
    how, build_options = pop_compile(build, options)
    emulate, build_options = pop_request(build, build_options, EMULATE_KEY)
    emulate = str(emulate) if emulate not in (None, "", False) else None
    try:
        d = build(**build_options)
    except NetparityError:
        raise
    except TypeError as e:
        if "unexpected keyword" in str(e) or "got an unexpected" in str(e):
            raise UsageError(f"{src}: {e}") from None
        raise
    if not isinstance(d, dict):
        raise UsageError(f"{src}: build() must return a dict, not {type(d).__name__}")
    missing = [k for k in REQUIRED if k not in d]
    if missing:
        raise UsageError(f"{src}: build() result lacks {', '.join(missing)}")
    if d["framework"] not in ("torch", "mindspore"):
        raise UsageError(f"{src}: framework must be 'torch' or 'mindspore', not {d['framework']!r}")
    batches = []
    for i, b in enumerate(d["batches"]):
        if not (isinstance(b, (tuple, list)) and len(b) == 2):
            raise UsageError(f"{src}: batch {i} must be an (inputs, labels) pair")
        batches.append((np.asarray(b[0]), np.asarray(b[1])))
    if not batches:
        raise UsageError(f"{src}: build() returned no batches")
    known = {"framework", "model", "batches", "train_step", "optimizer", "eval", "lr_schedule",
             "name_map", "description", "options", "loss_fn", "compile"}
    compiled = compile_model(d["framework"], d["model"], d.get("compile", how), src)
    mark(d["model"], emulate)  # replay runs its modules under the same emulation
    return Spec(
        source=src,
        framework=d["framework"],
        model=d["model"],
        batches=batches,
        train_step=emulated(d["framework"], d["train_step"], emulate, src),
        optimizer=d.get("optimizer"),
        eval=d.get("eval"),
        lr_schedule=[float(x) for x in d["lr_schedule"]] if d.get("lr_schedule") is not None else None,
        name_map=d.get("name_map"),
        description=str(d.get("description", "")),
        options=dict(d.get("options") or options),
        extra={k: v for k, v in d.items() if k not in known} | (
            {"compiled": compiled, "compile": d.get("compile", how)} if compiled else {}),
    )


def parse_options(pairs: list[str] | None) -> dict[str, Any]:
    """CLI ``key=value`` pairs; values parsed as JSON when they are JSON (``depth=50``)."""
    out: dict[str, Any] = {}
    for item in pairs or []:
        if "=" not in item:
            raise UsageError(f"option {item!r} must look like key=value")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = load_json(v, what=f"option {k.strip()!r}")
        except ValueError:  # (ContentError is one) not JSON: the text itself
            out[k.strip()] = v
    return out
