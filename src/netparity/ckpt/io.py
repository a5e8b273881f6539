"""Reading and writing checkpoints as numpy dicts (name -> array), whatever the file format.

Formats, chosen by suffix (and by sniffing the first bytes when the suffix says nothing or
lies, e.g. a PyTorch-Lightning ``.ckpt`` that is really a PyTorch zip):

========================  ======================================================================
``.pt .pth .bin .tar``    PyTorch, ``torch.load(weights_only=True, map_location="cpu")``: a file
                          that needs arbitrary unpickling is refused. Wrapped state dicts
                          (``{"state_dict": ...}``, ``{"model": ...}``) are unwrapped and the key
                          used is reported. Written with ``torch.save``.
``.safetensors``          parsed and written directly (:mod:`.safetensors_io`); bf16/fp8 work.
``.ckpt``                 MindSpore, parsed without MindSpore (:mod:`.msproto`); written with
                          ``mindspore.save_checkpoint`` when MindSpore is installed, else by
                          netparity's own encoder (same bytes layout).
``.npz``                  ``np.load(allow_pickle=False)`` / ``np.savez``.
========================  ======================================================================

bf16 and fp8 have no numpy dtype: arrays keep their raw bits (``uint16`` / ``uint8``, see
:mod:`netparity.dtypes`) and the real dtype name is in :attr:`CheckpointDict.dtypes`.
:func:`save_checkpoint` reads that attribute (or an explicit ``dtypes=``) to write them back as
bf16/fp8; a plain ``uint16`` array without it is written as ``uint16``. In ``.npz`` files the
names of such dtypes are kept in an extra entry ``__netparity_dtypes__`` (a JSON string).

Example:
    >>> import numpy as np, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "w.npz")
    >>> _ = save_checkpoint({"fc.weight": np.ones((2, 3), np.float32)}, p)
    >>> ck = load_checkpoint(p)
    >>> list(ck), ck["fc.weight"].shape, ck.dtypes["fc.weight"], ck.format
    (['fc.weight'], (2, 3), 'float32', 'npz')
"""

from __future__ import annotations

import importlib.util
import json
import mmap
import os
import struct
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from netparity import inputs
from netparity.ckpt import msproto
from netparity.ckpt.safetensors_io import read_safetensors, write_safetensors_file
from netparity.ckpt.torchzip import read_arrays, read_shapes
from netparity.dtypes import DTYPES, stand_in, storage_dtype
from netparity.errors import CheckpointError, FrameworkError, NetparityError
from netparity.untrusted import load_json

FORMATS = ("torch", "safetensors", "mindspore", "npz")
_SUFFIX = {
    ".pt": "torch", ".pth": "torch", ".bin": "torch", ".tar": "torch",
    ".safetensors": "safetensors", ".ckpt": "mindspore", ".npz": "npz",
}
_NPZ_DTYPES_KEY = "__netparity_dtypes__"
#: a checkpoint is read whole (a regular file: bounded by its size)
_NO_LIMIT = 1 << 62


class CheckpointDict(dict):
    """``dict[name, np.ndarray]`` plus what was learnt while reading the file.

    Attributes:
        dtypes: name -> canonical dtype name (``"bfloat16"`` for uint16-stored bf16 arrays).
        format: ``"torch"``, ``"safetensors"``, ``"mindspore"``, ``"npz"`` or ``"memory"``.
        source_key: the wrapper key the state dict came from (``"state_dict"``...), or None.
        extras: non-tensor values found next to the tensors (MindSpore strings, epoch...).
        notes: human-readable remarks (skipped entries, unwrapping...).
        path: the file read, if any.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dtypes: dict[str, str] = {}
        self.format = "memory"
        self.source_key: str | None = None
        self.extras: dict[str, Any] = {}
        self.notes: list[str] = []
        self.path: str | None = None

    def dtype(self, name: str) -> str:
        """Canonical dtype of tensor ``name``."""
        return self.dtypes.get(name) or dtype_name(self[name])


def is_stand_in(arr: Any) -> bool:
    """True for a shape-only :func:`~netparity.dtypes.stand_in` (several elements, all
    strides 0)."""
    a = np.asarray(arr)
    return a.size > 1 and all(st == 0 for st in a.strides)


def dtype_name(arr: np.ndarray) -> str:
    """Canonical dtype name of a numpy array (its own dtype; bf16 needs an explicit name)."""
    name = "bool" if arr.dtype == np.bool_ else arr.dtype.name
    if name not in DTYPES:
        raise CheckpointError(f"unsupported numpy dtype {arr.dtype}")
    return name


def as_checkpoint(tensors: Mapping[str, Any], dtypes: Mapping[str, str] | None = None) -> CheckpointDict:
    """Wrap any mapping of arrays as a :class:`CheckpointDict` (kept as is if already one)."""
    if isinstance(tensors, CheckpointDict) and not dtypes:
        return tensors
    out = CheckpointDict()
    known = dict(getattr(tensors, "dtypes", {}) or {})
    known.update(dtypes or {})
    for k, v in tensors.items():
        arr = np.asarray(v)
        out[str(k)] = arr
        out.dtypes[str(k)] = known.get(k) or dtype_name(arr)
        if storage_dtype(out.dtypes[str(k)]) != arr.dtype:
            raise CheckpointError(
                f"{k!r}: dtype {out.dtypes[str(k)]} is stored as {storage_dtype(out.dtypes[str(k)])},"
                f" got a {arr.dtype} array"
            )
    for attr in ("format", "source_key", "extras", "notes", "path"):
        if hasattr(tensors, attr):
            setattr(out, attr, getattr(tensors, attr))
    return out


# --- format detection ------------------------------------------------------------------------


def check_readable_file(p: Path) -> None:
    """Refuse what is not a regular file before reading it (:mod:`netparity.inputs`): a
    ``.ckpt`` symlinked to ``/dev/zero`` would be read until memory runs out, a FIFO would
    hang; and a zip whose members declare a decompression bomb's size."""
    os.close(inputs.open_fd(p, error=CheckpointError, what="checkpoint")[0])
    inputs.check_archive(p, error=CheckpointError)


def detect_format(path: str | os.PathLike) -> str:
    """The checkpoint format of ``path`` from its first bytes, falling back to its suffix."""
    p = Path(path)
    with inputs.open_binary(p, error=CheckpointError, what="checkpoint") as f:
        head = f.read(16)
    by_suffix = _SUFFIX.get(p.suffix.lower())
    if head[:4] == b"PK\x03\x04":  # zip: PyTorch >= 1.6 or npz
        try:
            with inputs.open_binary(p, error=CheckpointError, what="checkpoint") as f, \
                    zipfile.ZipFile(f) as z:
                names = z.namelist()
        except (zipfile.BadZipFile, OSError):
            return by_suffix or "torch"
        if names and all(n.endswith(".npy") for n in names):
            return "npz"
        return "torch"
    if head[:1] == b"\x80" and by_suffix in (None, "torch", "mindspore"):
        return "torch"  # legacy (pre-zip) PyTorch pickle
    if len(head) >= 9 and by_suffix in (None, "safetensors"):
        (n,) = struct.unpack("<Q", head[:8])
        if head[8:9] == b"{" and n < 100 * 1024 * 1024:
            return "safetensors"
    if by_suffix == "torch" and head[:1] != b"\x80":  # torch.save: a zip (above) or a pickle
        raise CheckpointError(f"{p} is not a PyTorch checkpoint (neither a zip archive nor a "
                              "pickle)" if not _looks_like_text(p, head) else
                              f"{p} is a {_looks_like_text(p, head)} file, not a checkpoint "
                              "(whatever its suffix says)")
    text = _looks_like_text(p, head)
    if text:
        raise CheckpointError(f"{p} is a {text} file, not a checkpoint (whatever its suffix "
                              "says)")
    if by_suffix:
        return by_suffix
    if head[:1] == b"\x0a":
        return "mindspore"
    raise CheckpointError(f"cannot tell the checkpoint format of {p} (suffix {p.suffix!r})")


def _looks_like_text(p: Path, head: bytes) -> str:
    """``"JSON"`` or ``"text"`` when a file's first bytes are printable text (no checkpoint
    format starts so: zip, pickle, safetensors and protobuf all start with a binary byte)."""
    if not head or not all(32 <= b < 127 or b in b"\t\r\n" for b in head):
        return ""
    return "JSON" if head.lstrip()[:1] in (b"{", b"[") else "text"


def format_for_path(path: str | os.PathLike, fmt: str | None = None) -> str:
    """The format to *write* ``path`` in (``fmt`` wins; else the suffix)."""
    if fmt:
        aliases = {"pt": "torch", "pytorch": "torch", "ms": "mindspore", "ckpt": "mindspore"}
        fmt = aliases.get(fmt, fmt)
        if fmt not in FORMATS:
            raise CheckpointError(f"unknown checkpoint format {fmt!r} (one of {', '.join(FORMATS)})")
        return fmt
    suffix = Path(path).suffix.lower()
    if suffix not in _SUFFIX:
        raise CheckpointError(
            f"cannot tell the format to write from suffix {suffix!r}; use one of "
            f"{', '.join(sorted(_SUFFIX))} or pass fmt="
        )
    return _SUFFIX[suffix]


# --- reading -----------------------------------------------------------------------------------


def load_checkpoint(path: str | os.PathLike, fmt: str | None = None, *,
                    shapes_only: bool = False) -> CheckpointDict:
    """Read a checkpoint file into ``{name: np.ndarray}`` (a :class:`CheckpointDict`).

    Args:
        path: a ``.pt/.pth/.bin``, ``.safetensors``, MindSpore ``.ckpt`` or ``.npz`` file.
        fmt: force a format instead of detecting it.
        shapes_only: names, shapes and dtypes only: every array is a :func:`~netparity.dtypes.stand_in` (no
            tensor data is copied; PyTorch files are unpickled onto the ``meta`` device,
            safetensors read up to the header). What matching names needs, at the cost of
            reading an index.

    Raises:
        CheckpointError: missing, unreadable, truncated, corrupt or unsafe (pickled code) file.

    Example:
        >>> import numpy as np, tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "w.safetensors")
        >>> _ = save_checkpoint({"b": np.arange(3, dtype=np.int64)}, p)
        >>> load_checkpoint(p)["b"].tolist()
        [0, 1, 2]
    """
    p = Path(path)
    check_readable_file(p)
    fmt = format_for_path(p, fmt) if fmt else detect_format(p)
    try:
        if fmt == "torch":
            out = _load_torch(p, shapes_only)
        elif fmt == "safetensors":
            out = _load_safetensors(p, shapes_only)
        elif fmt == "mindspore":
            out = _load_mindspore(p, shapes_only)
        else:
            out = _load_npz(p)
            if shapes_only:
                for k, v in out.items():
                    out[k] = stand_in(out.dtypes[k], v.shape) if v.size > 1 else v
    except CheckpointError as e:
        raise CheckpointError(f"{p}: {e}") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, struct.error) as e:
        raise CheckpointError(f"{p}: cannot read {fmt} checkpoint: {_one_line(e)}") from None
    except (NetparityError, MemoryError):
        raise
    except Exception as e:  # noqa: BLE001 - the bytes are input: any parser failure means
        # "not a readable checkpoint" (torch.load on random bytes raises KeyError, IndexError,
        # AttributeError...); the exception's type stays in the message for a bug report
        raise CheckpointError(f"{p}: cannot read {fmt} checkpoint ({type(e).__name__}: "
                              f"{_one_line(e)})") from None
    out.format = fmt
    out.path = str(p)
    return out


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]


def _load_safetensors(p: Path, shapes_only: bool = False) -> CheckpointDict:
    tensors, meta = read_safetensors(p, shapes_only=shapes_only)
    out = CheckpointDict()
    for name, (dtype, arr) in tensors.items():
        out[name] = arr
        out.dtypes[name] = dtype
    if meta:
        out.extras["metadata"] = meta
    return out


def _load_mindspore(p: Path, shapes_only: bool = False) -> CheckpointDict:
    try:
        if shapes_only:  # mapped: the walk reads the names, dims and types, not the data
            with inputs.open_binary(p, error=CheckpointError, what="checkpoint") as f:
                if os.fstat(f.fileno()).st_size == 0:
                    raise CheckpointError("empty file")
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                try:
                    entries = msproto.decode_checkpoint(mm, shapes_only=True)
                finally:
                    try:
                        mm.close()
                    except BufferError:  # a failed parse's traceback still holds a view of it
                        pass  # (unmapped when that goes)
        else:
            entries = msproto.decode_checkpoint(inputs.read_bytes(
                p, error=CheckpointError, what="checkpoint", limit=_NO_LIMIT))
    except CheckpointError as err:
        raise CheckpointError(f"not a valid MindSpore checkpoint ({err})") from None
    out = CheckpointDict()
    for e in entries:
        if e.dtype == "str":
            out.extras[e.name] = str(e.array)
            out.notes.append(f"{e.name!r} is a string ({str(e.array)!r}), kept in extras")
            continue
        out[e.name] = e.array
        out.dtypes[e.name] = e.dtype
    if not out and not out.extras:
        raise CheckpointError("no tensors in this MindSpore checkpoint")
    return out


def _load_npz(p: Path) -> CheckpointDict:
    out = CheckpointDict()
    with inputs.NpzReader(p, error=CheckpointError, what="checkpoint") as z:
        names = list(z.files)
        special: Any = {}
        if _NPZ_DTYPES_KEY in names:
            label = z[_NPZ_DTYPES_KEY]
            try:
                special = (load_json(str(label), what=f"{p}: dtype list")
                           if label.dtype.kind == "U" else None)
            except ValueError:
                special = None
            if not isinstance(special, dict) or not all(
                    isinstance(v, str) for v in special.values()):
                raise CheckpointError(f"{_NPZ_DTYPES_KEY!r} is not a JSON object of dtype "
                                      "names (corrupt file)")
            names.remove(_NPZ_DTYPES_KEY)
        for name in names:
            arr = z[name]
            out[name] = arr
            out.dtypes[name] = special.get(name) or dtype_name(arr)
            if name in special:
                _check_label(name, special[name], arr)
    return out


def _check_label(name: str, label: str, arr: np.ndarray) -> None:
    """A dtype label (``bfloat16`` on raw ``uint16`` bits) must fit the stored array: the same
    storage dtype, else the bits would be reinterpreted as something they are not."""
    if label not in DTYPES:
        raise CheckpointError(f"{name!r}: unknown dtype label {label!r} (corrupt file)")
    want = storage_dtype(label)
    if arr.dtype != want:
        raise CheckpointError(f"{name!r}: labelled {label} (stored as {want}), but the array is "
                              f"{arr.dtype}; refusing to reinterpret its bytes (corrupt file)")


def _framework(name: str) -> Any:
    """The adapter of ``name`` (imported on demand: reading its files needs it)."""
    from netparity.frameworks.registry import get_adapter

    try:
        return get_adapter(name)
    except FrameworkError:
        raise FrameworkError(
            f"reading/writing {_LONG_NAMES[name]} checkpoints needs {_LONG_NAMES[name]} "
            f"(pip install 'netparity[{name}]')"
        ) from None


_LONG_NAMES = {"torch": "PyTorch", "mindspore": "MindSpore"}


def _load_torch(p: Path, shapes_only: bool = False) -> CheckpointDict:
    # a plain zip-format state dict needs no PyTorch (names and shapes in milliseconds, where
    # importing it takes ~1.5 s; values in one copy); anything else is read by PyTorch itself
    data = read_shapes(p) if shapes_only else read_arrays(p)
    if data is None:
        data = _framework("torch").read_checkpoint(p, shapes_only=shapes_only)
    out = CheckpointDict(data.tensors)
    out.dtypes.update(data.dtypes)
    out.source_key = data.source_key
    out.extras.update(data.extras)
    out.notes.extend(data.notes)
    return out


def torch_to_numpy(t: Any) -> tuple[np.ndarray, str]:
    """A torch tensor as (numpy storage array, canonical dtype) without changing any bits."""
    _framework("torch")
    from netparity.frameworks.torch.ckpt_io import torch_to_numpy as convert

    return convert(t)


# --- writing -----------------------------------------------------------------------------------


def save_checkpoint(
    tensors: Mapping[str, Any],
    path: str | os.PathLike,
    fmt: str | None = None,
    *,
    dtypes: Mapping[str, str] | None = None,
    use_mindspore: bool | None = None,
    overwrite: bool = True,
) -> Path:
    """Write ``{name: array}`` to ``path`` in the format its suffix names (or ``fmt``).

    The file is written atomically (:func:`netparity.outputs.atomic_output`): into a temporary
    file in the same directory, fsynced, then renamed over ``path``. A failure (disk full, a
    tensor the format cannot hold) leaves an existing ``path`` as it was and no temporary file.

    Args:
        tensors: numpy arrays (a :class:`CheckpointDict` keeps bf16/fp8 dtypes).
        path: destination; parent directories are created.
        fmt: ``"torch"``, ``"safetensors"``, ``"mindspore"`` or ``"npz"``.
        dtypes: canonical dtype per name for arrays whose numpy dtype is only storage (bf16).
        use_mindspore: for ``.ckpt``: True = ``mindspore.save_checkpoint``, False = netparity's
            encoder, None = MindSpore when it is installed.
        overwrite: replace an existing ``path`` (False: refuse it, like ``ckpt convert``
            without ``--force``).

    Returns:
        The path written.

    Raises:
        CheckpointError: the tensors do not fit the format, ``path`` exists and ``overwrite``
            is False, or the file cannot be written.

    Example:
        >>> import numpy as np, tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "w.ckpt")
        >>> _ = save_checkpoint({"w": np.zeros(2, np.float32)}, p, use_mindspore=False)
        >>> load_checkpoint(p)["w"].tolist()
        [0.0, 0.0]
    """
    from netparity.outputs import atomic_output, write_npz_file

    ck = as_checkpoint(tensors, dtypes)
    p = Path(path)
    fmt = format_for_path(p, fmt)
    arrays: dict[str, Any] = {}
    if fmt == "mindspore":
        _check_mindspore(ck)
    elif fmt == "npz":  # checked before any file is touched
        arrays = dict(ck)
        special = {k: ck.dtype(k) for k in ck if ck.dtype(k) != dtype_name(ck[k])}
        if _NPZ_DTYPES_KEY in arrays:
            raise CheckpointError(f"{_NPZ_DTYPES_KEY!r} is a reserved name")
        if special:
            arrays[_NPZ_DTYPES_KEY] = np.array(json.dumps(special))
    items = [(k, ck.dtype(k), v) for k, v in ck.items()]
    with atomic_output(p, overwrite=overwrite, what="checkpoint", error=CheckpointError) as tmp:
        try:
            if fmt == "torch":
                _framework("torch").write_checkpoint(tmp, items)
            elif fmt == "safetensors":
                write_safetensors_file(tmp, {k: (d, v) for k, d, v in items})
            elif fmt == "mindspore":
                _save_mindspore(items, tmp, use_mindspore)
            else:
                write_npz_file(tmp, arrays)
        except (OSError, RuntimeError) as e:  # torch.save reports a full disk as RuntimeError
            raise CheckpointError(f"cannot write {p}: {_one_line(e)}") from None
    return p


def _check_mindspore(ck: CheckpointDict) -> None:
    empty = [k for k, v in ck.items() if v.size == 0]
    if empty:  # MindSpore silently drops them; refuse instead of losing data
        raise CheckpointError(f"MindSpore checkpoints cannot hold empty tensors: {empty[:5]}")
    bad = [k for k in ck if ck.dtype(k) not in msproto.DTYPE_TO_MS_TYPE]
    if bad:
        raise CheckpointError(f"MindSpore checkpoints cannot hold {ck.dtype(bad[0])} ({bad[0]!r})")


def _save_mindspore(items: list[tuple[str, str, np.ndarray]], p: Path,
                    use_mindspore: bool | None) -> None:
    if use_mindspore is None:
        use_mindspore = importlib.util.find_spec("mindspore") is not None
    if not use_mindspore:
        with open(p, "wb") as f:
            msproto.write_checkpoint(f, items)
        return
    try:
        ms = _framework("mindspore")
    except FrameworkError:
        raise FrameworkError("use_mindspore=True but MindSpore is not installed") from None
    ms.write_checkpoint(p, items)
