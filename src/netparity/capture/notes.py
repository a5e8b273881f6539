"""``rank<N>/capture_notes.json``: what a capture learned about the run besides its records.

One JSON object per rank, written when the capture closes; each writer owns its sections
(MindSpore: ``notes``, ``hook_errors``; every framework: ``optimizers``, the optimizers the
capture saw with their parameter groups and the learning rate of each group at each step).
Sections written by another writer of the same rank are kept.

``optimizers`` (one entry per optimizer, in the order they first stepped)::

    {"optimizers": [{"class": "SGD", "groups": [{"params": 4, "frozen": 0}, ...]}, ...],
     "lr": [[step, optimizer index, [lr of each group]], ...],
     "frozen": ["layer2.weight", ...],      # requires_grad False: in no update
     "not_in_optimizer": ["head.weight", ...]}  # trainable, in the model, in no optimizer

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> write_notes(d, {"optimizers": {"lr": [[0, 0, [0.1]]]}})
    >>> read_notes(d)["optimizers"]["lr"]
    [[0, 0, [0.1]]]
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

NOTES_FILE = "capture_notes.json"


def read_notes(rank_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The notes of one rank directory (``{}`` when absent or unreadable)."""
    try:
        data = json.loads((Path(rank_dir) / NOTES_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_notes(rank_dir: str | os.PathLike[str], sections: dict[str, Any]) -> None:
    """Merge ``sections`` into the rank's notes (atomically; other sections are kept)."""
    from netparity.outputs import write_text_atomic

    data = read_notes(rank_dir)
    data.update(sections)
    write_text_atomic(Path(rank_dir) / NOTES_FILE, json.dumps(data, indent=1), what="notes")


def optimizer_notes(trace: Any, rank: int) -> dict[str, Any]:
    """The ``optimizers`` section of ``trace``'s rank ``rank`` (``{}`` when not recorded)."""
    sec = read_notes(Path(trace.path) / f"rank{rank}").get("optimizers")
    return sec if isinstance(sec, dict) else {}
