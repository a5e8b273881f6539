"""Which adapter handles an object: a registry keyed by the framework's module name.

Adding a framework = one subpackage under ``netparity.frameworks`` exporting ``Adapter`` (a
:class:`~netparity.frameworks.base.FrameworkAdapter`) + one line in :data:`FRAMEWORKS`.

Look-up never imports a framework: :func:`adapter_for` only considers frameworks whose module
is already in ``sys.modules`` (an object of a framework cannot exist before it is imported), and
tests an object with the adapter's ``isinstance`` checks, so subclasses from third-party
libraries (a model class deriving from ``torch.nn.Module`` / ``mindspore.nn.Cell``) are found.
Answers are cached per type. A module of a framework name in ``sys.modules`` that is not the
real framework (a stub, a half-installed package) is skipped, not an error: it cannot own the
object being asked about.

Example:
    >>> import numpy as np
    >>> adapter_for(np.zeros(3)).name
    'numpy'
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from netparity.errors import FrameworkError
from netparity.frameworks.base import FrameworkAdapter

#: framework module name -> netparity subpackage defining ``Adapter``, in look-up order.
#: NumPy comes last: framework tensors often also pass NumPy-ish checks, never the reverse.
FRAMEWORKS: dict[str, str] = {
    "torch": "netparity.frameworks.torch",
    "mindspore": "netparity.frameworks.mindspore",
    "numpy": "netparity.frameworks.numpy",
}

_INSTANCES: dict[str, FrameworkAdapter] = {}
#: type -> adapter; types without an adapter are not cached (their framework may be imported later)
_BY_TYPE: dict[type, FrameworkAdapter] = {}


def get_adapter(name: str) -> FrameworkAdapter:
    """The adapter of framework ``name``, importing the framework if needed.

    Raises:
        FrameworkError: unknown name, or the framework is not installed.
    """
    inst = _INSTANCES.get(name)
    if inst is not None:
        return inst
    target = FRAMEWORKS.get(name)
    if target is None:
        raise FrameworkError(f"unknown framework {name!r} (known: {', '.join(FRAMEWORKS)})")
    try:
        inst = importlib.import_module(target).Adapter()
    except ImportError as e:
        raise FrameworkError(f"{name} is not installed ({e})") from None
    _INSTANCES[name] = inst
    return inst


def _imported_adapters() -> list[FrameworkAdapter]:
    """Adapters of the registered frameworks already imported by the user, in registry order."""
    out = []
    for name in FRAMEWORKS:
        if name not in sys.modules:
            continue
        try:
            out.append(get_adapter(name))
        except (FrameworkError, ImportError, AttributeError):
            # a stub or half-installed module under the framework's name: it owns no object
            continue
    return out


def loaded_adapters() -> list[FrameworkAdapter]:
    """Adapters of every registered framework that is imported in this process."""
    return _imported_adapters()


def adapter_for(obj: Any) -> FrameworkAdapter:
    """The adapter for a tensor, model or optimizer, decided by its type.

    Raises:
        FrameworkError: no imported framework owns objects of this type.
    """
    t = type(obj)
    hit = _BY_TYPE.get(t)
    if hit is not None:
        return hit
    for a in _imported_adapters():
        if a.owns(obj):
            _BY_TYPE[t] = a
            return a
    raise FrameworkError(
        f"no framework adapter for objects of type {t.__module__}.{t.__qualname__}")


def framework_of(model: Any) -> str:
    """The framework name of a model object (``"torch"``, ``"mindspore"``).

    Raises:
        FrameworkError: ``model`` is not a model of any imported framework.
    """
    for a in _imported_adapters():
        if a.is_model(model):
            return a.name
    known = ", ".join(n for n in FRAMEWORKS if n != "numpy")
    raise FrameworkError(f"not a model of any imported framework ({known}): "
                         f"{type(model).__name__}")


def capture(model: Any, path: str | os.PathLike[str], **kwargs: Any) -> Any:
    """Capture what ``model`` computes into the trace directory ``path``.

    Dispatches on the model's framework (PyTorch ``nn.Module``, MindSpore ``nn.Cell`` and their
    subclasses); the keyword arguments are those of the framework's capture, e.g.
    :func:`netparity.frameworks.torch.capture.capture`.
    """
    try:
        name = framework_of(model)
    except FrameworkError:
        raise FrameworkError(f"capture needs a model of an imported framework, got "
                             f"{type(model).__module__}.{type(model).__qualname__}") from None
    layout = getattr(model, "_netparity_shard_layout", None)  # netparity.shard_layout
    if layout is not None:
        kwargs["manifest"] = {"shard_layout": layout, **(kwargs.get("manifest") or {})}
    return get_adapter(name).capture(model, path, **kwargs)


def seed_frameworks(seed: int, *, deterministic: bool = True,
                    frameworks: tuple[str, ...] = ()) -> dict[str, Any]:
    """Seed every imported framework, and import and seed those named in ``frameworks``.

    Returns ``{framework name: what was set}`` (NumPy's own entry excluded: the caller seeds it).
    """
    for name in frameworks:
        get_adapter(name)  # import it: asked for explicitly
    done: dict[str, Any] = {}
    for a in _imported_adapters():
        if a.name != "numpy":
            done[a.name] = a.seed(seed, deterministic)
    for name in frameworks:  # a named framework that is not in sys.modules under its name
        if name not in done:
            done[name] = get_adapter(name).seed(seed, deterministic)
    return done
