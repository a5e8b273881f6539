"""The one number formatter of every report, CLI line and workflow summary.

Example:
    >>> [fmt(x) for x in (None, 3, 0.0, 1.23456e-7, 12345.678, float("nan"), True)]
    ['', '3', '0', '1.23e-07', '1.23e+04', 'nan', 'True']
    >>> fmt(0.000123456, digits=4), fmt(None, none="-"), fmt_bytes(3 * 2**20)
    ('0.0001235', '-', '3.0 MiB')
"""

from __future__ import annotations

import math
from typing import Any


def fmt(x: Any, digits: int = 3, *, none: str = "") -> str:
    """Short, lossless-enough number text: ``digits`` significant digits for floats.

    ``None`` -> ``none``; bools and ints as they are; NaN/Inf spelled out; exact zero as ``0``;
    anything else (strings, NumPy scalars that are not numbers) through ``str``. NumPy floating
    scalars format like floats.
    """
    if x is None:
        return none
    if isinstance(x, (bool, int, str)):
        return str(x)
    try:
        f = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(f):
        return "nan"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    if f == 0:
        return "0"
    return f"{f:.{digits}g}"


def fmt_bytes(n: int) -> str:
    """Byte counts in binary units (``512 B``, ``1.5 KiB``, ``3.0 MiB``, ...)."""
    if n < 1024:
        return f"{n:.0f} B"
    x = n / 1024
    for unit in ("KiB", "MiB"):
        if x < 1024:
            return f"{x:.1f} {unit}"
        x /= 1024
    return f"{x:.1f} GiB"
