"""Tensor statistics in NumPy: the reference every framework adapter must agree with.

Framework adapters compute the same numbers on the tensor's own device (see
``netparity.frameworks``); this implementation is used for numpy/MindSpore tensors, for imported
dumps, and as the reference in tests.

Definitions (also in README "Trace format"):
    min, max, mean, std (population, ddof=0), norm (L2), abs_sum over *finite* values; counts of
    NaN, +Inf, -Inf, exact zeros, and finite values with magnitude above float16's max (65504).
    Reductions run in float64. For complex tensors the value statistics describe ``|x|`` and a NaN
    in either part counts as NaN. An empty tensor (or one with no finite value) has ``None`` for
    min/max/mean/std and 0 for norm and abs_sum. Integer and bool tensors are treated as float64.

Example:
    >>> import numpy as np
    >>> s = compute_stats(np.array([1.0, -3.0, np.nan, np.inf], dtype=np.float32))
    >>> (s["min"], s["max"], s["nan"], s["posinf"], s["abs_sum"])
    (-3.0, 1.0, 1, 1, 4.0)
"""

from __future__ import annotations

import hashlib

import numpy as np

from netparity.dtypes import FP16_MAX, decode
from netparity.trace.schema import STAT_FIELDS


def empty_stats() -> dict[str, float | int | None]:
    return {
        "min": None,
        "max": None,
        "mean": None,
        "std": None,
        "norm": 0.0,
        "abs_sum": 0.0,
        "nan": 0,
        "posinf": 0,
        "neginf": 0,
        "zeros": 0,
        "fp16_overflow": 0,
    }


def compute_stats(arr: np.ndarray, dtype: str | None = None) -> dict[str, float | int | None]:
    """Statistics of one array. ``dtype`` names a canonical dtype when ``arr`` holds raw bits."""
    if dtype is not None:
        arr = decode(np.asarray(arr), dtype)
    a = np.asarray(arr)
    out = empty_stats()
    if a.size == 0:
        return out
    if np.iscomplexobj(a):
        nan_mask = np.isnan(a.real) | np.isnan(a.imag)
        a = np.abs(a).astype(np.float64)
        a[nan_mask] = np.nan
    else:
        a = a.astype(np.float64, copy=False).ravel()
    a = a.ravel()
    nan = np.isnan(a)
    posinf = a == np.inf
    neginf = a == -np.inf
    finite_mask = ~(nan | posinf | neginf)
    out["nan"] = int(nan.sum())
    out["posinf"] = int(posinf.sum())
    out["neginf"] = int(neginf.sum())
    out["zeros"] = int((a == 0).sum())
    f = a[finite_mask] if not finite_mask.all() else a
    if f.size:
        absf = np.abs(f)
        out["min"] = float(f.min())
        out["max"] = float(f.max())
        mean = float(f.mean())
        out["mean"] = mean
        out["std"] = float(np.sqrt(np.mean((f - mean) ** 2)))
        out["norm"] = float(np.sqrt(np.dot(f, f)))
        out["abs_sum"] = float(absf.sum())
        out["fp16_overflow"] = int((absf > FP16_MAX).sum())
    return out


def stats_vector(stats: dict[str, float | int | None]) -> list[float | int | None]:
    return [stats.get(k) for k in STAT_FIELDS]


def content_hash(arr: np.ndarray) -> str:
    """A fast content hash of the raw bytes (blake2b, 16 bytes) plus dtype and shape."""
    a = np.ascontiguousarray(arr)
    h = hashlib.blake2b(digest_size=16)
    h.update(str(a.dtype).encode())
    h.update(str(a.shape).encode())
    h.update(a.reshape(-1).data.cast("B") if a.size else b"")
    return h.hexdigest()
