"""Error metrics of one tensor pair, in one streaming float64 pass over fixed-size chunks.

Definitions (``r`` = reference value, ``c`` = candidate value, ``d = |c - r|``; sums run over the
positions where both sides are finite):

* ``max_abs``, ``mean_abs``, ``rmse`` = ``sqrt(mean(d**2))``.
* relative error ``d / max(|r|, s)`` with ``s`` = the reference tensor's RMS (root mean square of
  its finite values, taken from the record's statistics, so no extra pass is needed). *Why the
  RMS*: the rounding error of a computed value scales with the magnitude of the operands that
  produced it, not with the value itself; a value that came out near zero by cancellation carries
  an error of the tensor's typical size. Elements at least as large as the RMS are judged relative
  to themselves; smaller ones relative to the RMS, so cancelled values do not blow the relative
  error up and no arbitrary epsilon is needed. When the reference is all zeros the candidate's RMS
  is used (and the float64 ``tiny`` when both are zero). ``max_rel`` and ``mean_rel`` use it.
* ``cosine`` similarity of the two tensors (1.0 when both are zero).
* ``within``: fraction of elements with ``d <= atol + rtol * |r|`` (``torch.testing.assert_close``
  semantics, reference side), non-finite positions count as within when both sides agree.
* ``min_atol``: the smallest atol that passes at the rtol used, ``max(d - rtol*|r|)`` (>= 0);
  ``min_rtol``: the smallest rtol that passes at the atol used, ``max((d - atol) / |r|)``
  (``inf`` when an element with ``r == 0`` exceeds atol). These two points (plus ``max_abs``,
  the minimum atol at rtol 0) lie on the convex "required tolerance" curve and let ``recheck``
  decide most new tolerances exactly.
* ``q50``, ``q90``, ``q99`` of ``d``: from a histogram of ``log2 d`` with two bins per octave
  (so within a factor of 1.41), built from every element of small tensors and from every 4th
  element (offset rotating per chunk, so no channel is systematically skipped) of tensors larger
  than ``HIST_FULL`` (65,536) elements. The same histogram is two-dimensional (``log2 d`` x ``log2 |r|``, one octave per
  ``r`` bin) and is saved sparsely in the JSON so that ``netparity recheck`` can estimate the
  fraction within new tolerances without reading tensors.
* ``nan_mismatch`` / ``inf_mismatch``: positions where exactly one side is NaN / where the
  infinities differ (one side +-inf, the other not, or opposite signs); ``nonfinite_match``:
  positions where both sides hold the same non-finite value.

Memory: every worker thread owns three chunk buffers (``CHUNK`` elements of float64 each,
256 KiB) and a few smaller ones; payload bytes are read with ``pread`` into a reused buffer rather than through a
memory map, because pages touched through a map count as resident memory of this process and
would make peak RSS grow with the trace size.

The pass runs in C when the kernel is built (``_fastvec.pair_update``: each stored element read
once, float64/32/16 and bf16 decoded in C, chunks of ``KERNEL_CHUNK`` elements, no float64
buffers; per thread a 2 MiB histogram in two copies); the NumPy code below is the reference
(``USE_KERNEL = False``, tests) and the fallback (no build, other dtypes are converted, a
non-finite scale). Maxima, counts, required tolerances and the histogram are identical; sums
differ only in summation order.

Example:
    >>> import numpy as np
    >>> m = array_metrics(np.array([1.0, 2.0, 0.0]), np.array([1.0, 2.5, 1e-3]), rtol=0.1, atol=0.0)
    >>> (m["max_abs"], round(m["within"], 3), m["min_atol"])
    (0.5, 0.333, 0.3)
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from netparity.dtypes import decode, storage_dtype
from netparity.trace.schema import STAT_FIELDS, Record

if TYPE_CHECKING:
    from types import ModuleType

    from netparity.trace.fastrows import StatTable

_kernel: ModuleType | None
try:  # the optional C kernel (setup.py builds it); without it the NumPy pass below runs
    import netparity._fastvec as _kernel
except ImportError:  # pragma: no cover - depends on the build
    _kernel = None
if _kernel is not None and not hasattr(_kernel, "pair_update"):  # pragma: no cover - stale build
    _kernel = None

#: whether tensor pairs go through the fused C kernel when it is built (tests flip it to run
#: the NumPy reference pass on the same data)
USE_KERNEL = True

#: elements per chunk: large enough to amortise Python overhead, small enough that the chunk's
#: working set (three float64 arrays plus histogram scratch) stays in a core's L2 cache; measured
#: ~5% faster than 1 << 16 and ~25% faster than 1 << 17 (benchmarks/compare_throughput.py)
CHUNK = 1 << 15
#: elements per read of the fused C path (a multiple of CHUNK: the histogram's sampling
#: follows CHUNK-sized chunks either way): 256 KiB of float32 per side, so that the ``pread``
#: copy lands in cache for the checksum and the kernel -- measured on 60 ResNet-50 pairs
#: (1.13 GB), one thread: ~0.85 s CPU at x1/x2, 0.95 s at x4, 1.0 s at x8 (more system time)
KERNEL_CHUNK = CHUNK * 2
#: tensors of at most this many elements feed every element to the histogram
HIST_FULL = 1 << 16
#: histogram sampling stride for larger tensors
HIST_STRIDE = 4
#: warn band: a pair that fails its tolerance but passes at WARN_FACTOR times it is "warn"
WARN_FACTOR = 10.0
#: histogram layout: d bins = float32 bits >> 22 (2 per octave), r bins = bits >> 23 (1 per octave)
D_SHIFT, R_SHIFT, R_BITS = 22, 23, 8
N_BINS = (1 << 9) << R_BITS


def _f32_from_bits(bits: np.ndarray) -> np.ndarray:
    return np.asarray(bits, dtype=np.int64).astype(np.int32).view(np.float32).astype(np.float64)


def d_bin_edges(bd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper value edge of abs-error bins (float32 bits >> 22)."""
    bd = np.asarray(bd, dtype=np.int64)
    return _f32_from_bits(bd << D_SHIFT), _f32_from_bits((bd + 1) << D_SHIFT)


def r_bin_edges(br: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper value edge of reference-magnitude bins (float32 bits >> 23)."""
    br = np.asarray(br, dtype=np.int64)
    return _f32_from_bits(br << R_SHIFT), _f32_from_bits((br + 1) << R_SHIFT)


class _Buffers:
    """Per-thread scratch arrays, reused for every chunk of every pair."""

    def __init__(self, n: int = CHUNK):
        self.a = np.empty(n)
        self.b = np.empty(n)
        self.d = np.empty(n)
        # Small tensors are sampled with stride 1 (every element of a chunk): size for that.
        self.d32 = np.empty(n + 1, np.float32)
        self.r32 = np.empty_like(self.d32)
        self.br = np.empty(self.d32.shape, np.int32)
        self.mask = np.empty(n, np.bool_)
        self.pend = np.empty(1 << 18, np.int32)
        # the C kernel's running state of the pair in progress; its histogram is kept all
        # zeros between pairs (only the occupied range is cleared after each)
        self.kd = np.empty(10)
        self.ki = np.empty(9, np.int64)
        self.khist = np.zeros(2 * N_BINS, np.int64)  # two copies (see _fastvec.c)


class _Acc:
    """Running sums of one pair."""

    def __init__(self) -> None:
        self.n = 0
        self.sum_d = 0.0
        self.max_d = 0.0
        self.ss_d = 0.0
        self.aa = 0.0
        self.bb = 0.0
        self.ab = 0.0
        self.sum_rel = 0.0
        self.max_rel = 0.0
        self.excess = -math.inf
        self.rtol_need = -math.inf
        self.within = 0
        self.nan_mismatch = 0
        self.inf_mismatch = 0
        self.nonfinite_match = 0
        self.hist: np.ndarray | None = None  # dense, only for pairs with many samples
        self.sparse: dict[int, int] = {}
        self.sampled = 0
        self.pending = 0
        self.lo, self.hi = N_BINS, -1  # occupied range of the dense histogram

    def hist_slot(self, m: int, buf: _Buffers) -> np.ndarray:
        """The next ``m`` entries of the pending bin-index batch, for the caller to fill."""
        # Bin indices are buffered and counted in batches: one bincount over the full 2-D
        # grid per chunk would cost more than the chunk's arithmetic.
        if self.pending + m > buf.pend.shape[0]:
            self.flush_hist(buf)
        slot = buf.pend[self.pending : self.pending + m]
        self.pending += m
        self.sampled += m
        return slot

    def flush_hist(self, buf: _Buffers) -> None:
        if not self.pending:
            return
        idx = buf.pend[: self.pending]
        self.pending = 0
        if idx.shape[0] < (1 << 14) and self.hist is None:
            u, c = np.unique(idx, return_counts=True)
            for i, k in zip(u.tolist(), c.tolist()):
                self.sparse[i] = self.sparse.get(i, 0) + k
            return
        if self.hist is None:
            self.hist = np.zeros(N_BINS, np.int64)
        # unbuffered add.at: no N_BINS-sized temporary per batch, unlike bincount + add
        np.add.at(self.hist, idx, 1)
        # the occupied index range, so that histogram() scans only it (errors of one tensor
        # span a few dozen of the 512 d-bins)
        self.lo = min(self.lo, int(idx.min()))
        self.hi = max(self.hi, int(idx.max()))

    def histogram(self) -> tuple[np.ndarray, np.ndarray]:
        """Non-zero bins and their counts, sorted by bin."""
        if self.hist is None:
            keys = sorted(self.sparse)
            return (np.array(keys, dtype=np.int64),
                    np.array([self.sparse[k] for k in keys], dtype=np.int64))
        h = self.hist
        lo, hi = self.lo, self.hi + 1
        if self.sparse:
            h = h.copy()
            ks = np.fromiter(self.sparse.keys(), np.int64, len(self.sparse))
            np.add.at(h, ks, np.fromiter(self.sparse.values(), np.int64, len(self.sparse)))
            lo, hi = min(lo, int(ks.min())), max(hi, int(ks.max()) + 1)
        nz = np.flatnonzero(h[lo:hi]) + lo
        return nz.astype(np.int64), h[nz]


def _over(d: np.ndarray, r: np.ndarray, lo: float, buf: _Buffers) -> tuple[np.ndarray, np.ndarray]:
    """``d`` and ``r`` at the positions where ``d > lo`` (all of them when that is most)."""
    m = np.greater(d, lo, out=buf.mask[: d.shape[0]])
    # counting a bool mask is far cheaper than building the index array of a mostly-set one
    if np.count_nonzero(m) * 4 < d.shape[0]:
        idx = np.flatnonzero(m)
        return d.take(idx), r.take(idx)
    return d, r


def _accumulate(
    acc: _Acc,
    a: np.ndarray,
    b: np.ndarray,
    buf: _Buffers,
    *,
    scale: float,
    rtol: float,
    atol: float,
    stride: int,
    offset: int,
) -> None:
    """Add one chunk (float64 ``a`` = ref, ``b`` = cand, same length, views into ``buf``).

    The pass count per element is what limits throughput, so every quantity is computed from
    as few full-length NumPy passes as possible: ``|d|`` and ``|r|`` are computed once and
    reused, sums of squares are BLAS dot products, and the tolerance passes that a cheap bound
    already decides (all within when ``max(d - rtol*|r|) <= atol``; no positive rtol needed when
    ``max d <= atol``) are skipped -- the skipped work would produce the same numbers.
    """
    n = a.shape[0]
    d = buf.d[:n]
    np.subtract(b, a, out=d)  # inf - inf is NaN: handled below (warnings off in _stream)
    np.abs(d, out=d)
    # One reduction tells whether every element of both sides is finite (a NaN/inf on either side
    # makes |d| non-finite; float32/16 values cannot overflow a float64 sum) and is sum_d as well.
    sum_d = float(d.sum())
    if not math.isfinite(sum_d):
        fa, fb = np.isfinite(a), np.isfinite(b)
        both = fa & fb
        na, nb = np.isnan(a), np.isnan(b)
        acc.nan_mismatch += int(np.count_nonzero(na != nb))
        ia, ib = ~(fa | na), ~(fb | nb)  # infinities
        inf_bad = (ia | ib) & ~(na | nb) & ~((ia & ib) & (np.signbit(a) == np.signbit(b)))
        acc.inf_mismatch += int(np.count_nonzero(inf_bad))
        same_nf = (na & nb) | ((ia & ib) & (np.signbit(a) == np.signbit(b)))
        k = int(np.count_nonzero(same_nf))
        acc.nonfinite_match += k
        acc.within += k
        a = a[both]
        b = b[both]
        n = a.shape[0]
        if n == 0:
            return
        d = buf.d[:n]
        np.subtract(b, a, out=d)
        np.abs(d, out=d)
        sum_d = float(d.sum())
    acc.n += n
    acc.sum_d += sum_d
    max_d = float(d.max())
    acc.max_d = max(acc.max_d, max_d)
    acc.ss_d += float(np.dot(d, d))
    acc.aa += float(np.dot(a, a))
    acc.bb += float(np.dot(b, b))
    acc.ab += float(np.dot(a, b))
    # a and b are scratch from here on (views of the chunk buffers or filtered copies): reusing
    # them for |r| and the temporaries keeps the working set at three arrays, inside L2.
    r = np.abs(a, out=a)
    t = b
    np.maximum(r, scale, out=t)
    np.divide(d, t, out=t)
    acc.max_rel = max(acc.max_rel, float(t.max()))
    acc.sum_rel += float(t.sum())
    # excess = max(d - rtol*|r|), the smallest atol that passes at this rtol. It is reported
    # clamped at 0 and d - rtol*|r| <= d, so elements with d <= lo = min(max(excess so far, 0),
    # atol) can neither raise it nor fail the tolerance: only the others (usually a few percent
    # once the first chunk has set the running maximum) are evaluated.
    if rtol == 0.0:
        acc.excess = max(acc.excess, max_d)
        acc.within += n if max_d <= atol else int(np.count_nonzero(d <= atol))
    else:
        # (the bound d - rtol*|r| <= d needs rtol >= 0; a negative rtol visits every element)
        lo = min(max(acc.excess, 0.0), atol) if rtol > 0.0 else -math.inf
        if max_d <= lo:
            acc.within += n
        else:
            dd, rr = _over(d, r, lo, buf)
            tt = t[: dd.shape[0]]
            np.multiply(rr, rtol, out=tt)
            np.subtract(dd, tt, out=tt)
            excess = float(tt.max())
            acc.excess = max(acc.excess, excess)
            # ``tt <= atol`` for every element when its maximum is: no counting pass then
            within = tt.shape[0] if excess <= atol else int(np.count_nonzero(tt <= atol))
            acc.within += within + (n - tt.shape[0])
    # Only elements with d > atol can need a positive rtol ((d - atol)/|r| <= 0 otherwise, and
    # min_rtol is clamped at 0): none when max d <= atol, usually few otherwise.
    if max_d > atol:
        dd, rr = _over(d, r, atol, buf)
        tt = t[: dd.shape[0]]
        np.subtract(dd, atol, out=tt)
        np.divide(tt, rr, out=tt)  # x/0 -> inf, 0/0 -> NaN (warnings off in _stream)
        # fmax skips the NaN of 0/0 (an element exactly at atol with r == 0 needs no rtol)
        acc.rtol_need = max(acc.rtol_need, float(np.fmax.reduce(tt)))
    # 2-D log histogram of (d, |r|) on a strided sample, via float32 bit patterns: the exponent
    # and top mantissa bits of a non-negative float are a monotone piecewise-linear log2, bounded
    # (0..511 / 0..255) without clipping. Bin indices are written straight into the pending batch.
    ds = d[offset::stride]
    m_s = ds.shape[0]
    d32, r32, br = buf.d32[:m_s], buf.r32[:m_s], buf.br[:m_s]
    np.copyto(d32, ds, casting="unsafe")
    np.copyto(r32, r[offset::stride], casting="unsafe")
    slot = acc.hist_slot(m_s, buf)
    np.right_shift(d32.view(np.int32), D_SHIFT, out=slot)
    np.left_shift(slot, R_BITS, out=slot)
    np.right_shift(r32.view(np.int32), R_SHIFT, out=br)
    np.bitwise_or(slot, br, out=slot)


def _finish(acc: _Acc, numel: int, rtol: float, atol: float, scale: float) -> dict[str, Any]:
    n = acc.n
    out: dict[str, Any] = {
        "basis": "tensors",
        "numel": numel,
        "finite": n,
        "rtol": rtol,
        "atol": atol,
        "scale": scale,
        "nan_mismatch": acc.nan_mismatch,
        "inf_mismatch": acc.inf_mismatch,
        "nonfinite_match": acc.nonfinite_match,
        "within": (acc.within / numel) if numel else 1.0,
    }
    if n:
        ref_norm, cand_norm = math.sqrt(acc.aa), math.sqrt(acc.bb)
        if ref_norm == 0.0 and cand_norm == 0.0:
            cos = 1.0
        elif ref_norm == 0.0 or cand_norm == 0.0:
            cos = 0.0
        else:
            cos = acc.ab / (ref_norm * cand_norm)
        out.update(
            max_abs=acc.max_d,
            mean_abs=acc.sum_d / n,
            rmse=math.sqrt(acc.ss_d / n),
            max_rel=acc.max_rel,
            mean_rel=acc.sum_rel / n,
            cosine=max(-1.0, min(1.0, cos)),
            ref_rms=ref_norm / math.sqrt(n),
            cand_rms=cand_norm / math.sqrt(n),
            min_atol=max(0.0, acc.excess),
            min_rtol=max(0.0, acc.rtol_need),
        )
    else:
        out.update(
            max_abs=0.0, mean_abs=0.0, rmse=0.0, max_rel=0.0, mean_rel=0.0, cosine=1.0,
            ref_rms=0.0, cand_rms=0.0, min_atol=0.0, min_rtol=0.0,
        )
    nz, cnt = acc.histogram()
    if nz.size:
        out["hist"] = [[i, k] for i, k in zip(nz.tolist(), cnt.tolist())]
        out["hist_sampled"] = acc.sampled
        dmarg = np.bincount(nz >> R_BITS, weights=cnt, minlength=1 << 9)
        cdf = np.cumsum(dmarg)
        tot = cdf[-1]
        for q, name in ((0.5, "q50"), (0.9, "q90"), (0.99, "q99")):
            i = int(np.searchsorted(cdf, q * tot))
            lo, hi = d_bin_edges(np.array([i]))
            val = float(math.sqrt(lo[0] * hi[0])) if lo[0] > 0 else 0.0
            out[name] = min(val, acc.max_d)
    else:
        out.update(q50=0.0, q90=0.0, q99=0.0)
    return out


def array_metrics(
    ref: np.ndarray,
    cand: np.ndarray,
    *,
    rtol: float,
    atol: float,
    scale: float | None = None,
) -> dict[str, Any]:
    """Metrics of two in-memory arrays of equal size (see the module docstring).

    Example:
        >>> import numpy as np
        >>> array_metrics(np.ones(4), np.ones(4), rtol=0.0, atol=0.0)["max_abs"]
        0.0
    """
    r = np.asarray(ref).reshape(-1)
    c = np.asarray(cand).reshape(-1)
    if r.size != c.size:
        raise ValueError("array_metrics needs arrays of equal size")
    return _stream(
        lambda s, n: r[s : s + n], lambda s, n: c[s : s + n], r.size, rtol=rtol, atol=atol,
        scale=scale,
    )


def _rms_pass(read: Callable[[int, int], np.ndarray], numel: int) -> float:
    ss, n = 0.0, 0
    for s in range(0, numel, CHUNK):
        x = np.asarray(read(s, min(CHUNK, numel - s)), dtype=np.float64)
        x = x[np.isfinite(x)]
        ss += float(np.dot(x, x))
        n += x.size
    return math.sqrt(ss / n) if n else 0.0


_TLS_BUFFERS: dict[int, _Buffers] = {}


def _buffers() -> _Buffers:
    import threading

    tid = threading.get_ident()
    b = _TLS_BUFFERS.get(tid)
    if b is None:
        b = _TLS_BUFFERS[tid] = _Buffers()
    return b


def _stream(
    read_ref: Callable[[int, int], np.ndarray],
    read_cand: Callable[[int, int], np.ndarray],
    numel: int,
    *,
    rtol: float,
    atol: float,
    scale: float | None,
    ref_rms: float | None = None,
    cand_rms: float | None = None,
    stored_ref: Callable[[int, int], np.ndarray] | None = None,
    stored_cand: Callable[[int, int], np.ndarray] | None = None,
    ref_dtype: str | None = None,
    cand_dtype: str | None = None,
) -> dict[str, Any]:
    """The single pass. ``read_*(start, n)`` return ``n`` real values (any numeric dtype);
    ``stored_*`` (optional) return them as stored, for bfloat16 payloads (``*_dtype``), which
    the C kernel decodes itself."""
    if scale is None:
        if ref_rms is None:
            ref_rms = _rms_pass(read_ref, numel)
        if ref_rms == 0.0:
            if cand_rms is None:
                cand_rms = _rms_pass(read_cand, numel)
            ref_rms = cand_rms
        scale = ref_rms if ref_rms > 0.0 else float(np.finfo(np.float64).tiny)
    if (_kernel is not None and USE_KERNEL and 0.0 < scale < math.inf
            and not (math.isnan(rtol) or math.isnan(atol))):
        return _stream_kernel(_kernel_input(read_ref, stored_ref, ref_dtype),
                              _kernel_input(read_cand, stored_cand, cand_dtype), numel,
                              rtol=rtol, atol=atol, scale=scale)
    buf = _buffers()
    acc = _Acc()
    stride = 1 if numel <= HIST_FULL else HIST_STRIDE
    # One errstate for the whole pass (entering it per chunk costs more than a small chunk's
    # arithmetic): inf - inf, x/0 and 0/0 are expected and handled where they occur.
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for i, s in enumerate(range(0, numel, CHUNK)):
            n = min(CHUNK, numel - s)
            a, b = buf.a[:n], buf.b[:n]
            np.copyto(a, read_ref(s, n), casting="unsafe")
            np.copyto(b, read_cand(s, n), casting="unsafe")
            _accumulate(
                acc, a, b, buf, scale=scale, rtol=rtol, atol=atol, stride=stride,
                offset=(i % stride) if n > stride else 0,
            )
    acc.flush_hist(buf)
    return _finish(acc, numel, rtol, atol, scale)


#: element type codes of the C kernel's ``pair_update`` (3 = bfloat16 bits, from stored data)
_KIND = {np.dtype(np.float64): 0, np.dtype(np.float32): 1, np.dtype(np.float16): 2}


def _kernel_input(read: Callable[[int, int], np.ndarray],
                  stored: Callable[[int, int], np.ndarray] | None,
                  dtype: str | None) -> Callable[[int, int], tuple[np.ndarray, int]]:
    """A reader of ``(contiguous chunk, kernel type code)``: bfloat16 payloads as their stored
    bits (decoded in C), float64/32/16 values as they are, anything else (integers, bool, fp8
    decoded to float32...) converted to float64 as the NumPy pass does."""
    if dtype == "bfloat16" and stored is not None:
        return lambda s, n: (np.ascontiguousarray(stored(s, n)), 3)

    def read_values(s: int, n: int) -> tuple[np.ndarray, int]:
        x = read(s, n)
        k = _KIND.get(x.dtype)
        if k is None:
            return np.ascontiguousarray(x, dtype=np.float64), 0
        return np.ascontiguousarray(x), k

    return read_values


def _stream_kernel(
    read_ref: Callable[[int, int], tuple[np.ndarray, int]],
    read_cand: Callable[[int, int], tuple[np.ndarray, int]],
    numel: int,
    *,
    rtol: float,
    atol: float,
    scale: float,
) -> dict[str, Any]:
    """:func:`_stream`'s pass in the C kernel (``_fastvec.pair_update``): one read of each
    element, no float64 temporaries, the GIL released while it runs. Same results as the NumPy
    pass (maxima, counts, histogram exactly; sums up to summation order)."""
    assert _kernel is not None
    buf = _buffers()
    kd, ki, kh = buf.kd, buf.ki, buf.khist
    kd[:] = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -math.inf, -math.inf)
    ki[:] = (0, 0, 0, 0, 0, 0, N_BINS, -1, 0)
    stride = 1 if numel <= HIST_FULL else HIST_STRIDE
    update = _kernel.pair_update
    for s in range(0, numel, KERNEL_CHUNK):
        n = min(KERNEL_CHUNK, numel - s)
        a, ka = read_ref(s, n)
        b, kb = read_cand(s, n)
        update(a, ka, b, kb, kd, ki, kh, s, numel, CHUNK, stride, scale, rtol, atol)
    acc = _Acc()
    (acc.sum_d, acc.max_d, acc.ss_d, acc.aa, acc.bb, acc.ab, acc.sum_rel, acc.max_rel,
     acc.excess, acc.rtol_need) = kd.tolist()
    (acc.n, acc.within, acc.nan_mismatch, acc.inf_mismatch, acc.nonfinite_match, acc.sampled,
     acc.lo, acc.hi) = ki[:8].tolist()
    if acc.sampled:
        lo, hi = acc.lo, acc.hi + 1
        h, h2 = kh[:N_BINS], kh[N_BINS:]
        h[lo:hi] += h2[lo:hi]  # alternate samples went to the second copy
        h2[lo:hi] = 0
        acc.hist = h
    try:
        return _finish(acc, numel, rtol, atol, scale)
    finally:
        if acc.sampled:
            kh[acc.lo : acc.hi + 1] = 0  # back to all zeros for the next pair of this thread


class TensorReader:
    """Chunks of one record's payload as real values.

    Reads through the trace's own chunked reader
    (:meth:`Trace.payload_reader <netparity.trace.reader.Trace.payload_reader>`, ``pread``
    into a reused buffer); trace-like objects without one (in-memory fakes) are read through
    their ``raw_tensor``.
    """

    def __init__(self, trace: Any, rec: Record):
        self.rec = rec
        self.dtype = rec.dtype
        self.st = storage_dtype(rec.dtype)
        self.complex = self.st.kind == "c"
        self.raw: np.ndarray | None = None
        self.inner: Any = None
        opener = getattr(trace, "payload_reader", None)
        if opener is not None and rec.shard is not None:
            self.inner = opener(rec)
            return
        self.raw = np.asarray(trace.raw_tensor(rec)).reshape(-1)
        if self.complex:
            self.raw = self.raw.view(self.raw.real.dtype)

    @property
    def count(self) -> int:
        """Number of real values (complex tensors count two per element)."""
        return self.rec.numel * (2 if self.complex else 1)

    def read(self, start: int, n: int) -> np.ndarray:
        if self.inner is not None:
            return self.inner.read(start, n)  # type: ignore[no-any-return]
        return decode(self.read_stored(start, n), self.dtype)

    def read_stored(self, start: int, n: int) -> np.ndarray:
        """Values as stored (bf16 as its ``uint16`` bits; see ``PayloadReader.read_stored``)."""
        if self.inner is not None:
            return self.inner.read_stored(start, n)  # type: ignore[no-any-return]
        assert self.raw is not None
        raw = self.raw[start : start + n]
        if self.st == np.bool_:
            return raw.view(np.uint8)
        return raw

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()
            self.inner = None

    def __enter__(self) -> TensorReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def record_rms(rec: Record) -> float | None:
    """RMS of a record's finite values from its captured statistics (None when unknown)."""
    s = rec.stats or {}
    norm = s.get("norm")
    if norm is None:
        return None
    bad = sum(int(s.get(k) or 0) for k in ("nan", "posinf", "neginf"))
    n = rec.numel - bad
    if n <= 0:
        return 0.0
    if rec.dtype.startswith("complex"):
        n *= 2  # norm of |z| over 2n real values
    return float(norm) / math.sqrt(n)


def tensor_metrics(
    ref_trace: Any,
    ref: Record,
    cand_trace: Any,
    cand: Record,
    *,
    rtol: float,
    atol: float,
) -> dict[str, Any]:
    """Stream both payloads (shapes already checked to hold the same number of elements)."""
    with TensorReader(ref_trace, ref) as rr, TensorReader(cand_trace, cand) as cr:
        if rr.count != cr.count:
            raise ValueError("element counts differ")
        return _stream(
            rr.read, cr.read, rr.count, rtol=rtol, atol=atol, scale=None,
            ref_rms=record_rms(ref), cand_rms=record_rms(cand),
            stored_ref=rr.read_stored, stored_cand=cr.read_stored, ref_dtype=ref.dtype,
            cand_dtype=cand.dtype,
        )


def stream_arrays(a: np.ndarray, b: np.ndarray, *, rtol: float, atol: float) -> dict[str, Any]:
    """The same metrics for two in-memory arrays of equal size (flattened, real values).

    Example:
        >>> m = stream_arrays(np.ones(4), np.ones(4), rtol=0.0, atol=0.0)
        >>> m["max_abs"], m["basis"]
        (0.0, 'tensors')
    """
    fa, fb = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
    if fa.size != fb.size:
        raise ValueError("element counts differ")
    return _stream(lambda s, n: fa[s:s + n], lambda s, n: fb[s:s + n], fa.size, rtol=rtol,
                   atol=atol, scale=None)


#: statistics compared on the stats basis, all in the tensor's value units
STAT_KEYS = ("min", "max", "mean", "std")


def stats_metrics(ref: Record, cand: Record, *, rtol: float, atol: float) -> dict[str, Any]:
    """Judge a pair from captured statistics only (weaker: ``basis = "stats"``).

    Every quantity compared is bounded by the element-wise error: ``|dmin|, |dmax|, |dmean|,
    |dstd|, |dnorm|/sqrt(n) <= max|c - r|``. So each difference is a *lower bound* of ``max_abs``
    and a stats-basis failure is certain, while a stats-basis pass only says the statistics are
    consistent with agreement. The reference magnitude used for rtol is ``max(|min|, |max|)``.

    Example:
        >>> from netparity.trace import Record
        >>> st = dict(min=-1.0, max=1.0, mean=0.0, std=0.5, norm=1.0, nan=0, posinf=0, neginf=0)
        >>> a = Record(kind="module", dtype="float32", shape=(4,), stats=st)
        >>> b = Record(kind="module", dtype="float32", shape=(4,), stats={**st, "max": 1.5})
        >>> stats_metrics(a, b, rtol=0.0, atol=0.1)["max_abs_lb"]
        0.5
    """
    rs, cs = ref.stats or {}, cand.stats or {}
    diffs: dict[str, float] = {}
    for k in STAT_KEYS:
        x, y = rs.get(k), cs.get(k)
        if x is None or y is None:
            continue
        diffs[k] = abs(float(y) - float(x))
    n = max(1, ref.numel)
    if rs.get("norm") is not None and cs.get("norm") is not None:
        diffs["norm"] = abs(float(cs["norm"] or 0.0) - float(rs["norm"] or 0.0)) / math.sqrt(n)
    diffs = {k: v for k, v in diffs.items() if not math.isnan(v)}
    mag = max(abs(float(rs.get("min") or 0.0)), abs(float(rs.get("max") or 0.0)))
    rms = record_rms(ref) or 0.0
    lb = max(diffs.values(), default=0.0)
    nf = {k: (int(rs.get(k) or 0), int(cs.get(k) or 0)) for k in ("nan", "posinf", "neginf")}
    scale = max(mag, rms) or 1.0
    return {
        "basis": "stats",
        "numel": ref.numel,
        "rtol": rtol,
        "atol": atol,
        "stat_diff": diffs,
        "max_abs_lb": lb,
        "max_rel_lb": lb / scale,
        "ref_maxabs": mag,
        "ref_rms": rms,
        "nonfinite_counts": {k: list(v) for k, v in nf.items()},
        "nan_mismatch": abs(nf["nan"][0] - nf["nan"][1]),
        "inf_mismatch": abs(nf["posinf"][0] - nf["posinf"][1])
        + abs(nf["neginf"][0] - nf["neginf"][1]),
        "min_atol": max(0.0, lb - rtol * mag),
        "min_rtol": (max(0.0, (lb - atol) / mag) if mag > 0 else (0.0 if lb <= atol else math.inf)),
    }


_STAT_ALL = ("min", "max", "mean", "std", "norm", "nan", "posinf", "neginf")


_get_stats = operator.itemgetter(*_STAT_ALL)


def _clean_stats(rec: Record) -> tuple[float, ...] | None:
    """A record's statistics as numbers when every one :func:`stats_metrics` reads is present
    and finite (the batch path's precondition); None otherwise."""
    s = rec.stats
    try:
        vals: tuple[Any, ...] = _get_stats(s)
        # one sum screens them all: a None raises, a NaN or infinity (or an overflow of
        # finite values, which only sends a clean record the slow way) is not finite
        if math.isfinite(sum(vals)):
            return vals
    except (KeyError, TypeError):
        pass
    return None


def _pristine(rec: Record) -> tuple[StatTable, int] | None:
    """(table, row) of a :class:`ScannedRecord` whose statistics are still only in its table."""
    d = rec.__dict__
    t = d.get("_table")
    return None if t is None or "_stats" in d else (t, d["_row"])


def _by_table(recs: list[Record]) -> tuple[dict[int, tuple[StatTable, list[int], list[int]]],
                                            list[int]]:
    """Positions of pristine scanned records grouped by their table (with their rows), and
    the positions of the other records. (List comprehensions, not a loop calling
    :func:`_pristine`: this runs over every pair of a large comparison.)"""
    ds = [r.__dict__ for r in recs]
    tabs = [None if "_stats" in d else d.get("_table") for d in ds]
    groups: dict[int, tuple[StatTable, list[int], list[int]]] = {}
    for t in {id(t): t for t in tabs if t is not None}.values():
        pos = [i for i, x in enumerate(tabs) if x is t]
        groups[id(t)] = (t, pos, [ds[i]["_row"] for i in pos])  # type: ignore[arg-type]
    others = [i for i, x in enumerate(tabs) if x is None]
    return groups, others


_ALL_AT = [STAT_FIELDS.index(k) for k in ("min", "max", "mean", "std", "norm", "nan", "posinf",
                                          "neginf")]
_NORM_AT, _BAD_AT = STAT_FIELDS.index("norm"), [STAT_FIELDS.index(k)
                                                 for k in ("nan", "posinf", "neginf")]
_ALL_IX, _BAD_IX = np.array(_ALL_AT, dtype=np.int64), np.array(_BAD_AT, dtype=np.int64)


def table_stat_rows(table: StatTable, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_stat_rows` of rows ``rows`` of a :class:`~netparity.trace.fastrows.StatTable`
    (records whose statistics were never made into a dict)."""
    rows = np.asarray(rows, dtype=np.intp)
    sub = table.floats[rows][:, _ALL_IX]
    total = np.zeros(len(rows), dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        for k in range(sub.shape[1]):  # left to right, as Python's sum adds them
            total = total + sub[:, k]
    good = ~table.null[rows][:, _ALL_IX].any(axis=1) & np.isfinite(total)
    return sub, good


def _stat_rows(recs: list[Record]) -> tuple[np.ndarray, np.ndarray]:
    """The statistics :func:`_clean_stats` reads, as a ``(len(recs), 8)`` float matrix, and
    which rows are clean (all present, finite sum) -- from the stat tables of scanned records
    without making their dicts, record by record for the others. Same values and mask as
    :func:`_clean_stats` (the sum is taken in the same order)."""
    n = len(recs)
    vals = np.zeros((n, len(_ALL_AT)), dtype=np.float64)
    ok = np.zeros(n, dtype=bool)
    groups, others = _by_table(recs)
    for table, pos, rows in groups.values():
        vals[pos], ok[pos] = table_stat_rows(table, np.asarray(rows))
    for i in others:
        x = _clean_stats(recs[i])
        if x is not None:
            vals[i] = x
            ok[i] = True
    return vals, ok


def table_rms(table: StatTable, rows: np.ndarray, cplx: np.ndarray) -> tuple[np.ndarray,
                                                                              np.ndarray]:
    """:func:`record_rms` of rows ``rows`` of a stat table (``cplx``: complex dtype, per row):
    the values (float64, bit-identical) and where it is unknown (None: the norm is NULL)."""
    r = np.asarray(rows, dtype=np.intp)
    fl, nl = table.floats[r], table.null[r]  # whole rows
    norm = fl[:, _NORM_AT]
    bad = np.where(nl[:, _BAD_IX], 0, fl[:, _BAD_IX]).astype(np.int64).sum(axis=1)
    cnt = table.numel[r] - bad
    cnt = np.where(cplx, 2 * cnt, cnt)
    with np.errstate(invalid="ignore", divide="ignore"):
        rms = np.where(cnt > 0, norm / np.sqrt(np.maximum(cnt, 1).astype(np.float64)), 0.0)
    return rms, nl[:, _NORM_AT]


def records_rms(recs: list[Record]) -> list[float | None]:
    """:func:`record_rms` of many records (bit-identical), vectorised over scanned records."""
    out: list[float | None] = [None] * len(recs)
    groups, others = _by_table(recs)
    for table, pos, rows in groups.values():
        cplx = np.array([recs[i].dtype.startswith("complex") for i in pos], dtype=bool)
        rms, missing = table_rms(table, np.asarray(rows), cplx)
        for i, v, miss in zip(pos, rms.tolist(), missing.tolist()):
            out[i] = None if miss else v
    for i in others:
        out[i] = record_rms(recs[i])
    return out


def stats_ready(rec: Record) -> bool:
    """``bool(rec.stats) and rec.stats.get("norm") is not None``, without making a scanned
    record's dict (a scanned record always holds every statistic key)."""
    d = rec.__dict__
    t = d.get("_table")
    if t is not None and "_stats" not in d:
        return t.norm_ok[d["_row"]]  # type: ignore[no-any-return]
    return bool(rec.stats) and rec.stats.get("norm") is not None


def stats_present(rec: Record) -> bool:
    """``bool(rec.stats)``, without making a scanned record's dict (it holds every key)."""
    return _pristine(rec) is not None or bool(rec.stats)


class StatsBatch:
    """Statistics-basis metrics of many pairs as columns: what :func:`stats_metrics` computes
    per pair, without a dict per pair (made by :func:`stats_batch`).

    ``ok`` (one entry per pair given) marks the pairs the batch handles: statistics all
    present and finite on both sides. The other columns have one row per *handled* pair, in
    order (``at`` = their positions among the pairs given): ``diffs`` (``|dmin|, |dmax|,
    |dmean|, |dstd|, |dnorm|/sqrt(n)``), ``lb`` (``max_abs_lb``), ``rel`` (``max_rel_lb``),
    ``mag`` (``ref_maxabs``), ``rms`` (``ref_rms``), ``min_atol``, ``min_rtol``, the NaN,
    +Inf, -Inf counts ``cnt_r`` / ``cnt_c`` (int64), and the tolerances (``rtol`` / ``atol``
    as float arrays; ``rtol_in`` / ``atol_in`` the values as given, which land in the dicts).
    :meth:`metrics` builds one handled pair's dict, equal to :func:`stats_metrics`'s;
    :meth:`status` judges them all at once, as :func:`~netparity.compare.verdicts.judge` does.
    """

    def __init__(self, n: int):
        self.ok = np.zeros(n, dtype=bool)
        self.at = np.zeros(0, dtype=np.int64)
        z = np.zeros(0)
        self.diffs = np.zeros((0, 5))
        self.lb = self.rel = self.mag = self.rms = self.min_atol = self.min_rtol = z
        #: the NaN, +Inf, -Inf counts of both sides (``(n, 6)`` int64); None when all are 0
        self.counts: np.ndarray | None = None
        self.numel = np.zeros(0, dtype=np.int64)
        self.rtol_in: Any = []
        self.atol_in: Any = []
        self._lists: tuple[list[Any], ...] | None = None
        self._asked = 0  # dicts made so far (see metrics)

    def __len__(self) -> int:
        return len(self.at)

    @classmethod
    def join(cls, parts: list[StatsBatch]) -> StatsBatch:
        """The batches of consecutive runs of pairs as one batch (what one call on all the
        pairs gives: every column is computed row by row). Consumes ``parts``: each column
        of theirs is dropped once joined (the whole batch is then held once, not twice)."""
        if len(parts) == 1:
            return parts[0]

        def joined(name: str) -> Any:
            cols = [getattr(b, name) for b in parts]
            for b in parts:
                setattr(b, name, None)
            if all(isinstance(c, np.ndarray) for c in cols):
                return np.concatenate(cols)
            return [x for c in cols for x in c]

        out = cls(0)
        sizes = [len(b.ok) for b in parts]
        offsets = np.cumsum([0] + sizes[:-1])
        for b, o in zip(parts, offsets):
            b.at = b.at + o
        # NaN/Inf counts: kept only where some pair has one (as one batch over all does)
        counts = any(b.counts is not None for b in parts)
        if counts:
            for b in parts:
                if b.counts is None:
                    b.counts = np.zeros((len(b.at), 6), dtype=np.int64)
        for name in ("ok", "at", "diffs", "lb", "rel", "mag", "rms", "min_atol", "min_rtol",
                     "numel", "rtol_in", "atol_in") + (("counts",) if counts else ()):
            setattr(out, name, joined(name))
        return out

    # what a batch does not keep (a 1M-op comparison's ~3M pairs): made when asked for
    @property
    def rtol(self) -> np.ndarray:
        """The pairs' ``rtol`` as floats."""
        return np.asarray(self.rtol_in, dtype=np.float64)

    @property
    def atol(self) -> np.ndarray:
        """The pairs' ``atol`` as floats."""
        return np.asarray(self.atol_in, dtype=np.float64)

    @property
    def cnt_r(self) -> np.ndarray:
        """The reference's NaN, +Inf, -Inf counts (``(n, 3)`` int64)."""
        c = self.counts
        return c[:, :3] if c is not None else np.zeros((len(self.at), 3), dtype=np.int64)

    @property
    def cnt_c(self) -> np.ndarray:
        """The candidate's NaN, +Inf, -Inf counts (``(n, 3)`` int64)."""
        c = self.counts
        return c[:, 3:] if c is not None else np.zeros((len(self.at), 3), dtype=np.int64)

    def nonfinite_mismatch(self) -> tuple[np.ndarray, np.ndarray]:
        """``nan_mismatch`` and ``inf_mismatch`` of every handled pair (int64)."""
        if self.counts is None:
            z = np.zeros(len(self.at), dtype=np.int64)
            return z, z
        r, c = self.cnt_r, self.cnt_c
        return (np.abs(r[:, 0] - c[:, 0]),
                np.abs(r[:, 1] - c[:, 1]) + np.abs(r[:, 2] - c[:, 2]))

    def status(self) -> np.ndarray:
        """Status codes of the handled pairs (0 pass, 1 warn, 2 fail): the stats rule of
        :func:`~netparity.compare.verdicts.judge`, vectorised -- a NaN/Inf count that differs
        fails; else ``lb <= bound`` passes and ``lb <= WARN_FACTOR * bound`` warns, with
        ``bound = atol + rtol * ref_maxabs`` (the same float operations, in the same order)."""
        nan_m, inf_m = self.nonfinite_mismatch()
        bound = self.atol + self.rtol * self.mag
        out = np.where(self.lb <= bound, 0, np.where(self.lb <= WARN_FACTOR * bound, 1, 2))
        out[(nan_m != 0) | (inf_m != 0)] = 2
        return out.astype(np.int8)

    def metrics(self, j: int) -> dict[str, Any]:
        """The metrics dict of handled pair ``j``, as :func:`stats_metrics` makes it."""
        ls = self._lists
        if ls is None:
            self._asked += 1
            if self._asked < 256:  # a report shows a few pairs: their rows only
                dj, nr, nc = (self.diffs[j].tolist(), self.cnt_r[j].tolist(),
                              self.cnt_c[j].tolist())
                row = [x[j].item() for x in (self.lb, self.rel, self.mag, self.rms,
                                             self.min_atol, self.min_rtol)]
                return self._dict(j, dj, nr, nc, *row)
            # JSON/CSV/HTML ask for every pair: Python numbers once for all of them
            ls = self._lists = (
                self.diffs.tolist(), self.cnt_r.tolist(), self.cnt_c.tolist(),
                self.lb.tolist(), self.rel.tolist(), self.mag.tolist(), self.rms.tolist(),
                self.min_atol.tolist(), self.min_rtol.tolist(), self.numel.tolist())
        return self._dict(j, *(x[j] for x in ls))

    def _dict(self, j: int, dj: list[float], nr: list[int], nc: list[int], lb: float,
              rel: float, mag: float, rms: float, mina: float, minr: float,
              numel: int | None = None) -> dict[str, Any]:
        return {
            "basis": "stats",
            "numel": self.numel[j].item() if numel is None else numel,
            "rtol": self.rtol_in[j],
            "atol": self.atol_in[j],
            "stat_diff": {"min": dj[0], "max": dj[1], "mean": dj[2], "std": dj[3],
                          "norm": dj[4]},
            "max_abs_lb": lb,
            "max_rel_lb": rel,
            "ref_maxabs": mag,
            "ref_rms": rms,
            "nonfinite_counts": {"nan": [nr[0], nc[0]], "posinf": [nr[1], nc[1]],
                                 "neginf": [nr[2], nc[2]]},
            "nan_mismatch": abs(nr[0] - nc[0]),
            "inf_mismatch": abs(nr[1] - nc[1]) + abs(nr[2] - nc[2]),
            "min_atol": mina,
            "min_rtol": minr,
        }


def stats_batch(refs: list[Record], cands: list[Record], rtol: list[float],
                atol: list[float]) -> StatsBatch:
    """:func:`stats_metrics` of the pairs ``zip(refs, cands)`` as a :class:`StatsBatch`.

    Bit-identical to the scalar function for the pairs it handles: those whose statistics are
    all present and finite on both sides (NumPy's float64 ``-``, ``/``, ``sqrt`` round exactly
    as Python's, and ``max(0.0, x)`` is written as ``where(x > 0, x, 0.0)``, keeping its
    handling of ``-0.0``); ``rtol``/``atol`` are per pair and land in the metrics as given.
    The rest -- missing or non-finite statistics, where Python's ``max`` and ``or`` have their
    own NaN/None rules -- are not handled (``ok`` False): judge those one by one.
    """
    xr, okr = _stat_rows(refs)
    xc, okc = _stat_rows(cands)
    sel = [refs[i] for i in np.nonzero(okr & okc)[0].tolist()]
    return stats_batch_arrays(xr, okr, xc, okc, [p.numel for p in sel],
                              [p.dtype.startswith("complex") for p in sel], rtol, atol)


def stats_batch_arrays(xr: np.ndarray, okr: np.ndarray, xc: np.ndarray, okc: np.ndarray,
                       numels: list[int], cplx: Any, rtol: Any, atol: Any) -> StatsBatch:
    """:func:`stats_batch` of pairs given as their statistics matrices and clean flags
    (:func:`table_stat_rows`); ``numels`` and ``cplx`` (complex dtype) are those of the
    reference side of the pairs both sides of which are clean, ``rtol``/``atol`` per pair
    (lists, or object arrays: the values land in the metrics as given)."""
    out = StatsBatch(len(xr))
    both = okr & okc
    out.ok = both
    ok = np.nonzero(both)[0]
    if not len(ok):
        return out
    out.at = ok
    k = len(_STAT_ALL)
    # every pair clean (the common case): the matrices themselves, not a copy
    r, c = (xr, xc) if len(ok) == len(xr) else (xr[both], xc[both])
    numel = np.array(numels, dtype=np.float64)
    cplx = np.asarray(cplx, dtype=bool)
    if isinstance(rtol, np.ndarray) and isinstance(atol, np.ndarray):  # object arrays
        out.rtol_in, out.atol_in = rtol[ok], atol[ok]
    else:
        okl = ok.tolist()
        out.rtol_in = [rtol[i] for i in okl]
        out.atol_in = [atol[i] for i in okl]
    rt, at = out.rtol, out.atol
    # |dmin|, |dmax|, |dmean|, |dstd|, |dnorm| / sqrt(max(1, numel)), written in place
    diffs = np.empty((len(ok), 5))
    np.subtract(c[:, :5], r[:, :5], out=diffs)
    np.abs(diffs, out=diffs)
    diffs[:, 4] /= np.sqrt(np.maximum(1.0, numel))
    lb = diffs.max(axis=1)
    mag = np.maximum(np.abs(r[:, 0]), np.abs(r[:, 1]))
    # record_rms: the norm over the finite values' count (twice that for complex)
    cnt = numel - (r[:, 5] + r[:, 6] + r[:, 7])
    cnt = np.where(cplx, 2 * cnt, cnt)
    with np.errstate(divide="ignore", invalid="ignore"):
        rms = np.where(cnt > 0, r[:, 4] / np.sqrt(np.where(cnt > 0, cnt, 1.0)), 0.0)
        scale = np.maximum(mag, rms)
        scale = np.where(scale != 0, scale, 1.0)
        rel = lb / scale
        x = lb - rt * mag
        min_atol = np.where(x > 0, x, 0.0)
        y = (lb - at) / np.where(mag > 0, mag, 1.0)
        min_rtol = np.where(mag > 0, np.where(y > 0, y, 0.0),
                            np.where(lb <= at, 0.0, math.inf))
    assert k == r.shape[1]
    out.diffs, out.lb, out.rel, out.mag, out.rms = diffs, lb, rel, mag, rms
    out.min_atol, out.min_rtol = min_atol, min_rtol
    if r[:, 5:8].any() or c[:, 5:8].any():
        out.counts = np.concatenate([r[:, 5:8], c[:, 5:8]], axis=1).astype(np.int64)
    out.numel = np.array(numels, dtype=np.int64)
    return out


def stats_metrics_many(pairs: list[tuple[Record, Record]], rtol: list[float],
                       atol: list[float]) -> list[dict[str, Any] | None]:
    """:func:`stats_metrics` of many pairs at once (a dict per pair; :func:`stats_batch`
    gives the same numbers as columns): None for the pairs the batch does not handle
    (missing or non-finite statistics): judge those one by one."""
    b = stats_batch([a for a, _ in pairs], [c for _, c in pairs], rtol, atol)
    out: list[dict[str, Any] | None] = [None] * len(pairs)
    for j, i in enumerate(b.at.tolist()):
        out[i] = b.metrics(j)
    return out
