"""Fast statistics of arrays already in host memory, equal to :mod:`netparity.stats` to ~1e-7.

:func:`netparity.stats.compute_stats` is the reference: finite masking and a float64 copy of
the whole array, six or more passes. Nearly every tensor a capture sees is finite and within
float16 range, and for those :func:`finite_vec` gets every statistic from **one** pass of the
optional C kernel (:mod:`netparity._fastvec`, built by ``setup.py``) -- or, without a C
compiler, from a few NumPy passes in the array's own dtype -- and returns ``None`` for the rest,
which then take the reference (or, for PyTorch, its device-side twin).

Used by every CPU path: PyTorch's CPU tensors (through a zero-copy NumPy view), MindSpore's host
path (``Tensor.asnumpy()``), the NumPy adapter and the MindSpore dump import
(:func:`host_stats`).

Accuracy: min, max and the counts are exact; sums run in float32 lanes flushed to float64 every
4096 elements (relative error ~1e-7); a variance dominated by the mean is recomputed around the
mean rounded to the array's dtype, so ``std`` keeps its relative accuracy.

Example:
    >>> import numpy as np
    >>> s = host_stats(np.array([1.0, -3.0, 0.0], dtype=np.float32))
    >>> (s["min"], s["max"], s["zeros"], s["abs_sum"])
    (-3.0, 1.0, 1, 4.0)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from netparity.dtypes import FP16_MAX, decode
from netparity.stats import compute_stats, empty_stats
from netparity.trace.schema import STAT_FIELDS

__all__ = ["KERNEL_THREADS", "finite_vec", "finite_vec_relu", "finite_vec_sum",
           "finite_vec_sum_last", "finite_vecs", "host_stats", "share_openmp_pool",
           "vec_to_stats"]

_kernel: ModuleType | None
try:  # the optional one-pass C kernel (setup.py builds it; absent without a C compiler)
    import netparity._fastvec as _kernel
except ImportError:  # pragma: no cover - depends on the build
    _kernel = None

#: threads the C kernel uses for one large array when it has no framework thread pool to share
#: (:func:`share_openmp_pool`). One, measured: between a training step's operators the
#: framework's OpenMP workers spin-wait on the other cores, so extra POSIX threads compete with
#: them -- on the 2-core benchmark machine two such threads made the captured ResNet-50 step
#: slower (1.50x against 1.37x), although they double the kernel's speed on an idle machine
#: (see benchmarks/stats_kernel.py). Run on the framework's own OpenMP team instead, two threads
#: made the same step faster (1.21x against 1.37x).
KERNEL_THREADS = 1

#: rows used by the NumPy fallback's sums: shorter float32 rows keep rounding ~1e-7
_ROW = 4096
#: elements per chunk of the fallback's abs/zero pass: the chunk's |x| buffer stays in cache
_CHUNK = 1 << 18


def share_openmp_pool(prefer: str = "") -> bool:
    """Let the kernel run a large array's parts on the OpenMP runtime already loaded in this
    process (the one whose path contains ``prefer`` first, e.g. PyTorch's ``libgomp``), as
    that framework's own operators do; then ``finite_vec(a, threads)`` with ``threads >= 2``
    costs no thread start and does not fight the runtime's spinning workers for the cores.
    ``False`` when there is no kernel or no such runtime (``threads`` then means POSIX
    threads). Only the results' last bits depend on ``threads`` (fixed split points)."""
    return _kernel is not None and _kernel.bind_openmp(prefer) is not None


def finite_vec(a: np.ndarray, threads: int = KERNEL_THREADS) -> list[float] | None:
    """The 12-number statistics vector (the 11 of ``STAT_FIELDS`` plus the finite count) of a
    C-contiguous float32/float64 array of any shape, or ``None`` when it holds NaN/Inf or values
    beyond float16's range (those need the finite-masked reference). ``a`` must not be empty.
    ``threads`` (1..16) splits a large array between the kernel's threads (see
    :func:`share_openmp_pool`).
    """
    if _kernel is not None:
        return _kernel.vec(a, threads)  # (_vec's arithmetic, in C: see _fastvec.c)
    a = a.reshape(-1)  # (a view: the fallback's row sums slice the first axis)
    return _vec(_numpy_totals(a, 0.0), functools.partial(_numpy_totals, a), a.size, a.dtype.type)


def finite_vecs(arrays: list[np.ndarray], threads: int = KERNEL_THREADS
                ) -> list[list[float] | None]:
    """``[finite_vec(a, threads) for a in arrays]`` -- the same numbers -- from one kernel call
    whose threads share the arrays (many small arrays, e.g. a model's parameters, cost one call
    instead of one each)."""
    if _kernel is None:
        return [finite_vec(a, threads) for a in arrays]
    return _kernel.stats_many(arrays, threads, True)  # type: ignore[no-any-return]


def finite_vec_sum(arrays: list[np.ndarray], threads: int = KERNEL_THREADS) -> list[float] | None:
    """:func:`finite_vec` of ``arrays[0] + arrays[1] + ...`` (2 to 8 C-contiguous float32
    arrays of one size, added element by element in float32, left to right -- the same
    numbers as summing them with NumPy or torch) in one pass over the inputs, without
    materialising the sum. ``None`` where :func:`finite_vec` gives ``None``, and when the C
    kernel is not built: the caller then adds the arrays itself."""
    if _kernel is None:
        return None
    kernel = _kernel
    return _vec(kernel.stats_sum(arrays, threads, 0.0),
                lambda shift: kernel.stats_sum(arrays, threads, shift), arrays[0].size, np.float32)


def finite_vec_sum_last(arrays: list[np.ndarray], threads: int = KERNEL_THREADS
                        ) -> tuple[list[float] | None, list[float] | None]:
    """``(finite_vec_sum(arrays), finite_vec(arrays[-1]))`` -- the same numbers as those calls
    -- from one pass over the inputs (the last summand is read anyway for the sum). ``(None,
    None)`` without the C kernel."""
    if _kernel is None:
        return None, None
    kernel = _kernel
    totals = kernel.stats_sum(arrays, threads, 0.0, True)
    n = arrays[0].size
    last = arrays[-1]
    vec = _vec(totals[:6], lambda shift: kernel.stats_sum(arrays, threads, shift), n,
               np.float32)
    return vec, _vec(totals[6:], lambda shift: kernel.stats(last, threads, shift), n,
                     np.float32)


def finite_vec_relu(a: np.ndarray, threads: int = KERNEL_THREADS
                    ) -> tuple[list[float] | None, list[float] | None]:
    """``(finite_vec(a), finite_vec(max(a, 0)))`` of a C-contiguous float32 array from one pass
    of the kernel: the input of an in-place ReLU also describes its output. The second is
    ``None`` when the first is, when there is no kernel or ``a`` is not float32 (then the first
    is plain :func:`finite_vec`), and in the rare case where ReLU's variance needs a second
    pass over data that does not exist yet (a mean far larger than the spread).

    The ReLU numbers are those :func:`finite_vec` gives for ``max(a, 0)`` itself: the kernel
    adds its positive elements in the lanes and order of such a pass (see ``_fastvec.c``).
    """
    if _kernel is None or a.dtype != np.float32:
        return finite_vec(a, threads), None
    kernel = _kernel
    lo, hi, s, sq, abs_sum, zeros, psum, psq, npos = kernel.stats_relu(a, threads)
    n = a.size
    vec = _vec((lo, hi, s, sq, abs_sum, zeros), lambda shift: kernel.stats(a, threads, shift),
               n, np.float32)
    if vec is None:
        return None, None
    # (a is free of NaN here -- it would have made sq NaN -- so max(a, 0) is 0 where a <= 0)
    relu = _vec((max(lo, 0.0), max(hi, 0.0), psum, psq, psum, n - npos), None, n, np.float32)
    return vec, relu


_Totals = tuple[float, float, float, float, float, int]


def _vec(totals: _Totals, run: Callable[[float], _Totals] | None, n: int,
         rounding: Callable[[float], Any]) -> list[float] | None:
    """The statistics vector from the kernel's ``totals`` (of the data as it is); ``run(shift)``
    re-runs the kernel on the data minus ``shift`` (rarely needed; without ``run`` the result is
    then ``None``), ``rounding`` rounds a shift to the data's dtype."""
    lo, hi, s, sq, abs_sum, zeros = totals
    if not math.isfinite(sq):  # a NaN or +-Inf somewhere (min/max skip NaN, the sums don't)
        return None
    if not (lo >= -FP16_MAX and hi <= FP16_MAX):
        return None
    mean = s / n
    var = sq / n - mean * mean
    if mean * mean > 10.0 * var:
        # |mean| dominates: sum(x^2)/n - mean^2 would cancel; take the two-pass route with the
        # mean rounded to the data's dtype, corrected exactly in float64
        if run is None:
            return None
        _, _, sum_d, sq_d, _, _ = run(float(rounding(mean)))
        var = (sq_d - sum_d * sum_d / n) / n
    return _row(lo, hi, mean, var, sq, abs_sum, zeros, n)


def _row(lo: float, hi: float, mean: float, var: float, sq: float, abs_sum: float,
         zeros: int, n: int) -> list[float]:
    return [lo, hi, mean, math.sqrt(max(var, 0.0)), math.sqrt(max(sq, 0.0)), abs_sum, 0, 0, 0,
            zeros, 0, n]


def vec_to_stats(row: list[float] | None) -> dict[str, float | int | None]:
    """A statistics vector (``None``: no elements) as the statistics dict of the trace."""
    if row is None:
        return empty_stats()
    lo, hi, mean, std, norm, abs_sum, nan, posinf, neginf, zeros, ovf, nfin = row
    # (a literal, not a loop over STAT_FIELDS: this runs once per captured tensor)
    if nfin == 0:  # no finite value
        return {"min": None, "max": None, "mean": None, "std": None, "norm": 0.0,
                "abs_sum": 0.0, "nan": int(nan), "posinf": int(posinf), "neginf": int(neginf),
                "zeros": int(zeros), "fp16_overflow": int(ovf)}
    return {"min": float(lo), "max": float(hi), "mean": float(mean), "std": float(std),
            "norm": float(norm), "abs_sum": float(abs_sum), "nan": int(nan),
            "posinf": int(posinf), "neginf": int(neginf), "zeros": int(zeros),
            "fp16_overflow": int(ovf)}


assert tuple(vec_to_stats([0.0] * 12)) == STAT_FIELDS  # the literal follows the schema's order


def host_stats(arr: np.ndarray, dtype: str | None = None) -> dict[str, float | int | None]:
    """:func:`~netparity.stats.compute_stats` of a host array, through :func:`finite_vec` when
    the array is real and finite. ``dtype`` names a canonical dtype when ``arr`` holds raw bits
    (bfloat16, float8)."""
    a = np.asarray(decode(np.asarray(arr), dtype) if dtype is not None else arr)
    if a.size == 0 or a.dtype.kind not in "fiub":
        return compute_stats(a)
    if a.dtype not in (np.float32, np.float64):
        # float16 sums lose precision in their own dtype; ints/bool need a float type. float32
        # holds them exactly (ints up to 2**24); wider ints take float64.
        a = a.astype(np.float32 if a.dtype.itemsize <= 2 else np.float64)
    vec = finite_vec(np.ascontiguousarray(a))
    return compute_stats(a) if vec is None else vec_to_stats(vec)


def _row_view(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a`` as (rows of _ROW elements, tail): float32 reductions over short rows stay exact."""
    r = a.size // _ROW
    return a[: r * _ROW].reshape(r, _ROW), a[r * _ROW :]


def _sum64(a: np.ndarray) -> float:
    """sum(a) accumulated per row in a's dtype, rows combined in float64 (~1e-8 relative)."""
    rows, tail = _row_view(a)
    return float(rows.sum(axis=1).sum(dtype=np.float64)) + float(tail.sum(dtype=np.float64))


def _sumsq64(a: np.ndarray) -> float:
    """sum(a*a), per-row dot products in a's dtype combined in float64, without a temporary."""
    rows, tail = _row_view(a)
    total = float(np.einsum("ij,ij->i", rows, rows).sum(dtype=np.float64))
    t64 = tail.astype(np.float64)
    return total + float(np.dot(t64, t64))


def _numpy_totals(a: np.ndarray, shift: float) -> tuple[float, float, float, float, float, int]:
    """The kernel's totals (min, max, sum, sum_sq, abs_sum, zeros) of ``a - shift`` from NumPy
    passes, for :func:`_vec`. With ``shift == 0`` the extremes come first and data that fails
    :func:`_vec`'s checks (NaN, Inf, beyond float16) gets NaN sums without the other passes;
    with a shift only the sums ``_vec`` reads are computed."""
    if shift != 0.0:
        d = a - a.dtype.type(shift)  # in a's precision, like the kernel
        return math.nan, math.nan, _sum64(d), _sumsq64(d), math.nan, 0
    lo, hi = float(a.min()), float(a.max())  # NaN propagates into both
    if not (lo >= -FP16_MAX and hi <= FP16_MAX):
        return lo, hi, math.nan, math.nan, math.nan, 0
    s, sq, abs_sum, zeros = _numpy_sums(a, lo, hi)
    return lo, hi, s, sq, abs_sum, zeros


def _numpy_sums(a: np.ndarray, lo: float, hi: float) -> tuple[float, float, float, int]:
    """sum, sum of squares, sum of |x| and zero count of finite ``a`` with NumPy passes.

    Values derivable from the extremes are not computed: ``abs_sum`` is ``+-sum`` for data of
    one sign and ``zeros`` is 0 when 0 lies outside [lo, hi].
    """
    n = a.size
    s = _sum64(a)
    sq = _sumsq64(a)
    need_abs = lo < 0.0 < hi
    need_zeros = lo <= 0.0 <= hi
    if not (need_abs or need_zeros):
        return s, sq, (s if lo >= 0.0 else -s), 0
    # one chunked pass: |x| into a cache-sized buffer, then its sum and its count of non-zero
    # bit patterns (|x| clears the sign bit, so -0.0 counts as zero like x == 0)
    ibits = np.int32 if a.dtype == np.float32 else np.int64
    buf = np.empty(min(n, _CHUNK), dtype=a.dtype)
    abs_sum = 0.0
    nonzero = 0
    for i in range(0, n, _CHUNK):
        b = buf[: min(_CHUNK, n - i)]
        np.abs(a[i : i + _CHUNK], out=b)
        if need_abs:
            abs_sum += _sum64(b)
        if need_zeros:
            nonzero += int(np.count_nonzero(b.view(ibits)))
    zeros = n - nonzero if need_zeros else 0
    if not need_abs:
        abs_sum = s if hi > 0.0 else -s
    return s, sq, abs_sum, zeros
