"""PyTorch adapter: dtype names, on-device statistics, snapshots, manifest facts.

Statistics follow :mod:`netparity.stats` exactly (finite-only min/max/mean/std/norm/abs_sum;
counts of NaN, +Inf, -Inf, zeros and finite values above 65504; complex tensors describe
``|x|``; reductions accumulate in float64). They are computed on the tensor's own device and
returned as a small float64 tensor of 12 numbers (the 11 statistics plus the count of finite
values) so that :meth:`TorchAdapter.resolve_stats` can fetch a whole batch with one transfer;
the CPU path, which has nothing to transfer, returns the same 12 numbers as a list.

Two code paths compute the same numbers:

* the *exact* path (every device): one float64 copy, finite-masked reductions. On an
  accelerator this costs little and never synchronises the device.
* the *fast* path (CPU only): a few reductions over the tensor in its own (or float32) dtype,
  which is exact whenever the tensor is finite and within float16 range -- the common case.
  Because a CPU "device" has nothing to synchronise with, the fast path looks at its own min/max
  on the host and falls back to the exact path when the tensor holds NaN/Inf or values beyond
  65504.

Example:
    >>> import torch
    >>> a = TorchAdapter()
    >>> h = a.stats_handle(torch.tensor([1.0, -3.0, float("nan")]))
    >>> s = a.resolve_stats([h])[0]
    >>> (s["min"], s["max"], s["nan"], s["abs_sum"])
    (-3.0, 1.0, 1, 4.0)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import torch

from netparity.dtypes import FP16_MAX
from netparity.frameworks.base import FrameworkAdapter
from netparity.stats import empty_stats
from netparity.trace.schema import STAT_FIELDS

_DTYPE_NAMES: dict[torch.dtype, str] = {
    torch.float64: "float64",
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.int16: "int16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.bool: "bool",
    torch.complex64: "complex64",
    torch.complex128: "complex128",
}
for _name in ("float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64"):
    if hasattr(torch, _name):
        _DTYPE_NAMES[getattr(torch, _name)] = _name

#: dtypes whose host payload is stored as raw bits of an unsigned integer type
_BITS_VIEW: dict[torch.dtype, torch.dtype] = {torch.bfloat16: torch.int16}
for _name in ("float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, _name):
        _BITS_VIEW[getattr(torch, _name)] = torch.uint8
_NP_BITS = {torch.int16: np.uint16, torch.uint8: np.uint8}

#: values of the handle vector after the 11 statistics
_NFIN = len(STAT_FIELDS)
_VEC = _NFIN + 1
_COUNT_IDX = {i for i, k in enumerate(STAT_FIELDS) if k in ("nan", "posinf", "neginf", "zeros", "fp16_overflow")}

_kernel: ModuleType | None
try:  # the optional one-pass C kernel (setup.py builds it; absent without a C compiler)
    import netparity._fastvec as _kernel
except ImportError:  # pragma: no cover - depends on the build
    _kernel = None

#: threads the C kernel uses for one large tensor. One, measured: between the step's
#: operators torch's OpenMP workers still spin-wait on the other cores, so a second kernel
#: thread competes with them -- on the 2-core benchmark machine two threads made the captured
#: ResNet-50 step slower (1.50x against 1.37x), although they double the kernel's speed on
#: an idle machine (see benchmarks/stats_kernel.py).
KERNEL_THREADS = 1

#: rows used by the fast path's sum of squares: shorter float32 rows keep rounding ~1e-7
_ROW = 4096


def _exact_vec(t: torch.Tensor) -> torch.Tensor:
    """Statistics vector of ``t`` in float64 with finite masking; device-side, no sync."""
    if t.is_complex():
        re, im = t.real, t.imag
        nanm = torch.isnan(re) | torch.isnan(im)
        a = torch.where(nanm, torch.full((), math.nan, dtype=torch.float64, device=t.device),
                        torch.abs(t).to(torch.float64))
    else:
        a = t.to(torch.float64)
    a = a.reshape(-1)
    fin = torch.isfinite(a)
    nfin = fin.sum()
    af = torch.where(fin, a, 0.0)
    absf = af.abs()
    nf = nfin.to(torch.float64)
    s = af.sum()
    mean = s / nf.clamp_min(1)
    d = torch.where(fin, a - mean, 0.0)
    var = torch.dot(d, d) / nf.clamp_min(1)
    inf = torch.full((), math.inf, dtype=torch.float64, device=t.device)
    mn = torch.where(fin, a, inf).min()
    mx = torch.where(fin, a, -inf).max()
    nan = torch.isnan(a).sum()
    posinf = (a == math.inf).sum()
    neginf = (a == -math.inf).sum()
    zeros = (a == 0).sum()
    ovf = (absf > FP16_MAX).sum()
    parts = [mn, mx, mean, var.sqrt(), torch.sqrt(torch.dot(af, af)), absf.sum(),
             nan, posinf, neginf, zeros, ovf, nfin]
    return torch.stack([p.to(torch.float64) for p in parts])


#: elements per chunk of the CPU path's abs/zero pass: the chunk's |x| buffer stays in cache
_CHUNK = 1 << 18


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


def _fast_cpu_vec(t: torch.Tensor) -> torch.Tensor | list[float]:
    """CPU statistics in one or few passes; :func:`_exact_vec` for non-finite/large data.

    Runs on a zero-copy NumPy view of the tensor (float32/float64; other dtypes are converted
    first). With the C kernel (:mod:`netparity._fastvec`) every statistic comes from one memory
    pass (on :data:`KERNEL_THREADS` threads). Without it, a handful of NumPy passes give the
    same numbers (see :func:`_numpy_sums`). Either way the result is exact
    whenever the tensor is finite and within float16 range -- the common case; otherwise the
    tensor takes the finite-masked float64 path.
    """
    x = t
    if x.dtype not in (torch.float32, torch.float64):
        # half/bf16/fp8 sums overflow or lose precision in their own dtype; ints/bool need a
        # float type for the reductions. float32 holds all of them exactly (ints up to 2**24;
        # larger ints take float64).
        if x.is_floating_point() or x.dtype in (torch.bool, torch.uint8, torch.int8, torch.int16):
            x = x.to(torch.float32)
        else:
            x = x.to(torch.float64)
    if x.is_conj() or x.is_neg():
        x = x.resolve_conj().resolve_neg()
    flat = x.reshape(-1)  # CPU: shares memory when it can
    if not flat.is_contiguous():  # e.g. an expanded (stride-0) view
        flat = flat.contiguous()
    a = flat.numpy()
    if _kernel is not None:
        lo, hi, s, sq, abs_sum, zeros = _kernel.stats(a, KERNEL_THREADS)
        if not math.isfinite(sq):  # a NaN or +-Inf somewhere (min/max skip NaN, the sums don't)
            return _exact_vec(t)
    else:
        lo, hi = float(a.min()), float(a.max())  # NaN propagates, so it fails the test below
        s = sq = abs_sum = 0.0
        zeros = 0
    if not (lo >= -FP16_MAX and hi <= FP16_MAX):
        return _exact_vec(t)
    n = a.size
    if _kernel is None:
        s, sq, abs_sum, zeros = _numpy_sums(a, lo, hi)
    mean = s / n
    var = sq / n - mean * mean
    if mean * mean > 10.0 * var:
        # |mean| dominates: sum(x^2)/n - mean^2 would cancel; take the two-pass route with the
        # mean rounded to x's dtype, corrected exactly in float64
        m = a.dtype.type(mean)
        if _kernel is not None:
            _, _, sum_d, sq_d, _, _ = _kernel.stats(a, KERNEL_THREADS, float(m))
        else:
            sq_d = _sumsq64(a - m)
            sum_d = s - n * float(m)
        var = (sq_d - sum_d * sum_d / n) / n
    # already on the host: a plain list (a tensor per record would cost more than the kernel
    # on small tensors)
    return [lo, hi, mean, math.sqrt(max(var, 0.0)), math.sqrt(max(sq, 0.0)), abs_sum, 0, 0, 0,
            zeros, 0, n]


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


class TorchAdapter(FrameworkAdapter):
    """:class:`FrameworkAdapter` for ``torch.Tensor`` and ``torch.nn.Module``.

    Example:
        >>> import torch
        >>> TorchAdapter().dtype_name(torch.zeros(2, dtype=torch.bfloat16))
        'bfloat16'
    """

    name = "torch"
    module = "torch"

    def __init__(self) -> None:
        self._empty = None

    # ---- identification --------------------------------------------------------------------
    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, torch.Tensor)

    def is_model(self, obj: Any) -> bool:
        return isinstance(obj, torch.nn.Module)

    def dtype_name(self, t: Any) -> str:
        try:
            return _DTYPE_NAMES[t.dtype]
        except KeyError:
            return str(t.dtype).replace("torch.", "")

    def shape(self, t: Any) -> tuple[int, ...]:
        return tuple(t.shape)

    # ---- statistics ------------------------------------------------------------------------
    def stats_handle(self, t: Any) -> Any:
        """Start the statistics of ``t``: a 12-element float64 tensor on ``t``'s device, or --
        for CPU tensors, computed at once -- a list of 12 numbers (``None`` for no elements).

        Never mutates ``t``, never changes its dtype, uses no RNG and builds no autograd graph.
        """
        x = t.detach()  # no graph is built from a detached tensor: no need for no_grad()
        dev = x.device.type
        if x.numel() == 0 or x.layout != torch.strided or dev == "meta":
            return None
        if dev == "cpu" and not x.is_complex():
            return _fast_cpu_vec(x)
        return _exact_vec(x)

    def resolve_stats(self, handles: list[Any]) -> list[dict[str, Any]]:
        """Fetch a batch of handles: one stack and one host transfer per device (usually one)."""
        rows: list[list[float] | None] = [h if isinstance(h, list) else None for h in handles]
        by_dev: dict[Any, list[int]] = {}
        for i, h in enumerate(handles):
            if isinstance(h, torch.Tensor):
                by_dev.setdefault(h.device, []).append(i)
        for idx in by_dev.values():
            block = torch.stack([handles[i] for i in idx]).cpu().tolist()  # the one transfer
            for i, row in zip(idx, block):
                rows[i] = row
        return [self._to_dict(r) for r in rows]

    @staticmethod
    def _to_dict(row: list[float] | None) -> dict[str, Any]:
        out = empty_stats()
        if row is None:
            return out
        for i, k in enumerate(STAT_FIELDS):
            v = row[i]
            out[k] = int(v) if i in _COUNT_IDX else float(v)
        if row[_NFIN] == 0:
            for k in ("min", "max", "mean", "std"):
                out[k] = None
            out["norm"] = 0.0
            out["abs_sum"] = 0.0
        return out

    # ---- payloads --------------------------------------------------------------------------
    def snapshot(self, t: Any) -> tuple[Callable[[], np.ndarray], int]:
        """Clone ``t`` now on its device; the returned thunk copies it to the host later."""
        with torch.no_grad():
            c = t.detach().clone()
        nbytes = c.numel() * c.element_size()

        def host() -> np.ndarray:
            return self.to_numpy(c)

        return host, nbytes

    def to_numpy(self, t: Any) -> np.ndarray:
        x = t.detach()
        if x.is_conj():
            x = x.resolve_conj()
        if x.is_neg():
            x = x.resolve_neg()
        x = x.cpu()
        bits = _BITS_VIEW.get(x.dtype)
        if bits is not None:
            return x.contiguous().view(bits).numpy().view(_NP_BITS[bits])
        return x.numpy()

    # ---- facts -----------------------------------------------------------------------------
    def facts(self) -> dict[str, Any]:
        cuda = torch.cuda.is_available()
        precision: dict[str, Any] = {
            "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
            "autocast_cpu": bool(torch.is_autocast_enabled("cpu")),
            "autocast_cpu_dtype": str(torch.get_autocast_dtype("cpu")).replace("torch.", ""),
        }
        if cuda:
            precision["autocast_cuda"] = bool(torch.is_autocast_enabled("cuda"))
            precision["autocast_cuda_dtype"] = str(torch.get_autocast_dtype("cuda")).replace(
                "torch.", ""
            )
        device = torch.cuda.get_device_name(torch.cuda.current_device()) if cuda else "cpu"
        return {
            "framework": "torch",
            "framework_version": torch.__version__,
            "device": device,
            "cuda": torch.version.cuda,
            "threads": torch.get_num_threads(),
            "precision": precision,
        }

    def seed(self, seed: int) -> dict[str, Any]:
        torch.manual_seed(seed)
        if torch.cuda.is_available():
            torch.cuda.manual_seed_all(seed)
        return {"torch": seed}
