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
* the *fast* path (CPU only): :func:`netparity.hoststats.finite_vec`, one pass of the C kernel
  over the tensor's memory (float32 or float64), good to ~1e-7 whenever the tensor is finite and
  within float16 range -- the common case. Because a CPU "device" has nothing to synchronise
  with, the fast path sees its own min/max on the host and falls back to the exact path when the
  tensor holds NaN/Inf or values beyond 65504. A large tensor is split between
  ``torch.get_num_threads()`` kernel threads run by torch's own OpenMP team (see
  :func:`netparity.hoststats.share_openmp_pool`), when ATen's parallel backend is OpenMP.

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
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from netparity import hoststats
from netparity.dtypes import FP16_MAX
from netparity.frameworks.base import CheckpointData, FrameworkAdapter, ParamCounts
from netparity.hoststats import (
    finite_vec,
    finite_vec_relu,
    finite_vec_sum,
    finite_vec_sum_last,
    finite_vecs,
    vec_to_stats,
)

#: torch dtype object -> canonical name, by identity (``str(dtype)`` may be patched by a library)
DTYPE_NAMES: dict[torch.dtype, str] = {
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
        DTYPE_NAMES[getattr(torch, _name)] = _name
# Any other dtype: the longest name under which torch exports it (``complex32``, not ``chalf``).
for _name, _obj in sorted(vars(torch).items(), key=lambda kv: -len(kv[0])):
    if isinstance(_obj, torch.dtype):
        DTYPE_NAMES.setdefault(_obj, _name)

#: dtypes whose host payload is stored as raw bits of an unsigned integer type
_BITS_VIEW: dict[torch.dtype, torch.dtype] = {torch.bfloat16: torch.int16}
for _name in ("float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, _name):
        _BITS_VIEW[getattr(torch, _name)] = torch.uint8
_NP_BITS = {torch.int16: np.uint16, torch.uint8: np.uint8}

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


_pool_bound: bool | None = None


def kernel_threads() -> int:
    """Threads for the statistics kernel on a CPU tensor: torch's intra-op thread count when the
    kernel can run on torch's OpenMP team (bound on first use), else
    :data:`netparity.hoststats.KERNEL_THREADS`."""
    global _pool_bound
    if hoststats._kernel is None:  # no kernel (yet: tests swap it): decide when there is one
        return hoststats.KERNEL_THREADS
    if _pool_bound is None:
        try:
            openmp = "parallel backend: OpenMP" in torch.__config__.parallel_info()
        except Exception:  # pragma: no cover - a build without the query
            openmp = False
        _pool_bound = openmp and hoststats.share_openmp_pool(os.path.dirname(torch.__file__))
    if not _pool_bound:
        return hoststats.KERNEL_THREADS
    return max(1, min(16, torch.get_num_threads()))


_HOST_READY = (torch.float32, torch.float64)  # dtypes the kernel reads in place
_FLOAT32 = (torch.float32,)  # the fused kernels (sums, ReLU) read float32 only
_STRIDED = torch.strided


def _kernel_view(x: torch.Tensor, dtypes: tuple[torch.dtype, ...]) -> np.ndarray | None:
    """A zero-copy NumPy view of ``x`` (detached) when the kernel can read it as it is: a
    non-empty, C-contiguous, dense CPU tensor of one of ``dtypes``, not lazily negated."""
    if (x.dtype in dtypes and x.is_cpu and x.layout == _STRIDED and x.numel()
            and x.is_contiguous() and not x.is_neg()):
        return x.numpy()
    return None


def _summand_views(ts: list[torch.Tensor]) -> list[np.ndarray] | None:
    """Kernel views of 2 to 8 summands (contiguous CPU float32 tensors of one shape), else
    ``None``."""
    if not 2 <= len(ts) <= 8:
        return None
    shape = ts[0].shape
    arrays = []
    for t in ts:
        a = _kernel_view(t.detach(), _FLOAT32) if t.shape == shape else None
        if a is None:
            return None
        arrays.append(a)
    return arrays


def _fast_cpu_vec(t: torch.Tensor) -> torch.Tensor | list[float]:
    """CPU statistics in one pass (:func:`netparity.hoststats.finite_vec` on a zero-copy NumPy
    view); :func:`_exact_vec` when the tensor holds NaN/Inf or values beyond float16's range.

    float32/float64 are read in place; other dtypes are converted first: half/bf16/fp8 sums
    overflow or lose precision in their own dtype, ints/bool need a float type. float32 holds
    all of them exactly (ints up to 2**24); larger ints take float64.
    """
    x = t
    if x.dtype not in _HOST_READY:
        if x.is_floating_point() or x.dtype in (torch.bool, torch.uint8, torch.int8, torch.int16):
            x = x.to(torch.float32)
        else:
            x = x.to(torch.float64)
    if x.is_conj() or x.is_neg():
        x = x.resolve_conj().resolve_neg()
    if not x.is_contiguous():  # e.g. an expanded (stride-0) view
        x = x.contiguous()
    # (the kernel reads any C-contiguous array; the result is a plain list: a tensor per record
    # would cost more than the kernel on small tensors)
    vec = finite_vec(x.numpy(), kernel_threads())
    return _exact_vec(t) if vec is None else vec


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
        return isinstance(obj, torch.nn.Module)  # subclasses from any library included

    def is_optimizer(self, obj: Any) -> bool:
        return isinstance(obj, torch.optim.Optimizer)

    def dtype_name(self, t: Any) -> str:
        return DTYPE_NAMES[t.dtype]

    def shape(self, t: Any) -> tuple[int, ...]:
        return tuple(t.shape)

    # ---- statistics ------------------------------------------------------------------------
    def stats_handle(self, t: Any) -> Any:
        """Start the statistics of ``t``: a 12-element float64 tensor on ``t``'s device, or --
        for CPU tensors, computed at once -- a list of 12 numbers (``None`` for no elements).

        Never mutates ``t``, never changes its dtype, uses no RNG and builds no autograd graph.
        """
        x = t.detach()  # no graph is built from a detached tensor: no need for no_grad()
        kernel = hoststats._kernel
        if kernel is not None:
            # the common case in as few Python calls as possible (this runs once per record)
            a = _kernel_view(x, _HOST_READY)
            if a is not None:
                vec = kernel.vec(a, kernel_threads())
                return _exact_vec(x) if vec is None else vec
        # (cheap attribute tests first)
        if x.layout != _STRIDED or x.is_meta or not x.numel():
            return None
        if x.is_cpu and not x.is_complex():
            return _fast_cpu_vec(x)
        return _exact_vec(x)

    def stats_handles(self, ts: list[torch.Tensor]) -> list[Any]:
        """``[stats_handle(t) for t in ts]``, with the contiguous CPU float32/float64 tensors
        read by one kernel call (:func:`netparity.hoststats.finite_vecs`)."""
        out: list[Any] = [None] * len(ts)
        idx: list[int] = []
        arrays: list[np.ndarray] = []
        for i, t in enumerate(ts):
            a = _kernel_view(t.detach(), _HOST_READY)
            if a is None:
                out[i] = self.stats_handle(t)
            else:
                idx.append(i)
                arrays.append(a)
        if arrays:
            for i, vec in zip(idx, finite_vecs(arrays, kernel_threads())):
                out[i] = _exact_vec(ts[i].detach()) if vec is None else vec
        return out

    def stats_handle_relu(self, t: torch.Tensor) -> tuple[Any, list[float] | None]:
        """``(stats_handle(t), handle of max(t, 0))`` -- the second from the same pass over a
        contiguous CPU float32 tensor (:func:`netparity.hoststats.finite_vec_relu`), else
        ``None``: the statistics of an in-place ReLU's output, read before the ReLU runs."""
        x = t.detach()
        a = _kernel_view(x, _FLOAT32)
        if a is None:
            return self.stats_handle(t), None
        vec, relu = finite_vec_relu(a, kernel_threads())
        return (_exact_vec(x) if vec is None else vec), relu

    def stats_handle_sum(self, ts: list[torch.Tensor]) -> list[float] | None:
        """Statistics of ``ts[0] + ts[1] + ...`` (added left to right in float32, as torch
        adds them) from one read of each tensor, without materialising the sum: a handle like
        :meth:`stats_handle`'s, or ``None`` when that does not apply (not 2 to 8 contiguous
        CPU float32 tensors of one shape, no kernel, a non-finite or beyond-float16 sum) and
        the caller adds the tensors itself."""
        arrays = _summand_views(ts)
        return None if arrays is None else finite_vec_sum(arrays, kernel_threads())

    def stats_handle_sum_last(self, ts: list[torch.Tensor]
                              ) -> tuple[list[float] | None, list[float] | None]:
        """``(stats_handle_sum(ts), handle of ts[-1])`` from the one pass the sum needs (a
        handle equal to :meth:`stats_handle`'s). Either is ``None`` where it does not apply:
        both when the summands do not suit the kernel (see :meth:`stats_handle_sum`), one when
        that sum or that summand needs the exact path (non-finite, beyond float16)."""
        arrays = _summand_views(ts)
        if arrays is None:
            return None, None
        return finite_vec_sum_last(arrays, kernel_threads())

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
        return [vec_to_stats(r) for r in rows]

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

    def seed(self, seed: int, deterministic: bool = True) -> dict[str, Any]:
        """``manual_seed`` (CPU and CUDA); with ``deterministic``, deterministic algorithms
        (``warn_only``), cuDNN deterministic without benchmark, ``CUBLAS_WORKSPACE_CONFIG``."""
        torch.manual_seed(seed)
        info: dict[str, Any] = {"manual_seed": seed}
        if torch.cuda.is_available():
            torch.cuda.manual_seed_all(seed)
            info["cuda"] = True
        if deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True, warn_only=True)
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False
            info["deterministic_algorithms"] = True
        return info

    # ---- tensors from numbers --------------------------------------------------------------
    def from_numpy(self, arr: np.ndarray) -> Any:
        return torch.from_numpy(np.ascontiguousarray(arr).copy())

    def scalar(self, value: float) -> Any:
        return torch.tensor(float(value), dtype=torch.float32)

    # ---- models ----------------------------------------------------------------------------
    def named_parameters(self, model: Any) -> Iterator[tuple[str, Any]]:
        yield from model.state_dict(keep_vars=True).items()

    def named_modules(self, model: Any) -> Iterator[tuple[str, Any]]:
        yield from model.named_modules()

    def param_counts(self, model: Any) -> ParamCounts:
        from netparity.frameworks.torch import models

        return models.param_counts(model)

    def model_state(self, model: Any) -> list[tuple[str, np.ndarray, str]]:
        from netparity.frameworks.torch.ckpt_io import torch_to_numpy

        return [(k, *torch_to_numpy(t)) for k, t in model.state_dict().items()]

    def model_layout(self, model: Any) -> tuple[dict[str, str], dict[str, bool]]:
        from netparity.trace.vocab import canonical_op

        types: dict[str, str] = {}
        trainable: dict[str, bool] = {}
        persistent = set(model.state_dict().keys())
        for path, mod in model.named_modules():
            local = [(n, p.requires_grad) for n, p in mod.named_parameters(recurse=False)]
            local += [(n, False) for n, _ in mod.named_buffers(recurse=False)]
            for n, tr in local:
                full = f"{path}.{n}" if path else n
                if full in persistent:
                    trainable[full] = bool(tr)
                    types[path] = canonical_op("torch", type(mod).__name__)
        return types, trainable

    def set_weights(self, model: Any, arrays: Mapping[str, np.ndarray],
                    dtypes: Mapping[str, str]) -> list[str]:
        from netparity.frameworks.torch import models

        return models.set_weights(model, arrays, dtypes)

    def optimizer_settings(self, optimizer: Any, model: Any) -> dict[str, dict[str, Any]]:
        from netparity.frameworks.torch import models

        return models.optimizer_settings(optimizer, model)

    # ---- capture and checkpoints (their modules load on first use) --------------------------
    def capture(self, model: Any, path: str | os.PathLike[str], **kwargs: Any) -> Any:
        from netparity.frameworks.torch.capture import capture

        return capture(model, path, **kwargs)

    def read_checkpoint(self, path: Path, *, shapes_only: bool = False) -> CheckpointData:
        from netparity.frameworks.torch import ckpt_io

        return ckpt_io.read(path, shapes_only=shapes_only)

    def write_checkpoint(self, path: Path, items: list[tuple[str, str, np.ndarray]]) -> None:
        from netparity.frameworks.torch import ckpt_io

        ckpt_io.write(path, items)
