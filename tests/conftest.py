"""Test suite set-up.

Tests that need a framework skip themselves with a reason (``pytest.importorskip``) so the rest
runs without it. Markers (``slow``, ``gpu``, ``browser``...) are declared in pyproject.toml.
Area-specific fixtures live in each directory's own conftest.py; import helpers from them by
path, not as ``conftest`` (several exist, and under xdist the name is ambiguous).
"""
