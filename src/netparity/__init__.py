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

from typing import Any

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
    "seed_everything",
]


def capture(model: Any, path: str, **kwargs: Any) -> Any:
    """Capture what ``model`` computes into the trace directory ``path``.

    Dispatches on the model's framework (PyTorch ``nn.Module``, MindSpore ``nn.Cell``). See
    :func:`netparity.frameworks.torch_capture.capture` for the arguments. (Once any
    ``netparity.capture.*`` submodule is imported this name is the callable package, which does
    the same.)
    """
    from netparity.capture import capture as _cap

    return _cap(model, path, **kwargs)


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
