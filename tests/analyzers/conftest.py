"""The synthetic-network traces of tests/compare (``net`` fixture), shared by path."""

from __future__ import annotations

import runpy
from pathlib import Path

net = runpy.run_path(str(Path(__file__).parents[1] / "compare" / "conftest.py"))["net"]
