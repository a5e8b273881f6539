"""Framework adapters: one small class per framework with the same protocol.

Only this package imports a framework, and only lazily: :func:`adapter_for` looks at
``sys.modules`` first, so asking "is this a MindSpore tensor?" never imports MindSpore.
Adapters are cached per type.

Example:
    >>> import numpy as np
    >>> a = adapter_for(np.zeros(3, dtype=np.float32))
    >>> a.name, a.dtype_name(np.zeros(3, dtype=np.float32))
    ('numpy', 'float32')
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from netparity.errors import FrameworkError
from netparity.hoststats import host_stats


class FrameworkAdapter:
    """The protocol every framework implements. The numpy adapter is the reference."""

    #: short name used in manifests ("torch", "mindspore", "jax", "numpy")
    name = "base"
    #: the module whose presence in ``sys.modules`` makes this adapter a candidate
    module = ""

    def is_tensor(self, obj: Any) -> bool:
        raise NotImplementedError

    def dtype_name(self, t: Any) -> str:
        """Canonical dtype name (see :mod:`netparity.dtypes`)."""
        raise NotImplementedError

    def shape(self, t: Any) -> tuple[int, ...]:
        return tuple(int(d) for d in t.shape)

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

    def to_numpy(self, t: Any) -> np.ndarray:
        """Host copy of ``t`` in its storage dtype (bf16 as uint16 bits)."""
        raise NotImplementedError

    def facts(self) -> dict[str, Any]:
        """Manifest facts: framework, framework_version, device, precision flags."""
        return {"framework": self.name}

    def seed(self, seed: int) -> dict[str, Any]:
        """Seed this framework's generators; return what was set."""
        return {}


class NumpyAdapter(FrameworkAdapter):
    name = "numpy"
    module = "numpy"

    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, (np.ndarray, np.generic))

    def dtype_name(self, t: Any) -> str:
        dt = np.asarray(t).dtype
        return "bool" if dt == np.bool_ else str(dt)

    def to_numpy(self, t: Any) -> np.ndarray:
        return np.asarray(t)

    def facts(self) -> dict[str, Any]:
        return {"framework": "numpy", "framework_version": np.__version__, "device": "cpu"}

    def seed(self, seed: int) -> dict[str, Any]:
        np.random.seed(seed)
        return {"numpy": seed}


#: (module name in sys.modules, "package.module:Class") in priority order.
_REGISTRY: list[tuple[str, str]] = [
    ("torch", "netparity.frameworks.torch_adapter:TorchAdapter"),
    ("mindspore", "netparity.frameworks.mindspore_adapter:MindSporeAdapter"),
    ("jax", "netparity.frameworks.jax_adapter:JaxAdapter"),
]
_BY_TYPE: dict[type, FrameworkAdapter] = {}
_INSTANCES: dict[str, FrameworkAdapter] = {"numpy": NumpyAdapter()}


def get_adapter(name: str) -> FrameworkAdapter:
    """The adapter for a framework by name; imports it (raises FrameworkError when missing)."""
    if name in _INSTANCES:
        return _INSTANCES[name]
    for mod, target in _REGISTRY:
        if mod == name:
            modname, cls = target.split(":")
            try:
                import importlib

                inst = getattr(importlib.import_module(modname), cls)()
            except ImportError as e:
                raise FrameworkError(f"{name} is not installed ({e})") from None
            _INSTANCES[name] = inst
            return inst
    raise FrameworkError(f"unknown framework {name!r}")


def adapter_for(obj: Any) -> FrameworkAdapter:
    """The adapter for a tensor or model object, decided by its type; never imports a framework
    that the user has not imported already."""
    t = type(obj)
    hit = _BY_TYPE.get(t)
    if hit is not None:
        return hit
    root = (t.__module__ or "").split(".")[0]
    candidates = [m for m, _ in _REGISTRY if m == root] + [
        m for m, _ in _REGISTRY if m != root and m in sys.modules
    ]
    for name in candidates:
        if name not in sys.modules:
            continue
        a = get_adapter(name)
        if a.is_tensor(obj) or getattr(a, "is_model", lambda o: False)(obj):
            _BY_TYPE[t] = a
            return a
    if _INSTANCES["numpy"].is_tensor(obj):
        _BY_TYPE[t] = _INSTANCES["numpy"]
        return _INSTANCES["numpy"]
    raise FrameworkError(f"no framework adapter for objects of type {t.__module__}.{t.__qualname__}")
