"""The seeds the last :func:`netparity.seed_everything` set, kept for capture manifests.

Seeding dispatches to the framework adapters (a layer above capture); the record of what was
set lives here, so a capture session can read it without importing the frameworks' layer.

Example:
    >>> record_seeds({"seed": 3}); last_seeds()["seed"]
    3
"""

from __future__ import annotations

from typing import Any

_LAST: dict[str, Any] = {}


def record_seeds(done: dict[str, Any]) -> None:
    """Remember what a ``seed_everything`` call set (replacing the previous record)."""
    _LAST.clear()
    _LAST.update(done)


def last_seeds() -> dict[str, Any]:
    """What the last ``seed_everything`` call set (JSON-safe), for manifests."""
    return dict(_LAST)
