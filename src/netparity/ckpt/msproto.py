"""MindSpore ``.ckpt`` files, read and written without MindSpore.

A MindSpore checkpoint is a protobuf message (``mindspore/train/checkpoint_pb2.py``, MindSpore
2.10; verified against the descriptor shipped there and against files written by
``mindspore.save_checkpoint``)::

    message Checkpoint {
      message Value {
        required string tag = 1;                 // parameter name
        oneof value { TensorProto tensor = 2; MapTensorProto maptensor = 3; }
      }
      repeated Value value = 1;
    }
    message TensorProto {
      repeated int64 dims = 1;                   // written unpacked; packed accepted too
      required string tensor_type = 2;           // "Float32", "BFloat16", "Int64", "Bool", "str"...
      required bytes tensor_content = 3;         // raw little-endian data, C order
    }
    message MapTensorProto { repeated TensorProto tensor = 1; }

What ``save_checkpoint`` in 2.10 actually writes on top of that:

* one serialised ``Checkpoint`` *per slice*, concatenated (protobuf merges concatenated messages,
  so the file still parses as one message). A parameter larger than 512 MiB is split into
  several consecutive ``Value`` entries with the same tag; their contents are concatenated.
* scalars have no ``dims``; an empty tensor is not written at all.
* ``append_dict`` entries: numbers become 0-d tensors; strings use ``tensor_type = "str"``,
  ``dims = [0]`` and UTF-32-LE content.
* with ``crc_check=True`` a 17-byte trailer ``b"crc_num" + crc32.to_bytes(10, "big")`` follows
  the protobuf; it is checked here when present.
* encrypted checkpoints (``enc_key``) are not protobuf at all and are refused.

Example:
    >>> import numpy as np
    >>> blob = encode_checkpoint([("w", "float32", np.ones((2, 2), np.float32))])
    >>> [(e.name, e.dtype, e.array.shape) for e in decode_checkpoint(blob)]
    [('w', 'float32', (2, 2))]
"""

from __future__ import annotations

import binascii
import io
import mmap
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np

from netparity.dtypes import stand_in, storage_dtype
from netparity.errors import CheckpointError

#: MindSpore ``tensor_type`` string -> canonical dtype name (mindspore/train/serialization.py)
MS_TYPE_TO_DTYPE: dict[str, str] = {
    "Int8": "int8", "UInt8": "uint8", "Int16": "int16", "UInt16": "uint16",
    "Int32": "int32", "UInt32": "uint32", "Int64": "int64", "UInt64": "uint64",
    "Float16": "float16", "Float32": "float32", "Float64": "float64",
    "Bool": "bool", "BFloat16": "bfloat16",
}
DTYPE_TO_MS_TYPE = {v: k for k, v in MS_TYPE_TO_DTYPE.items()}

_CRC_TRAILER = b"crc_num"
_CRC_LEN = len(_CRC_TRAILER) + 10


@dataclass
class MsEntry:
    """One parameter (or appended value) read from a MindSpore checkpoint."""

    name: str
    dtype: str  # canonical name, or "str" for appended strings
    array: np.ndarray  # storage dtype (bf16 as uint16 bits); 0-d unicode array for "str"


@dataclass
class _Tensor:
    dims: list[int] = field(default_factory=list)
    ttype: str = ""
    content: list[bytes | memoryview] = field(default_factory=list)
    has_dims: bool = False


# --- wire format -----------------------------------------------------------------------------


def _varint(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise CheckpointError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise CheckpointError("varint longer than 10 bytes")


def _fields(buf: bytes | memoryview, pos: int, end: int):
    """Yield (field number, wire type, value) over buf[pos:end].

    Value is an int for varints, a (start, stop) slice for length-delimited fields; fixed
    32/64-bit fields are skipped over (none appear in the checkpoint schema).
    """
    while pos < end:
        key, pos = _varint(buf, pos, end)
        fnum, wtype = key >> 3, key & 7
        if fnum == 0:
            raise CheckpointError("field number 0")
        if wtype == 0:
            val, pos = _varint(buf, pos, end)
            yield fnum, wtype, val
        elif wtype == 2:
            n, pos = _varint(buf, pos, end)
            if pos + n > end:
                raise CheckpointError("length-delimited field runs past the end")
            yield fnum, wtype, (pos, pos + n)
            pos += n
        elif wtype == 1:
            pos += 8
        elif wtype == 5:
            pos += 4
        else:  # groups (3, 4) and reserved types never appear here
            raise CheckpointError(f"unsupported wire type {wtype}")
        if pos > end:
            raise CheckpointError("fixed-width field runs past the end")


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _parse_tensor(buf: bytes | memoryview, start: int, stop: int) -> _Tensor:
    t = _Tensor()
    for fnum, wtype, val in _fields(buf, start, stop):
        if fnum == 1:
            t.has_dims = True
            if wtype == 0:
                t.dims.append(_signed64(val))  # type: ignore[arg-type]
            elif wtype == 2:  # packed repeated int64
                a, b = val  # type: ignore[misc]
                p = a
                while p < b:
                    d, p = _varint(buf, p, b)
                    t.dims.append(_signed64(d))
        elif fnum == 2 and wtype == 2:
            a, b = val  # type: ignore[misc]
            t.ttype = bytes(buf[a:b]).decode("utf-8", errors="strict")
        elif fnum == 3 and wtype == 2:
            a, b = val  # type: ignore[misc]
            t.content.append(buf[a:b])
    return t


def _strip_crc(blob: bytes | mmap.mmap) -> bytes | mmap.mmap | memoryview:
    if len(blob) >= _CRC_LEN and blob[-_CRC_LEN:-10] == _CRC_TRAILER:
        body = memoryview(blob)[:-_CRC_LEN]
        want = int.from_bytes(blob[-10:], "big")
        if binascii.crc32(body, 0) != want:
            raise CheckpointError("CRC check failed (the file is damaged)")
        return body
    return blob


def decode_checkpoint(blob: bytes | mmap.mmap, *, shapes_only: bool = False) -> list[MsEntry]:
    """Parse the bytes of a MindSpore ``.ckpt`` file into entries, in file order
    (``shapes_only``: arrays are zero-stride stand-ins, their bytes checked for size, not
    copied).

    Raises:
        CheckpointError: not a MindSpore checkpoint, truncated, corrupt or encrypted.
    """
    body = memoryview(_strip_crc(blob))  # slices of it copy nothing (a mapped file stays unread)
    if not body:
        raise CheckpointError("empty file")
    # (name, tensor) pairs; consecutive slices of one parameter are merged below
    raw: list[tuple[str, _Tensor | None]] = []
    try:
        for fnum, wtype, val in _fields(body, 0, len(body)):
            if fnum != 1 or wtype != 2:
                raise CheckpointError(f"unexpected top-level field {fnum} (wire type {wtype})")
            a, b = val  # type: ignore[misc]
            tag = None
            tensor: _Tensor | None = None
            for vf, vw, vv in _fields(body, a, b):
                if vf == 1 and vw == 2:
                    s, e = vv  # type: ignore[misc]
                    tag = bytes(body[s:e]).decode("utf-8")
                elif vf == 2 and vw == 2:
                    s, e = vv  # type: ignore[misc]
                    tensor = _parse_tensor(body, s, e)
                elif vf == 3 and vw == 2:
                    tensor = None  # MapTensor (embedding hash maps): not supported, reported
            if tag is None:
                raise CheckpointError("a value without a name (tag)")
            raw.append((tag, tensor))
    except UnicodeDecodeError:
        raise CheckpointError("not a MindSpore checkpoint (bad UTF-8 in a name)") from None
    out: list[MsEntry] = []
    i = 0
    while i < len(raw):
        name, t = raw[i]
        j = i + 1
        if t is None:
            raise CheckpointError(f"parameter {name!r} is a MapTensor, which is not supported")
        chunks = list(t.content)
        while j < len(raw) and raw[j][0] == name and raw[j][1] is not None:
            chunks.extend(raw[j][1].content)  # type: ignore[union-attr]
            j += 1
        if shapes_only and t.ttype != "str":
            out.append(_entry(name, t, sum(map(len, chunks))))
        else:
            out.append(_entry(name, t, b"".join(chunks)))
        i = j
    return out


def _entry(name: str, t: _Tensor, content: bytes | int) -> MsEntry:
    """One entry; ``content`` an int (its size) for a shape-only stand-in."""
    if t.ttype == "str":
        assert isinstance(content, bytes)
        n = len(content) // 4
        text = np.frombuffer(content, dtype=f"<U{n}")[0] if n else ""
        return MsEntry(name, "str", np.array(str(text)))
    dtype = MS_TYPE_TO_DTYPE.get(t.ttype)
    if dtype is None:
        raise CheckpointError(f"parameter {name!r} has unsupported tensor_type {t.ttype!r}")
    np_dt = storage_dtype(dtype).newbyteorder("<")
    dims = [] if t.dims == [0] else t.dims  # MindSpore writes scalars' dims as [] or [0]
    if any(d < 0 for d in dims):
        raise CheckpointError(f"parameter {name!r} has negative dims {dims}")
    count = int(np.prod(dims)) if dims else 1
    size = content if isinstance(content, int) else len(content)
    if size != count * np_dt.itemsize:
        raise CheckpointError(
            f"parameter {name!r}: {size} bytes of data for shape {tuple(dims)} "
            f"{dtype} (want {count * np_dt.itemsize}); the file is truncated or corrupt"
        )
    if isinstance(content, int):
        return MsEntry(name, dtype, stand_in(dtype, tuple(dims)))
    arr = np.frombuffer(content, dtype=np_dt).astype(np_dt.newbyteorder("="), copy=True)
    return MsEntry(name, dtype, arr.reshape(dims))


# --- encoder (used when MindSpore is not installed) ------------------------------------------


def _enc_varint(v: int) -> bytes:
    if v < 0:
        v += 1 << 64
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _enc_len(fnum: int, payload: bytes) -> bytes:
    return _enc_varint(fnum << 3 | 2) + _enc_varint(len(payload)) + payload


def encode_checkpoint(entries: Iterable[tuple[str, str, np.ndarray]]) -> bytes:
    """Serialise ``(name, canonical dtype, storage array)`` triples the way MindSpore does.

    The layout matches ``mindspore.save_checkpoint`` (one ``Checkpoint`` message per parameter,
    unpacked dims, no dims for scalars), so ``mindspore.load_checkpoint`` reads the result.
    """
    buf = io.BytesIO()
    write_checkpoint(buf, entries)
    return buf.getvalue()


def write_checkpoint(f: BinaryIO, entries: Iterable[tuple[str, str, np.ndarray]]) -> None:
    """:func:`encode_checkpoint` into an open file, one parameter at a time: each tensor's data
    goes from its array to the file (no copy of the whole checkpoint in memory)."""
    for name, dtype, arr in entries:
        ms_type = DTYPE_TO_MS_TYPE.get(dtype)
        if ms_type is None:
            raise CheckpointError(f"MindSpore checkpoints cannot hold {dtype} ({name!r})")
        if arr.size == 0:
            raise CheckpointError(f"MindSpore checkpoints cannot hold empty tensors ({name!r})")
        a = np.asarray(arr, dtype=storage_dtype(dtype).newbyteorder("<"), order="C")
        data = a.reshape(-1).view(np.uint8).data
        head = b"".join(_enc_varint(1 << 3 | 0) + _enc_varint(int(d)) for d in a.shape)
        head += _enc_len(2, ms_type.encode()) + _enc_varint(3 << 3 | 2) + _enc_varint(len(data))
        tensor_len = len(head) + len(data)
        name_field = _enc_len(1, name.encode("utf-8"))
        value_len = len(name_field) + len(_enc_varint(2 << 3 | 2)) + len(
            _enc_varint(tensor_len)) + tensor_len
        f.write(_enc_varint(1 << 3 | 2) + _enc_varint(value_len) + name_field
                + _enc_varint(2 << 3 | 2) + _enc_varint(tensor_len) + head)
        f.write(data)
