"""Reuse the synthetic-network trace writer of tests/compare."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "_np_compare_conftest_an", Path(__file__).parents[1] / "compare" / "conftest.py"
)
assert _spec and _spec.loader
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)
write_net = _mod.write_net
net = _mod.net
