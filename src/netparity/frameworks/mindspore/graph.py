"""Capture Cell forward outputs in MindSpore graph mode (``GRAPH_MODE``).

Python Cell hooks never run inside a compiled graph, so the outputs are observed by an op that the
graph compiler keeps: each sub-Cell's class is swapped, at install, for a generated subclass whose
``construct`` calls the original one and passes the output through a probe::

    out = super().construct(*args, **kwargs)
    if isinstance(out, Tensor):
        out = depend(out, probe(stop_gradient(out)))

``probe`` is a CPU ``ops.Custom(..., func_type="pyfunc")`` identity whose Python function keeps a
copy of the array it receives (it runs when the kernel executes). ``depend`` keeps the probe in the
graph although its result is unused, and ``stop_gradient`` keeps it out of autodiff, so the
network computes exactly what it did. The buffered arrays become ``module`` records at
:meth:`GraphProbes.drain` (called by the capture at each ``step()`` and at close).

Why not ``ops.TensorDump``: in MindSpore 2.10 it has no CPU kernel ("Unsupported op [TensorDump] on
CPU" at kernel selection); the pyfunc probe works on CPU only (MindSpore supports pyfunc on CPU).

Limits: forward outputs only, and only Cells whose output is a single Tensor; a graph compiled
before install is reused from MindSpore's cache without probes, and one compiled while installed
keeps them after uninstall (they then record nothing).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def _make_probe(sink: Callable[[Any], None]) -> Any:
    """A CPU identity op whose Python body passes a copy of its input to ``sink``."""
    from mindspore import ops

    def probe(x: Any) -> Any:  # exactly one parameter: pyfunc takes its arity from the signature
        sink(x)
        return x

    return ops.Custom(probe, lambda s: s, lambda t: t, "pyfunc")


def _probed_class(orig: type, probe: Any) -> type:
    """A subclass of ``orig`` whose construct sends a Tensor output through ``probe``."""
    from mindspore import Tensor, ops

    depend = ops.depend
    stop_gradient = ops.stop_gradient

    class Probed(orig):  # type: ignore[valid-type, misc]
        # zero-argument super(): MindSpore's parser resolves it as super(type(self), self)
        def construct(self, *args: Any, **kwargs: Any) -> Any:
            out = super().construct(*args, **kwargs)
            if isinstance(out, Tensor):
                out = depend(out, self._netparity_probe(stop_gradient(out)))
            return out

    Probed._netparity_probe = probe  # type: ignore[attr-defined]
    Probed.__name__ = orig.__name__
    Probed.__qualname__ = orig.__qualname__
    Probed.__module__ = orig.__module__
    return Probed


class GraphProbes:
    """Probes on every Cell of a network; :meth:`drain` returns what they saw, in order."""

    def __init__(self) -> None:
        self._swapped: list[tuple[Any, type]] = []
        self._buf: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        self.enabled = False

    def install(self, cells: list[tuple[str, Any]]) -> None:
        """Swap each ``(path, cell)``'s class for a probed subclass."""
        for path, cell in cells:
            orig = type(cell)
            probe = _make_probe(self._sink_for(path))
            cell.__class__ = _probed_class(orig, probe)
            self._swapped.append((cell, orig))
        self.enabled = True

    def _sink_for(self, path: str) -> Callable[[Any], None]:
        def sink(x: Any) -> None:
            if self.enabled:
                with self._lock:
                    self._buf.append((path, x.copy()))

        return sink

    def drain(self) -> list[tuple[str, Any]]:
        """Wait for the device, then return and forget the ``(path, numpy array)`` seen so far."""
        import mindspore as ms

        ms.runtime.synchronize()
        with self._lock:
            out, self._buf = self._buf, []
        return out

    def remove(self) -> None:
        """Give every Cell its own class back (idempotent)."""
        self.enabled = False
        for cell, orig in reversed(self._swapped):
            cell.__class__ = orig
        self._swapped.clear()


def jit_construct(model: Any) -> None:
    """Compile ``model``'s ``construct`` with ``mindspore.jit`` in place (the eager <-> graph
    pair of ``netparity step --cand-opt compile=true``)."""
    import mindspore as ms

    model.construct = ms.jit(model.construct)
