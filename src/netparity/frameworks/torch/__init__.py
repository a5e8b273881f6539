"""PyTorch support: the adapter (:mod:`.adapter`), capture (:mod:`.capture`), checkpoint files
(:mod:`.ckpt_io`), model helpers (:mod:`.models`) and the zero-code launcher (:mod:`.launcher`).

Importing this package does not import PyTorch (the launcher's bootstrap imports
:mod:`.launcher` at interpreter start, before the user's script imports torch); ``Adapter``,
which the registry asks for once torch is imported, loads :mod:`.adapter` on first access.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Adapter", "TorchAdapter"]


def __getattr__(name: str) -> Any:
    """``Adapter`` / ``TorchAdapter``: the registry's entry point, imported on first use."""
    if name in ("Adapter", "TorchAdapter"):
        from netparity.frameworks.torch.adapter import TorchAdapter

        return TorchAdapter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
