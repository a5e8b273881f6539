"""Canonical dtype names and the numpy storage used for payloads.

Every framework adapter reports dtypes with these canonical names. NumPy has no bfloat16 or
float8, so those payloads are stored as their raw bits (``uint16`` / ``uint8``) and decoded to
float32 on read with :func:`decode`; nothing is lost because the bits are kept.

Example:
    >>> import numpy as np
    >>> raw = np.array([0x3F80, 0xC000], dtype=np.uint16)   # bf16 bits of 1.0 and -2.0
    >>> decode(raw, "bfloat16").tolist()
    [1.0, -2.0]
"""

from __future__ import annotations

import numpy as np

from netparity.errors import UsageError

#: canonical name -> (numpy storage dtype, safetensors dtype tag)
DTYPES: dict[str, tuple[str, str]] = {
    "float64": ("float64", "F64"),
    "float32": ("float32", "F32"),
    "float16": ("float16", "F16"),
    "bfloat16": ("uint16", "BF16"),
    "float8_e4m3fn": ("uint8", "F8_E4M3"),
    "float8_e5m2": ("uint8", "F8_E5M2"),
    "int64": ("int64", "I64"),
    "int32": ("int32", "I32"),
    "int16": ("int16", "I16"),
    "int8": ("int8", "I8"),
    "uint64": ("uint64", "U64"),
    "uint32": ("uint32", "U32"),
    "uint16": ("uint16", "U16"),
    "uint8": ("uint8", "U8"),
    "bool": ("bool", "BOOL"),
    "complex64": ("complex64", "C64"),
    "complex128": ("complex128", "C128"),
}
TAG_TO_DTYPE = {tag: name for name, (_, tag) in DTYPES.items()}

FLOAT_DTYPES = frozenset(
    {"float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"}
)
LOW_PRECISION = frozenset({"float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"})
FP16_MAX = 65504.0


def storage_dtype(name: str) -> np.dtype:
    """The numpy dtype a payload of canonical dtype ``name`` is stored as."""
    try:
        return np.dtype(DTYPES[name][0])
    except KeyError:
        raise UsageError(f"unsupported dtype {name!r}") from None


def stand_in(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """A shape-only tensor of canonical dtype ``name``: a zero-stride view of one zero of its
    storage type, as big as ``shape`` says and holding no memory (what shape-only checkpoint
    reads return, see ``netparity.ckpt.io.load_checkpoint``)."""
    return np.broadcast_to(np.zeros((), storage_dtype(name)), tuple(int(d) for d in shape))


def is_float(name: str) -> bool:
    return name in FLOAT_DTYPES


def _fp8_table(exp_bits: int, man_bits: int, bias: int, ieee_inf: bool) -> np.ndarray:
    """Float32 value of every 8-bit pattern of an fp8 format (computed, not hard-coded)."""
    out = np.empty(256, dtype=np.float32)
    for b in range(256):
        sign = -1.0 if b & 0x80 else 1.0
        e = (b >> man_bits) & ((1 << exp_bits) - 1)
        m = b & ((1 << man_bits) - 1)
        emax = (1 << exp_bits) - 1
        if ieee_inf and e == emax:
            out[b] = sign * np.inf if m == 0 else np.nan
        elif not ieee_inf and e == emax and m == (1 << man_bits) - 1:
            out[b] = np.nan  # e4m3fn: only S.1111.111 is NaN, no infinities
        elif e == 0:
            out[b] = sign * (m / (1 << man_bits)) * 2.0 ** (1 - bias)
        else:
            out[b] = sign * (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)
    return out


_FP8 = {
    "float8_e4m3fn": _fp8_table(4, 3, 7, ieee_inf=False),
    "float8_e5m2": _fp8_table(5, 2, 15, ieee_inf=True),
}


def decode(raw: np.ndarray, name: str) -> np.ndarray:
    """Turn a stored payload into a numpy array with real values (bf16/fp8 -> float32)."""
    if name == "bfloat16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    if name in _FP8:
        return _FP8[name][raw]
    return raw


def encode_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits with round-to-nearest-even (NaN kept NaN)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


def round_to(x: np.ndarray, name: str) -> np.ndarray:
    """``x`` rounded to the dtype ``name`` (round to nearest even), returned as float64: what
    converting a value into a tensor of that dtype stores. Non-floating names and float64
    return the values unchanged.

    Example:
        >>> float(round_to(np.array([1.0 + 2.0**-10]), "bfloat16")[0])
        1.0
    """
    a = np.asarray(x, dtype=np.float64)
    if name == "float32":
        return a.astype(np.float32).astype(np.float64)
    if name == "float16":
        return a.astype(np.float16).astype(np.float64)
    if name == "bfloat16":
        return decode(encode_bf16(a.astype(np.float32)), "bfloat16").astype(np.float64)
    return a
