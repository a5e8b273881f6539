"""netparity: find where two runs of the same network stop agreeing.

Public API (each returns small typed results that are truthy when they pass)::

    import netparity
    with netparity.capture(model, "runs/ref", level="both") as cap:
        for x, y in data:
            loss = step(x, y); cap.record_loss(loss); cap.step()
    result = netparity.compare("runs/ref", "runs/cand")
    print(result.first_divergence)

Frameworks are imported lazily, only when the objects handed over come from them.
"""

from __future__ import annotations

import importlib
import types
from typing import Any, cast

from netparity.errors import (
    CheckpointError,
    FrameworkError,
    MappingError,
    NetparityError,
    SchemaError,
    TraceError,
    UsageError,
)
from netparity.trace import Record, Trace, TraceWriter, open_trace

__all__ = [
    "CheckpointError",
    "FrameworkError",
    "MappingError",
    "NetparityError",
    "Record",
    "SchemaError",
    "Trace",
    "TraceError",
    "TraceWriter",
    "UsageError",
    "capture",
    "compare",
    "open_trace",
    "profile",
    "seed_everything",
    "shard_layout",
]


def _capture(model: Any, path: str, **kwargs: Any) -> Any:
    """Capture what ``model`` computes into the trace directory ``path``.

    Dispatches on the model's framework (PyTorch ``nn.Module``, MindSpore ``nn.Cell``, their
    subclasses); see :func:`netparity.frameworks.registry.capture` and the framework's
    ``capture`` (:func:`netparity.frameworks.torch.capture.capture`) for the arguments.
    """
    from netparity.frameworks.registry import capture as _cap

    return _cap(model, path, **kwargs)


class _CallablePackage(types.ModuleType):
    """The ``netparity.capture`` package, callable as the function :func:`capture`.

    Importing any ``netparity.capture.*`` submodule binds the package to ``netparity.capture``,
    replacing the function; making the package itself callable keeps
    ``netparity.capture(model, path)`` and ``from netparity import capture`` working either way.
    """

    def __call__(self, model: Any, path: str, **kwargs: Any) -> Any:
        return _capture(model, path, **kwargs)


_capture_pkg = importlib.import_module("netparity.capture")  # light: no framework, no trace code
_capture_pkg.__class__ = _CallablePackage
#: ``netparity.capture(model, path, ...)``: the callable package (see :func:`_capture`)
capture: _CallablePackage = cast(_CallablePackage, _capture_pkg)


def profile(model: Any, path: str, **kwargs: Any) -> Any:
    """Time each training step of ``model`` (data wait, forward, backward, optimizer, modules)
    into the trace directory ``path``: the light timing mode read by ``netparity perf``.

    PyTorch (:func:`netparity.frameworks.torch.timing.profile`) and MindSpore PyNative
    (:func:`netparity.frameworks.mindspore.timing.profile`), same arguments.

    Example:
        >>> import tempfile, torch, netparity
        >>> m = torch.nn.Linear(2, 2); opt = torch.optim.SGD(m.parameters(), lr=0.1)
        >>> with netparity.profile(m, tempfile.mkdtemp(), optimizer=opt) as prof:
        ...     m(torch.ones(1, 2)).sum().backward(); opt.step()
        >>> prof.steps
        1
    """
    from netparity.frameworks.registry import framework_of

    fw = framework_of(model)
    if fw == "torch":
        from netparity.frameworks.torch.timing import profile as _profile
    elif fw == "mindspore":
        from netparity.frameworks.mindspore.timing import profile as _profile  # type: ignore[assignment]
    else:
        raise UsageError(f"netparity.profile supports PyTorch and MindSpore models, not {fw}")
    return _profile(model, path, **kwargs)


def shard_layout(model: Any, layout: dict[str, Any]) -> Any:
    """Record how ``model`` is sharded (tensor parallelism) in the traces its captures write;
    see :func:`netparity.compare.shards.shard_layout`."""
    from netparity.compare.shards import shard_layout as _layout

    return _layout(model, layout)


def seed_everything(seed: int, **kwargs: Any) -> dict[str, Any]:
    """Seed Python, NumPy and every installed framework; see :mod:`netparity.seeding`."""
    from netparity.seeding import seed_everything as _seed

    return _seed(seed, **kwargs)


# ``netparity.compare`` is the callable comparison package. What users get from it -- called
# directly, or as ``netparity.compare.compare`` / ``.recheck`` -- is the engine followed by
# localisation (``netparity.analyzers.divergence``); the compare package ranks below the
# analyzers and cannot import them, so the binding is made here, once, before any caller can
# look the names up.
import netparity.compare as _compare_pkg  # noqa: E402
from netparity.analyzers import divergence as _divergence  # noqa: E402

_compare_pkg.compare = _divergence.compare  # type: ignore[assignment]
_compare_pkg.recheck = _divergence.recheck
compare = _compare_pkg
