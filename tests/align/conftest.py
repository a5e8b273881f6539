"""Fixtures for alignment tests (traces are built in tmp_path, no framework needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from align_helpers import TraceBuilder


@pytest.fixture
def builder(tmp_path: Path):
    made: list[TraceBuilder] = []

    def make(name: str, framework: str = "torch") -> TraceBuilder:
        b = TraceBuilder(tmp_path / name, framework)
        made.append(b)
        return b

    yield make
    for b in made:
        if not b.w._closed:
            b.w.close()
