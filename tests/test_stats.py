"""NumPy reference statistics against plain-Python arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from netparity.dtypes import decode, encode_bf16
from netparity.stats import compute_stats, content_hash


def _py_stats(values: list[float]) -> dict:
    fin = [v for v in values if math.isfinite(v)]
    n = len(fin)
    mean = sum(fin) / n
    return {
        "min": min(fin), "max": max(fin), "mean": mean,
        "std": math.sqrt(sum((v - mean) ** 2 for v in fin) / n),
        "norm": math.sqrt(sum(v * v for v in fin)), "abs_sum": sum(abs(v) for v in fin),
        "nan": sum(1 for v in values if v != v),
        "posinf": sum(1 for v in values if v == math.inf),
        "neginf": sum(1 for v in values if v == -math.inf),
        "zeros": sum(1 for v in values if v == 0),
        "fp16_overflow": sum(1 for v in fin if abs(v) > 65504),
    }


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "int64", "uint8"])
def test_matches_python_reference(dtype):
    rng = np.random.default_rng(1)
    raw = rng.integers(-5, 200, size=37) if "int" in dtype else rng.standard_normal(37) * 3
    a = np.asarray(raw).astype(dtype)
    a.flat[3] = 0
    got = compute_stats(a)
    want = _py_stats([float(v) for v in a.ravel()])
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-12, abs=1e-12), k


def test_nonfinite_and_overflow_counts():
    a = np.array([1.0, np.nan, np.inf, -np.inf, -np.inf, 0.0, 7e4, -1e5], dtype=np.float32)
    s = compute_stats(a)
    assert (s["nan"], s["posinf"], s["neginf"], s["zeros"], s["fp16_overflow"]) == (1, 1, 2, 1, 2)
    assert s["min"] == -1e5 and s["max"] == 7e4  # finite values only


def test_empty_all_nan_bool():
    e = compute_stats(np.zeros((0, 3), np.float32))
    assert e["min"] is None and e["mean"] is None and e["norm"] == 0.0 and e["nan"] == 0
    n = compute_stats(np.full(4, np.nan, np.float16))
    assert n["nan"] == 4 and n["min"] is None and n["abs_sum"] == 0.0
    b = compute_stats(np.array([True, False, True]))
    assert b["mean"] == pytest.approx(2 / 3) and b["zeros"] == 1 and b["max"] == 1.0


def test_bf16_and_complex():
    x = np.array([1.0, -2.0, 3.140625, np.nan], dtype=np.float32)
    bits = encode_bf16(x)
    assert decode(bits, "bfloat16")[2] == np.float32(3.140625)
    s = compute_stats(bits, "bfloat16")
    assert s["nan"] == 1 and s["min"] == -2.0 and s["max"] == 3.140625
    c = compute_stats(np.array([3 + 4j, complex(np.nan, 1)], dtype=np.complex64))
    assert c["nan"] == 1 and c["max"] == 5.0


def test_fp8_decode_known_values():
    # e4m3fn: 0x38 = 1.0, 0x7e = 448 (max), 0x7f = NaN; e5m2: 0x3c = 1.0, 0x7c = inf
    e4 = decode(np.array([0x38, 0x7E, 0x7F, 0xB8], np.uint8), "float8_e4m3fn")
    assert e4[0] == 1.0 and e4[1] == 448.0 and np.isnan(e4[2]) and e4[3] == -1.0
    e5 = decode(np.array([0x3C, 0x7C, 0xFC], np.uint8), "float8_e5m2")
    assert e5[0] == 1.0 and e5[1] == np.inf and e5[2] == -np.inf


def test_content_hash_sensitive_to_value_dtype_shape():
    a = np.arange(6, dtype=np.float32)
    assert content_hash(a) == content_hash(a.copy())
    b = a.copy()
    b[5] = np.nextafter(b[5], np.float32(10))
    assert content_hash(a) != content_hash(b)
    assert content_hash(a) != content_hash(a.reshape(2, 3))
    assert content_hash(a) != content_hash(a.astype(np.float64))
