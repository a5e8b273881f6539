"""Test suite set-up.

Tests that need a framework skip themselves with a reason (``pytest.importorskip``) so the rest
runs without it. Markers (``slow``, ``gpu``, ``browser``...) are declared in pyproject.toml.
Area-specific fixtures live in each directory's own conftest.py; import helpers from them by
path, not as ``conftest`` (several exist, and under xdist the name is ambiguous).
"""

from __future__ import annotations

import pytest


@pytest.fixture(params=["kernel", "numpy"])
def cpu_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test through the one-pass C kernel of netparity.hoststats and through its NumPy
    fallback (skipped for the kernel where it was not built)."""
    from netparity import hoststats

    if request.param == "kernel":
        if hoststats._kernel is None:
            pytest.skip("netparity._fastvec was not built")
    else:
        monkeypatch.setattr(hoststats, "_kernel", None)
    return str(request.param)
