"""Type stub of the C kernel built from _fastvec.c (optional; see setup.py)."""

from typing import Any

def stats(buffer: Any, threads: int = 1, shift: float = 0.0, /
          ) -> tuple[float, float, float, float, float, int]:
    """(min, max, sum, sum_sq, abs_sum, zeros) of a C-contiguous float32/float64 buffer - shift."""
