"""MindSpore adapter: tensors, dtypes, statistics, payloads, run facts and seeding.

MindSpore is imported lazily (inside methods), so importing this module is cheap and never drags
MindSpore into a process that does not use it.

Statistics follow :func:`netparity.stats.compute_stats` (to ~1e-7 on the host path). Two paths:

* ``host`` (default on CPU): ``Tensor.asnumpy()`` then :func:`netparity.hoststats.host_stats`
  (one pass of the C kernel for finite data, equal to the reference to ~1e-7; the reference
  itself for NaN/Inf or values beyond float16's range). On CPU the tensor already lives in host
  memory, so this costs one copy.
* ``device`` (default on GPU/Ascend): the same definitions written with MindSpore ops, run on the
  tensor's device under ``_no_grad``; each tensor yields a 12-element vector and
  :meth:`MindSporeAdapter.resolve_stats` concatenates all pending vectors and fetches them with a
  single ``asnumpy()``. Reductions run in float64 where the device has it (CPU, GPU) and in float32
  on Ascend, whose kernels mostly lack float64 (documented in docs/capture-mindspore.md).

bfloat16 and float8 tensors are stored as their raw bits (uint16 / uint8), as
:mod:`netparity.dtypes` prescribes; MindSpore 2.10's ``asnumpy()`` returns ml_dtypes arrays for
them, which are viewed as bits without any rounding.

Example:
    >>> import numpy as np, mindspore as ms
    >>> a = MindSporeAdapter()
    >>> t = ms.Tensor(np.array([1.0, -3.0], dtype=np.float32))
    >>> a.dtype_name(t), a.resolve_stats([a.stats_handle(t)])[0]["abs_sum"]
    ('float32', 4.0)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from netparity.dtypes import FP16_MAX, storage_dtype
from netparity.errors import FrameworkError
from netparity.frameworks.base import FrameworkAdapter, ParamCounts
from netparity.hoststats import host_stats
from netparity.stats import empty_stats

#: canonical netparity dtype name -> attribute of the ``mindspore`` module holding that dtype
_MS_DTYPE_ATTRS: dict[str, str] = {
    "float64": "float64", "float32": "float32", "float16": "float16", "bfloat16": "bfloat16",
    "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
    "int64": "int64", "int32": "int32", "int16": "int16", "int8": "int8",
    "uint64": "uint64", "uint32": "uint32", "uint16": "uint16", "uint8": "uint8",
    "bool": "bool_", "complex64": "complex64", "complex128": "complex128",
}
#: ``id(dtype object)`` -> (the object, canonical name); filled on first use. MindSpore's dtype
#: objects are singletons; matching them by identity (the object is kept alive here, so its id
#: stays unique) never calls ``str()``/``__eq__``, which a third-party library may patch.
_MS_DTYPES: dict[int, tuple[Any, str]] = {}


def _dtype_table() -> dict[int, tuple[Any, str]]:
    if not _MS_DTYPES:
        import mindspore as ms

        for name, attr in _MS_DTYPE_ATTRS.items():
            obj = getattr(ms, attr, None)
            if obj is not None:
                _MS_DTYPES[id(obj)] = (obj, name)
    return _MS_DTYPES


#: layout of a device statistics vector (``nfinite`` decides which value stats are None)
_VEC = ("min", "max", "mean", "std", "norm", "abs_sum", "nan", "posinf", "neginf", "zeros",
        "fp16_overflow", "nfinite")


class _DeviceStats:
    """Handle of statistics being computed on the device: a 12-element MindSpore vector."""

    __slots__ = ("vec",)

    def __init__(self, vec: Any):
        self.vec = vec


class MindSporeAdapter(FrameworkAdapter):
    """The :class:`FrameworkAdapter` protocol for MindSpore tensors and Cells.

    Attributes:
        stats_mode: ``"auto"`` (host on CPU, device elsewhere), ``"host"`` or ``"device"``.
    """

    name = "mindspore"
    module = "mindspore"

    def __init__(self, stats_mode: str = "auto"):
        import mindspore  # noqa: F401  (fail here, as FrameworkError via get_adapter, if missing)

        self.stats_mode = stats_mode

    # ---- type checks -------------------------------------------------------------------------
    def is_tensor(self, obj: Any) -> bool:
        # Parameter derives from the C++ TensorPy, not from mindspore.Tensor: check the base.
        from mindspore._c_expression import TensorPy

        return isinstance(obj, TensorPy)

    def is_model(self, obj: Any) -> bool:
        from mindspore import nn

        from netparity.frameworks.mindspore.compat import is_compat_model

        # subclasses from any library included, and torch-like Modules over MindSpore
        # parameters (compatibility layers: netparity.frameworks.mindspore.compat)
        return isinstance(obj, nn.Cell) or is_compat_model(obj)

    def is_optimizer(self, obj: Any) -> bool:
        from mindspore import nn

        return isinstance(obj, nn.Optimizer)

    def dtype_name(self, t: Any) -> str:
        d = t.dtype
        hit = _dtype_table().get(id(d))
        if hit is not None and hit[0] is d:
            return hit[1]
        raise FrameworkError(f"unsupported MindSpore dtype {type(d).__name__} of {type(t).__name__}")

    # ---- statistics --------------------------------------------------------------------------
    def _device_target(self) -> str:
        import mindspore as ms

        return str(ms.get_context("device_target"))

    def _use_device(self) -> bool:
        if self.stats_mode == "auto":
            return self._device_target() != "CPU"
        return self.stats_mode == "device"

    def stats_handle(self, t: Any) -> Any:
        name = self.dtype_name(t)
        if int(np.prod(t.shape, dtype=np.int64)) == 0:
            return empty_stats()
        if not self._use_device() or name.startswith("complex"):
            return host_stats(self.to_numpy(t), name)
        return _DeviceStats(self._device_vector(t))

    def _device_vector(self, t: Any) -> Any:
        """The statistics of ``t`` as a vector computed with MindSpore ops on t's device."""
        import mindspore as ms
        from mindspore import ops
        from mindspore.graph.api import _no_grad

        # float64 reductions match the NumPy reference; Ascend kernels mostly lack float64.
        acc = ms.float32 if self._device_target() == "Ascend" else ms.float64
        with _no_grad():
            x = ops.stop_gradient(t).astype(acc).reshape(-1)
            nan = ops.isnan(x)
            pinf = x == float("inf")
            ninf = x == float("-inf")
            fin = ops.isfinite(x)
            finf = fin.astype(acc)
            nfin = finf.sum()
            fz = ops.where(fin, x, ops.zeros_like(x))
            total = fz.sum()
            # max(n, 1) keeps the division finite; the stats are discarded when n == 0
            mean = total / ops.maximum(nfin, ops.ones_like(nfin))
            dev = ops.where(fin, x - mean, ops.zeros_like(x))
            absz = ops.abs(fz)
            vals = [
                ops.where(fin, x, ops.full_like(x, float("inf"))).min(),
                ops.where(fin, x, ops.full_like(x, float("-inf"))).max(),
                mean,
                ops.sqrt((dev * dev).sum() / ops.maximum(nfin, ops.ones_like(nfin))),
                ops.sqrt((fz * fz).sum()),
                absz.sum(),
                nan.astype(acc).sum(),
                pinf.astype(acc).sum(),
                ninf.astype(acc).sum(),
                (x == 0).astype(acc).sum(),
                (absz > FP16_MAX).astype(acc).sum(),
                nfin,
            ]
            return ops.stack([v.reshape(()) for v in vals])

    def resolve_stats(self, handles: list[Any]) -> list[dict[str, Any]]:
        dev = [i for i, h in enumerate(handles) if isinstance(h, _DeviceStats)]
        out: list[dict[str, Any]] = [h for h in handles]
        if dev:
            from mindspore import ops

            # one device->host transfer for the whole batch
            flat = ops.concat([handles[i].vec for i in dev]).asnumpy().astype(np.float64)
            flat = flat.reshape(len(dev), len(_VEC))
            for i, row in zip(dev, flat):
                st = empty_stats()
                for k, v in zip(_VEC[6:11], row[6:11]):
                    st[k] = int(round(float(v)))
                if row[11] > 0:
                    for k, v in zip(_VEC[:6], row[:6]):
                        st[k] = float(v)
                out[i] = st
        return out

    # ---- payloads ----------------------------------------------------------------------------
    def to_numpy(self, t: Any) -> np.ndarray:
        name = self.dtype_name(t)
        arr = t.asnumpy()
        sd = storage_dtype(name)
        if arr.dtype != sd:
            if arr.dtype.itemsize != sd.itemsize:
                raise FrameworkError(f"cannot read MindSpore {name} tensor as {sd} bits")
            # ml_dtypes bfloat16 / float8 -> raw bits, no rounding
            arr = arr.view(sd)
        return arr

    def snapshot(self, t: Any) -> tuple[Callable[[], np.ndarray], int]:
        nbytes = int(np.prod(t.shape, dtype=np.int64)) * storage_dtype(self.dtype_name(t)).itemsize
        if self._device_target() == "CPU":
            # asnumpy() on CPU aliases the tensor's memory: copy now, before it can change.
            arr = np.array(self.to_numpy(t), copy=True)
            return (lambda: arr), nbytes
        from mindspore import ops
        from mindspore.graph.api import _no_grad

        with _no_grad():
            clone = ops.deepcopy(t)  # device copy now; host copy on the writer thread

        def thunk() -> np.ndarray:
            return np.array(self.to_numpy(clone), copy=True)

        return thunk, nbytes

    # ---- run facts ---------------------------------------------------------------------------
    def facts(self) -> dict[str, Any]:
        import mindspore as ms

        mode = ms.get_context("mode")
        out: dict[str, Any] = {
            "framework": "mindspore",
            "framework_version": ms.__version__,
            "device": self._device_target(),
            "execution_mode": "GRAPH" if mode == ms.GRAPH_MODE else "PYNATIVE",
        }
        precision: dict[str, Any] = {}
        # Ascend-only options are read only on Ascend: reading ``ascend_config`` on CPU makes
        # MindSpore print "... only supports devices in ['Ascend'] ... ignore it" every time
        keys = ["device_id", "jit_level", "precision_mode", "deterministic",
                "enable_graph_kernel", "jit_config"]
        if out["device"] == "Ascend":
            keys.append("ascend_config")
        for key in keys:
            try:
                v = ms.get_context(key)
            except Exception:  # key removed or renamed in this MindSpore version
                continue
            if v not in (None, "", {}):
                precision[key] = v if isinstance(v, (bool, int, float, str)) else str(v)
        out["precision"] = precision
        try:
            out["seed"] = ms.get_seed()
        except Exception:
            pass
        return out

    def model_facts(self, model: Any) -> dict[str, Any]:
        """Facts of one network: mixed-precision settings of its Cells (``amp`` level effects)."""
        seen: dict[str, str] = {}
        for name, cell in model.cells_and_names():
            mp = getattr(cell, "mixed_precision_type", None)
            if mp is not None and str(mp) not in ("MixedPrecisionType.NOTSET", "0"):
                seen[name or "<root>"] = str(mp)
        return {"mixed_precision": seen} if seen else {}

    def seed(self, seed: int, deterministic: bool = True) -> dict[str, Any]:
        """``set_seed`` (and the dataset engine's seed); with ``deterministic``, deterministic
        kernels (``set_deterministic`` on 2.5+, else ``set_context(deterministic="ON")``)."""
        import mindspore as ms

        ms.set_seed(seed)
        info: dict[str, Any] = {"set_seed": seed}
        try:
            import mindspore.dataset as ds

            ds.config.set_seed(seed)
            info["dataset"] = True
        except Exception:  # dataset engine missing from a minimal install
            pass
        if deterministic:
            try:
                if hasattr(ms, "set_deterministic"):  # 2.5+; set_context(deterministic) is deprecated
                    ms.set_deterministic(True)
                else:
                    ms.set_context(deterministic="ON")
                info["deterministic"] = "ON"
            except Exception:  # older versions / unsupported on this target
                pass
        return info

    # ---- tensors from numbers ----------------------------------------------------------------
    def from_numpy(self, arr: np.ndarray) -> Any:
        import mindspore as ms

        return ms.Tensor(np.ascontiguousarray(arr))

    def scalar(self, value: float) -> Any:
        import mindspore as ms

        return ms.Tensor(np.float32(value))

    # ---- models ------------------------------------------------------------------------------
    def named_parameters(self, model: Any) -> Iterator[tuple[str, Any]]:
        yield from model.parameters_and_names()

    def named_modules(self, model: Any) -> Iterator[tuple[str, Any]]:
        yield from model.cells_and_names()

    def param_counts(self, model: Any) -> ParamCounts:
        from netparity.frameworks.mindspore import models

        return models.param_counts(model)

    def model_state(self, model: Any) -> list[tuple[str, np.ndarray, str]]:
        import mindspore as ms

        from netparity.dtypes import encode_bf16

        out: list[tuple[str, np.ndarray, str]] = []
        for k, p in model.parameters_and_names():
            name = self.dtype_name(p)  # by dtype identity, never str(): libraries patch it
            if name == "bfloat16":
                out.append((k, encode_bf16(p.astype(ms.float32).asnumpy()), name))  # exact
            else:
                a = np.array(p.asnumpy())
                out.append((k, a, a.dtype.name if a.dtype != np.bool_ else "bool"))
        return out

    def model_layout(self, model: Any) -> tuple[dict[str, str], dict[str, bool]]:
        from netparity.trace.vocab import canonical_op

        types: dict[str, str] = {}
        trainable: dict[str, bool] = {}
        for path, cell in model.cells_and_names():
            for n, p in cell.parameters_and_names(expand=False):
                full = f"{path}.{n}" if path else n
                trainable[full] = bool(p.requires_grad)
                types[path] = canonical_op("mindspore", type(cell).__name__)
        return types, trainable

    def set_weights(self, model: Any, arrays: Mapping[str, np.ndarray],
                    dtypes: Mapping[str, str]) -> list[str]:
        from netparity.frameworks.mindspore import models

        return models.set_weights(model, arrays, dtypes)

    def optimizer_settings(self, optimizer: Any, model: Any) -> dict[str, dict[str, Any]]:
        from netparity.frameworks.mindspore import models

        return models.optimizer_settings(optimizer, model)

    # ---- capture and checkpoints (their modules load on first use) ----------------------------
    def capture(self, model: Any, path: str | os.PathLike[str], **kwargs: Any) -> Any:
        from netparity.frameworks.mindspore.capture import capture

        return capture(model, path, **kwargs)

    def capture_defaults(self) -> dict[str, Any]:
        """On CPU, ``launch_blocking=True``: every statistics read would otherwise wait for the
        asynchronous executor (see :func:`netparity.frameworks.mindspore.capture.capture`)."""
        return {"launch_blocking": self._device_target() == "CPU"}

    def write_checkpoint(self, path: Path, items: list[tuple[str, str, np.ndarray]]) -> None:
        from netparity.frameworks.mindspore import ckpt_io

        ckpt_io.write(path, items)
