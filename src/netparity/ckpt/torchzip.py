"""PyTorch checkpoints read without PyTorch: names, shapes and dtypes, or the values too.

``torch.save`` writes a zip archive: ``<archive>/data.pkl`` is a pickle of the saved object in
which each tensor is a call of ``torch._utils._rebuild_tensor_v2`` on a storage named by a
persistent id (``("storage", torch.FloatStorage, key, location, numel)``, the bytes in
``<archive>/data/<key>``, stored uncompressed, little-endian). Weight mapping (``ckpt map``,
``map_names``) needs only the names, shapes and dtypes; reading them this way takes
milliseconds where importing PyTorch takes ~1.5 s -- most of what the ``ckpt map`` command cost
on ResNet-50 (issue 33 item 7). Values (``ckpt convert``) are read straight from each storage
member into the array that is returned (one copy, CRC-checked by :mod:`zipfile`), where
``torch.load`` and the copy out of its tensors made two.

Safety: the pickle is untrusted input. The unpickler resolves only the handful of globals a
plain state dict uses (``collections.OrderedDict``, the tensor/parameter rebuild functions and
the typed storage classes) to inert stand-ins; anything else, and anything unusual at all (an
old non-zip file, a storage smaller than its tensor, an unknown storage type), makes
:func:`read_shapes` return ``None`` and the caller goes the usual way (``torch.load`` with
``weights_only=True``), which gives the authoritative answer or error. It never executes code
from the file and never reads tensor bytes.

Example:
    >>> read_shapes("/nonexistent.pth") is None
    True
"""

from __future__ import annotations

import io
import pickle
import zipfile
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from netparity import inputs
from netparity.dtypes import DTYPES, stand_in, storage_dtype
from netparity.errors import CheckpointError, NetparityError
from netparity.frameworks.base import CheckpointData
from netparity.frameworks.statedict import locate_state

__all__ = ["read_arrays", "read_shapes"]

#: the typed storage classes ``torch.save`` names, by their canonical dtype
_STORAGES = {"DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
             "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
             "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
             "BoolStorage": "bool"}
#: a data.pkl larger than this is not a state dict's (names and shapes only)
_MAX_PICKLE = 256 << 20


class _Unusual(Exception):
    """Anything this reader does not know: the caller falls back to ``torch.load``."""


class _Corrupt(CheckpointError):
    """A storage's bytes fail their CRC-32: an error, not a fall-back (PyTorch does not check)."""


class _Storage:
    __slots__ = ("dtype", "key", "numel")

    def __init__(self, dtype: str, key: str, numel: int) -> None:
        self.dtype, self.key, self.numel = dtype, key, numel


class _Tensor:
    """A tensor's dtype and shape, and the storage span it needs."""

    __slots__ = ("dtype", "shape", "stride", "offset", "storage", "needs")

    def __init__(self, storage: _Storage, offset: int, size: tuple[int, ...],
                 stride: tuple[int, ...]) -> None:
        if not (isinstance(storage, _Storage) and isinstance(offset, int)
                and isinstance(size, tuple) and isinstance(stride, tuple)
                and len(size) == len(stride)
                and all(isinstance(d, int) and d >= 0 for d in (*size, *stride))):
            raise _Unusual("tensor arguments")
        self.dtype, self.shape, self.storage = storage.dtype, size, storage
        self.stride, self.offset = stride, offset
        self.needs = offset + (1 + sum((d - 1) * s for d, s in zip(size, stride))
                               if all(size) else 0)


def _rebuild_tensor_v2(storage: Any, offset: Any, size: Any, stride: Any, *_: Any) -> _Tensor:
    return _Tensor(storage, offset, size, stride)


def _rebuild_parameter(data: Any, *_: Any) -> Any:
    if not isinstance(data, _Tensor):
        raise _Unusual("parameter of a non-tensor")
    return data


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor_v2
        if module == "torch._utils" and name in ("_rebuild_parameter",
                                                 "_rebuild_parameter_with_state"):
            return _rebuild_parameter
        if module == "torch" and name in _STORAGES:
            return _STORAGES[name]
        raise _Unusual(f"global {module}.{name}")

    def persistent_load(self, pid: Any) -> _Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and pid[1] in _STORAGES.values() and isinstance(pid[2], str)
                and isinstance(pid[4], int) and pid[4] >= 0):
            raise _Unusual("persistent id")
        return _Storage(pid[1], pid[2], pid[4])


def read_shapes(path: str | Path) -> CheckpointData | None:
    """The tensors of the PyTorch checkpoint at ``path`` as shape-only stand-ins
    (:func:`netparity.dtypes.stand_in`), with the same names, dtypes, ``source_key``, extras and
    notes ``torch.load(weights_only=True, map_location="meta")`` gives; ``None`` when the file
    is anything but a plain zip-format state dict this reader fully understands (the caller
    then reads it with PyTorch)."""
    return _guarded(path, lambda z, root, t: stand_in(t.dtype, t.shape))


def read_arrays(path: str | Path) -> CheckpointData | None:
    """:func:`read_shapes` with the values: each tensor as a writable array in its storage
    dtype (bf16 as ``uint16`` bits, as :func:`netparity.frameworks.torch.ckpt_io.read` gives);
    ``None`` as there (the caller reads the file with PyTorch)."""
    cache: dict[str, np.ndarray] = {}

    def values(z: zipfile.ZipFile, root: str, t: _Tensor) -> np.ndarray:
        flat = cache.get(t.storage.key)
        if flat is None:
            flat = np.empty(t.storage.numel, storage_dtype(t.dtype))
            view = memoryview(flat.view(np.uint8))  # type: ignore[arg-type]
            member = f"{root}data/{t.storage.key}"
            try:
                with z.open(member) as f:
                    got = 0
                    while got < len(view):
                        n = f.readinto(view[got:])  # type: ignore[attr-defined]
                        if not n:
                            raise _Unusual("short storage")
                        got += n
            except zipfile.BadZipFile as e:  # a flipped bit: its CRC-32 does not match
                raise _Corrupt(f"{path}: corrupt PyTorch checkpoint: {e}") from None
            cache[t.storage.key] = flat
        item = flat.itemsize
        arr = np.lib.stride_tricks.as_strided(flat[t.offset:], t.shape,
                                              tuple(s * item for s in t.stride))
        if (t.offset == 0 and arr.size == flat.size and arr.flags.c_contiguous
                and t.storage.key not in shared):
            return flat.reshape(t.shape)  # the tensor is its whole storage: no second copy
        return np.array(arr, copy=True, order="C")

    shared: set[str] = set()
    return _guarded(path, values, shared)


def _guarded(path: str | Path, make: Callable[[zipfile.ZipFile, str, _Tensor], np.ndarray],
             shared: set[str] | None = None) -> CheckpointData | None:
    try:
        with (inputs.open_binary(path, error=CheckpointError, what="checkpoint") as f,
              zipfile.ZipFile(f) as z):
            return _read(z, make, shared)
    except _Corrupt:
        raise
    except (_Unusual, NetparityError, zipfile.BadZipFile, pickle.UnpicklingError, EOFError,
            OSError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            RecursionError, MemoryError, UnicodeDecodeError):
        return None


def _read(z: zipfile.ZipFile, make: Callable[[zipfile.ZipFile, str, _Tensor], np.ndarray],
          shared: set[str] | None) -> CheckpointData:
    infos = {i.filename: i for i in z.infolist()}
    pkls = [n for n in infos if n.endswith("/data.pkl") and n.count("/") == 1]
    if len(pkls) != 1 or infos[pkls[0]].file_size > _MAX_PICKLE:
        raise _Unusual("archive layout")
    root = pkls[0][: -len("data.pkl")]
    order = infos.get(f"{root}byteorder")
    if order is not None and z.read(order).strip() != b"little":
        raise _Unusual("byte order")
    obj = _Unpickler(io.BytesIO(z.read(pkls[0]))).load()
    out = CheckpointData()
    state = locate_state(obj, lambda v: isinstance(v, _Tensor), out)
    tensors = [(str(k), t) for k, t in state.items() if isinstance(t, _Tensor)]
    for _, t in tensors:
        info = infos.get(f"{root}data/{t.storage.key}")
        if (info is None or t.needs > t.storage.numel or t.dtype not in DTYPES
                or info.file_size != t.storage.numel * storage_dtype(t.dtype).itemsize):
            raise _Unusual("storage")
    if shared is not None:  # storages more than one tensor uses are copied out, never aliased
        seen: set[str] = set()
        for _, t in tensors:
            (shared if t.storage.key in seen else seen).add(t.storage.key)
    for name, t in tensors:
        out.tensors[name] = make(z, root, t)
        out.dtypes[name] = t.dtype
    return out
