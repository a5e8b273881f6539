"""MindSpore support: the adapter (:mod:`.adapter`), PyNative capture (:mod:`.capture`), graph-
mode probes (:mod:`.graph`), import of MindSpore's own dumps (:mod:`.dump`), checkpoint writing
(:mod:`.ckpt_io`) and model helpers (:mod:`.models`).

Importing this package does not import MindSpore; ``Adapter`` loads :mod:`.adapter` on first
access (the registry asks for it only once MindSpore is imported).
"""

from __future__ import annotations

from typing import Any

__all__ = ["Adapter", "MindSporeAdapter"]


def __getattr__(name: str) -> Any:
    """``Adapter`` / ``MindSporeAdapter``: the registry's entry point, imported on first use."""
    if name in ("Adapter", "MindSporeAdapter"):
        from netparity.frameworks.mindspore.adapter import MindSporeAdapter

        return MindSporeAdapter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
