"""netparity.hoststats (the one-pass CPU statistics) against the NumPy reference, through the
C kernel and through the NumPy fallback, for every dtype a host array can have."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from netparity import hoststats
from netparity.dtypes import encode_bf16
from netparity.stats import compute_stats

RNG = np.random.default_rng(11)


def _cases() -> dict[str, tuple[np.ndarray, str | None]]:
    f = (RNG.standard_normal(70_001) * 3 + 0.25).astype(np.float32)
    f[::101] = 0.0
    return {
        "float32": (f, None),
        "float32_2d_fortran": (np.asfortranarray(f[:70_000].reshape(700, 100)), None),
        "float32_offset": ((RNG.standard_normal(9_000) * 1e-3 + 5.0).astype(np.float32), None),
        "float64": (RNG.standard_normal(5_000) * 1e3, None),
        "float16": ((RNG.standard_normal(3_000) * 100).astype(np.float16), None),
        "bfloat16_bits": (encode_bf16(f[:4_000]), "bfloat16"),
        "int8": (RNG.integers(-128, 127, 999).astype(np.int8), None),
        "uint16": (RNG.integers(0, 60_000, 999).astype(np.uint16), None),
        "int32": (RNG.integers(-30_000, 30_000, 999).astype(np.int32), None),
        "int64_wide": (RNG.integers(-(2**40), 2**40, 999), None),  # beyond fp16: the reference
        "bool": (RNG.random(500) > 0.3, None),
        "positive": (np.abs(f) + 1.0, None),  # one sign: abs_sum from the sum
        "negative": (-np.abs(f) - 1.0, None),
        "scalar": (np.float32(2.5), None),
        "nan_inf": (np.array([1.0, np.nan, np.inf, -2.0, -np.inf], np.float32), None),
        "beyond_fp16": (np.array([1.0, 7e4, -3.0], np.float32), None),
        "complex": (np.array([1 + 1j, 3 - 4j], np.complex64), None),
        "empty": (np.zeros((0, 4), np.float32), None),
        "all_zero": (np.zeros(1_000, np.float32), None),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_host_stats_match_reference(name: str, cpu_path: str) -> None:
    arr, dtype = _cases()[name]
    before = np.array(arr, copy=True)
    got, ref = hoststats.host_stats(arr, dtype), compute_stats(arr, dtype)
    assert got.keys() == ref.keys()
    for k, want in ref.items():
        if want is None:
            assert got[k] is None, k
        elif isinstance(want, int):
            assert got[k] == want and isinstance(got[k], int), k
        else:
            scale = abs(ref["mean"]) + ref["std"] if k == "mean" else abs(want)
            assert abs(got[k] - want) <= 1e-6 * scale + 1e-300, (k, got[k], want)
    assert np.array_equal(np.asarray(arr), before, equal_nan=arr.dtype.kind in "fc")  # read only


def test_finite_vec_declines_what_needs_masking(cpu_path: str) -> None:
    a = (RNG.standard_normal(10_000)).astype(np.float32)
    assert hoststats.finite_vec(a) is not None
    for bad in (math.nan, math.inf, -math.inf, 65505.0):
        b = a.copy()
        b[4321] = bad
        assert hoststats.finite_vec(b) is None, bad


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_finite_vec_sum_is_the_statistics_of_the_sum(threads: int, kernel_loops: str) -> None:
    """The fused kernel adds its inputs in float32, left to right, as torch/NumPy do: the same
    numbers as the statistics of the materialised sum, bit for bit (same kernel, same order)."""
    n = 3 * (1 << 16) + 12_345  # several parts plus a scalar tail
    a, b, c = (RNG.standard_normal(n).astype(np.float32) for _ in range(3))
    b[::7] = -a[::7]  # exact zeros in the sum
    for parts in ([a, b], [a, b, c], [a + 40.0, b]):  # the last: mean-dominated, second pass
        total = parts[0]
        for p in parts[1:]:
            total = total + p
        got = hoststats.finite_vec_sum(parts, threads)
        assert got == hoststats.finite_vec(total, threads)
        ref = compute_stats(total)
        assert got is not None and got[0] == ref["min"] and got[9] == ref["zeros"]
        assert math.isclose(got[3], ref["std"], rel_tol=1e-6)
    bad = a.copy()
    bad[5] = np.inf
    assert hoststats.finite_vec_sum([bad, b], threads) is None  # needs the masked reference
    k = hoststats._kernel
    with pytest.raises(ValueError):
        k.stats_sum([a])
    with pytest.raises(ValueError):
        k.stats_sum([a, b[:-1]])
    with pytest.raises(TypeError):
        k.stats_sum([a, b.astype(np.float64)])
    with pytest.raises(ValueError):
        k.stats_sum([a] * 9)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_kernel_vec_is_the_python_vector_of_its_totals(threads: int, kernel_loops: str) -> None:
    """finite_vec's one C call (kernel.vec) makes of the kernel's totals exactly what the
    Python _vec makes of them: values, signs of zero, int counts, the second pass when the
    mean dominates, None for what needs masking."""
    k = hoststats._kernel
    x = RNG.standard_normal(3 * (1 << 16) + 12_345).astype(np.float32)
    for a in (x, x[:77] + 1000.0, x.astype(np.float64) - 5e3, np.zeros(5, np.float32),
              np.full(9, 3.0), np.array([np.nan], np.float32), np.array([7e4], np.float32),
              np.array([np.inf, 1.0])):
        got = k.vec(a, threads)
        want = hoststats._vec(k.stats(a, threads, 0.0), functools.partial(k.stats, a, threads),
                              a.size, a.dtype.type)
        assert got == want
        if want is not None:
            assert [type(v) for v in got] == [type(v) for v in want]
            assert [math.copysign(1.0, v) for v in got] == [math.copysign(1.0, v) for v in want]
    with pytest.raises(ValueError):
        k.vec(x[:0])
    with pytest.raises(TypeError):
        k.vec(x.astype(np.float16))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_finite_vec_sum_last_also_describes_the_last_summand(threads: int,
                                                             kernel_loops: str) -> None:
    """One pass over the summands gives the sum's statistics and the last summand's own, bit
    for bit what finite_vec_sum and finite_vec give (same parts, lanes and order)."""
    n = 3 * (1 << 16) + 12_345  # several parts plus a scalar tail
    a, b, c = (RNG.standard_normal(n).astype(np.float32) for _ in range(3))
    c[::5] = 0.0
    for parts in ([a, b], [a, b, c], [a, c + 40.0], [a[:77], c[:77]], [b - 40.0, a]):
        assert hoststats.finite_vec_sum_last(parts, threads) == (
            hoststats.finite_vec_sum(parts, threads), hoststats.finite_vec(parts[-1], threads))
    bad = a.copy()
    bad[5] = np.inf
    assert hoststats.finite_vec_sum_last([b, bad], threads) == (None, None)
    assert hoststats.finite_vec_sum_last([bad, b], threads) == (
        None, hoststats.finite_vec(b, threads))
    assert len(hoststats._kernel.stats_sum([a, b], threads, 0.0, True)) == 12
    assert len(hoststats._kernel.stats_sum([a, b], threads, 0.0, False)) == 6


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_finite_vec_relu_also_gives_the_statistics_of_the_relu(threads: int,
                                                               kernel_loops: str) -> None:
    """One pass over x gives finite_vec(x) and finite_vec(max(x, 0)) -- the second bit for bit
    what a pass over the ReLU's output gives (same lanes, same order, zeros elsewhere)."""
    n = 3 * (1 << 16) + 12_345  # several parts plus a scalar tail
    x = RNG.standard_normal(n).astype(np.float32)
    x[::13] = 0.0
    x[1::17] = -0.0
    for a in (x, x[:77], np.abs(x) + 0.5, -np.abs(x) - 0.5, x[: 5 * 40_000].reshape(-1, 5)[:, :1].copy()):
        vec, relu = hoststats.finite_vec_relu(a, threads)
        assert vec == hoststats.finite_vec(a, threads)
        assert relu == hoststats.finite_vec(np.maximum(a, np.float32(0)), threads)
        ref = compute_stats(np.maximum(a, 0))
        assert relu is not None and relu[0] == ref["min"] and relu[1] == ref["max"]
        assert relu[9] == ref["zeros"]
        assert math.isclose(relu[2], ref["mean"], rel_tol=1e-6)
    # a ReLU whose variance would need a second pass over its (not yet written) output
    assert hoststats.finite_vec_relu(x + 100.0, threads)[1] is None
    bad = x.copy()
    bad[9] = np.nan
    assert hoststats.finite_vec_relu(bad, threads) == (None, None)
    if hoststats._kernel is not None:  # its last number: how many elements are above zero
        assert hoststats._kernel.stats_relu(x, threads)[-1] == np.count_nonzero(x > 0)
    wide = x.astype(np.float64)
    assert hoststats.finite_vec_relu(wide, threads) == (hoststats.finite_vec(wide, threads), None)
    with pytest.raises(TypeError):
        hoststats._kernel.stats_relu(wide)
    with pytest.raises(ValueError):
        hoststats._kernel.stats_relu(x[:0])


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_finite_vecs_equal_one_call_per_array(threads: int, cpu_path: str) -> None:
    """Many arrays in one kernel call (a model's parameters): the numbers of one call each."""
    x = RNG.standard_normal(3 * (1 << 16) + 999).astype(np.float32)
    bad = x[:100].copy()
    bad[3] = np.nan
    arrays = [x, x[:5], (x[:20_000] + 50.0), x.astype(np.float64)[:7_000], bad,
              np.full(4, 2.0, np.float32), x[:70_000].reshape(700, 100)]
    assert hoststats.finite_vecs(arrays, threads) == [hoststats.finite_vec(a, threads)
                                                      for a in arrays]
    assert hoststats.finite_vecs([], threads) == []
    if hoststats._kernel is not None:
        with pytest.raises(ValueError):
            hoststats._kernel.stats_many([x, x[:0]])
        with pytest.raises(TypeError):
            hoststats._kernel.stats_many([x, x.astype(np.float16)])


def test_finite_vec_sum_declines_without_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hoststats, "_kernel", None)
    a = np.ones(10, np.float32)
    assert hoststats.finite_vec_sum([a, a]) is None  # the caller adds the arrays itself
    assert hoststats.finite_vec_sum_last([a, a]) == (None, None)
