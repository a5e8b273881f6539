"""safetensors files, parsed and written directly (the format is small and fixed).

Layout: 8-byte little-endian header length ``N``, ``N`` bytes of JSON
``{name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}}``,
then the data buffer (offsets are relative to its start). Parsing it ourselves lets bf16 and fp8
through as raw bits (the ``safetensors.numpy`` API refuses dtypes numpy lacks) and checks every
offset, so a truncated file is an error, not a short read.

Example:
    >>> import numpy as np, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "a.safetensors")
    >>> write_safetensors(p, {"w": ("bfloat16", np.array([0x3F80], np.uint16))})
    >>> t, meta = read_safetensors(p)
    >>> t["w"][0], t["w"][1].tolist()
    ('bfloat16', [16256])
"""

from __future__ import annotations

import json
import math
import os
import struct

import numpy as np

from netparity import inputs
from netparity.dtypes import DTYPES, TAG_TO_DTYPE, stand_in, storage_dtype
from netparity.errors import CheckpointError
from netparity.untrusted import ContentError, check_shape, load_json

_MAX_HEADER = 100 * 1024 * 1024  # the reference implementation's limit


def read_safetensors(path: str | os.PathLike, *, shapes_only: bool = False
                     ) -> tuple[dict[str, tuple[str, np.ndarray]], dict]:
    """Read a safetensors file -> ({name: (canonical dtype, storage array)}, metadata);
    ``shapes_only``: read the header, the arrays are zero-stride stand-ins (offsets are still
    checked against the file's size)."""
    with inputs.open_binary(path, error=CheckpointError, what="checkpoint") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError("truncated safetensors header")
        (n,) = struct.unpack("<Q", head)
        if n > _MAX_HEADER:
            raise CheckpointError(f"safetensors header of {n} bytes is implausible (corrupt file)")
        raw = f.read(n)
        if len(raw) < n:
            raise CheckpointError("truncated safetensors header")
        try:
            header = load_json(raw, what="safetensors header")
        except ValueError:
            raise CheckpointError("safetensors header is not valid JSON (corrupt file)") from None
        if not isinstance(header, dict):
            raise CheckpointError("safetensors header is not a JSON object")
        size = os.fstat(f.fileno()).st_size - 8 - n
        meta = header.pop("__metadata__", None) or {}
        out: dict[str, tuple[str, np.ndarray]] = {}
        # keep the writer's order by offset: it is the order tensors were saved in
        items = sorted(header.items(), key=lambda kv: _offsets(kv)[0])
        for name, info in items:
            tag = info.get("dtype")
            dtype = TAG_TO_DTYPE.get(tag)
            if dtype is None:
                raise CheckpointError(f"tensor {name!r} has unsupported safetensors dtype {tag!r}")
            try:
                shape = check_shape(info.get("shape", []), what=f"tensor {name!r:.60}: shape")
            except ContentError as e:
                raise CheckpointError(str(e)) from None
            begin, end = _offsets((name, info))
            np_dt = storage_dtype(dtype).newbyteorder("<")
            want = math.prod(shape) * np_dt.itemsize  # (exact: no int64 wrap-around)
            if end > size:
                raise CheckpointError(f"tensor {name!r} runs past the end of the file (truncated)")
            if end - begin != want:
                raise CheckpointError(
                    f"tensor {name!r}: {end - begin} bytes for shape {shape} {dtype} (want {want})"
                )
            if shapes_only:
                out[name] = (dtype, stand_in(dtype, shape))
                continue
            # straight from the file into the array: one copy of the data in memory, not two
            arr = np.empty(want // np_dt.itemsize, np_dt)
            f.seek(8 + n + begin)
            if f.readinto(arr.view(np.uint8).data) != want:  # type: ignore[attr-defined]
                raise CheckpointError(f"tensor {name!r} runs past the end of the file (truncated)")
            out[name] = (dtype, arr.astype(np_dt.newbyteorder("="), copy=False).reshape(shape))
    return out, meta


def _offsets(kv: tuple[str, object]) -> tuple[int, int]:
    name, info = kv
    try:
        b, e = info["data_offsets"]  # type: ignore[index]
        b, e = int(b), int(e)
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"tensor {name!r} has no valid data_offsets") from None
    if not 0 <= b <= e:
        raise CheckpointError(f"tensor {name!r} has invalid data_offsets [{b}, {e}]")
    return b, e


def write_safetensors(
    path: str | os.PathLike,
    tensors: dict[str, tuple[str, np.ndarray]],
    metadata: dict[str, str] | None = None,
    *,
    overwrite: bool = True,
) -> None:
    """Write {name: (canonical dtype, storage array)} as a safetensors file (8-byte aligned),
    atomically (:func:`netparity.outputs.atomic_output`)."""
    from netparity.outputs import atomic_output

    with atomic_output(path, overwrite=overwrite, what="checkpoint", error=CheckpointError) as tmp:
        write_safetensors_file(tmp, tensors, metadata)


def write_safetensors_file(
    path: str | os.PathLike,
    tensors: dict[str, tuple[str, np.ndarray]],
    metadata: dict[str, str] | None = None,
) -> None:
    """Write a safetensors file straight to ``path`` (no temporary: the caller's job)."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name, (dtype, arr) in tensors.items():  # the header first: sizes need no data
        if dtype not in DTYPES:
            raise CheckpointError(f"safetensors cannot hold dtype {dtype!r} ({name!r})")
        n = int(np.prod(np.shape(arr))) * storage_dtype(dtype).itemsize
        header[name] = {"dtype": DTYPES[dtype][1], "shape": list(np.shape(arr)),
                        "data_offsets": [offset, offset + n]}
        offset += n
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * (-len(hj) % 8)  # data must start 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for dtype, arr in tensors.values():  # then each tensor's bytes, one at a time
            a = np.asarray(arr, dtype=storage_dtype(dtype).newbyteorder("<"), order="C")
            f.write(a.reshape(-1).view(np.uint8).data)
