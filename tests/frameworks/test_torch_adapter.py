"""TorchAdapter statistics agree with the NumPy reference for every dtype; payloads round-trip."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from netparity import hoststats  # noqa: E402
from netparity.dtypes import decode  # noqa: E402
from netparity.frameworks.torch.adapter import TorchAdapter, _exact_vec  # noqa: E402
from netparity.stats import compute_stats  # noqa: E402


def _cases() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "float32": torch.randn(300, 37, generator=g) * 3 + 1,
        "float32_offset": torch.randn(10000, generator=g) * 1e-3 + 5.0,
        "float64": torch.randn(5000, dtype=torch.float64, generator=g),
        "float16": (torch.randn(3000, generator=g) * 100).half(),
        "bfloat16_big": (torch.randn(3000, generator=g) * 1e5).bfloat16(),
        "bfloat16": torch.randn(3000, generator=g).bfloat16(),
        "fp8_e4m3": torch.randn(300, generator=g).to(torch.float8_e4m3fn),
        "fp8_e5m2": (torch.randn(300, generator=g) * 1e5).to(torch.float8_e5m2),
        "int64": torch.randint(-100000, 100000, (777,), generator=g),
        "int32": torch.randint(-1000, 1000, (77,), generator=g, dtype=torch.int32),
        "int8": torch.randint(-100, 100, (777,), generator=g, dtype=torch.int8),
        "uint8": torch.randint(0, 255, (77,), generator=g, dtype=torch.uint8),
        "bool": torch.rand(100, generator=g) > 0.5,
        "complex64": torch.randn(100, dtype=torch.complex64, generator=g),
        "complex128_nan": torch.tensor([1 + 1j, complex(math.nan, 0), 3 - 4j]),
        "empty": torch.zeros(0, 3),
        "all_nan": torch.full((10,), math.nan),
        "mixed": torch.tensor([1.0, -3.0, math.nan, math.inf, -math.inf, 0.0, 7e4, -7e4]),
        "all_inf": torch.tensor([math.inf, -math.inf]),
        "ones": torch.ones(10000),
        "zeros": torch.zeros(50),
        "signed_zeros": torch.tensor([0.0, -0.0, 1.0, -0.0]),
        "scalar": torch.tensor(2.5),
        "strided": torch.randn(40, 30, generator=g).t()[::2],
        "expanded": torch.randn(5, generator=g).expand(4, 5),  # stride 0: reshape keeps a view
    }


def _close(x: float | int | None, y: float | int | None, scale: float) -> bool:
    if x is None or y is None:
        return x is None and y is None
    if isinstance(y, float) and math.isnan(y):
        return math.isnan(x)
    return abs(x - y) <= 1e-6 * max(abs(y), scale) + 1e-300


def _check(stats: dict, ref: dict, name: str) -> None:
    assert set(stats) == set(ref)
    # mean is compared relative to the data's magnitude (it may cancel to ~0)
    for k in ref:
        s = 0.0
        if k == "mean" and ref["std"] is not None:
            s = abs(ref["mean"]) + ref["std"]
        assert _close(stats[k], ref[k], s), (name, k, stats[k], ref[k])
        if k in ("nan", "posinf", "neginf", "zeros", "fp16_overflow"):
            assert isinstance(stats[k], int), (name, k)


@pytest.mark.parametrize("name", list(_cases()))
def test_stats_match_numpy_reference(name: str, cpu_path: str) -> None:
    a = TorchAdapter()
    t = _cases()[name]
    ref = compute_stats(a.to_numpy(t), a.dtype_name(t))
    (got,) = a.resolve_stats([a.stats_handle(t)])
    _check(got, ref, name)


def test_stats_handles_equal_one_handle_per_tensor(cpu_path: str) -> None:
    """All of _cases() at once (the batched path of parameters after a step): the statistics of
    one handle per tensor, in order."""
    a = TorchAdapter()
    ts = list(_cases().values())
    got = a.resolve_stats(a.stats_handles(ts))
    want = a.resolve_stats([a.stats_handle(t) for t in ts])
    for name, g, w in zip(_cases(), got, want):
        _check(g, w, name)


def test_sum_with_its_last_summand_in_one_pass(cpu_path: str) -> None:
    """stats_handle_sum_last: the handles stats_handle_sum and stats_handle give; (None, None)
    for summands the kernel does not read in place."""
    a = TorchAdapter()
    torch.manual_seed(0)
    x, y = torch.randn(3, 70_000), torch.randn(3, 70_000)
    got = a.stats_handle_sum_last([x, y])
    if hoststats._kernel is None:
        assert got == (None, None)  # the caller adds the tensors itself
        return
    assert got == (a.stats_handle_sum([x, y]), a.stats_handle(y))
    assert a.stats_handle_sum_last([x, y.t()]) == (None, None)  # not contiguous
    assert a.stats_handle_sum_last([x, y[:2]]) == (None, None)  # another shape
    assert a.stats_handle_sum_last([x.double(), y.double()]) == (None, None)


@pytest.mark.parametrize("name", list(_cases()))
def test_exact_device_path_matches_reference(name: str) -> None:
    """The path used on accelerators (float64, masked) gives the same numbers."""
    a = TorchAdapter()
    t = _cases()[name]
    if t.numel() == 0:
        pytest.skip("empty tensors never reach a device path")
    ref = compute_stats(a.to_numpy(t), a.dtype_name(t))
    (got,) = a.resolve_stats([_exact_vec(t)])
    _check(got, ref, name)


def test_stats_do_not_touch_the_tensor() -> None:
    a = TorchAdapter()
    w = torch.randn(64, 8, requires_grad=True)
    t = w * 2
    v0 = t._version
    rng = torch.get_rng_state()
    h = a.stats_handle(t)
    assert t._version == v0 and t.dtype == torch.float32
    assert isinstance(h, list) or (h.grad_fn is None and not h.requires_grad)
    assert torch.equal(torch.get_rng_state(), rng)


def test_resolve_stats_fetches_one_stacked_batch() -> None:
    a = TorchAdapter()
    ts = list(_cases().values())
    handles = [a.stats_handle(t) for t in ts]
    # CPU statistics are computed at once (a list); the masked path leaves a tensor to fetch
    assert all(h is None or len(h) == 12 for h in handles)
    assert any(isinstance(h, torch.Tensor) for h in handles)
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []

    class Count(TorchDispatchMode):  # observes the real ops resolve_stats runs
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with Count():
        out = a.resolve_stats(handles)
    # one stack of all handles, no per-tensor scalar fetch (.item() = _local_scalar_dense)
    assert seen.count("aten.stack.default") == 1
    assert not any("_local_scalar_dense" in s for s in seen)
    assert len(out) == len(ts)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.int64,
              torch.bool, torch.complex64]
)
def test_snapshot_is_taken_now_and_decodes(dtype: torch.dtype) -> None:
    a = TorchAdapter()
    t = (torch.arange(12, dtype=torch.float32) - 3).reshape(3, 4).to(dtype)
    expect = t.clone()
    thunk, nbytes = a.snapshot(t)
    t.copy_(torch.zeros_like(t, dtype=torch.float32).to(dtype))  # mutate in place
    raw = thunk()
    assert nbytes == raw.nbytes
    got = decode(raw, a.dtype_name(expect))
    want = expect.to(torch.float32).numpy() if dtype in (torch.bfloat16, torch.float8_e4m3fn) \
        else expect.numpy()
    np.testing.assert_array_equal(got, want)


def test_dtype_names_and_facts() -> None:
    a = TorchAdapter()
    names = {dt: a.dtype_name(torch.zeros(1, dtype=dt)) for dt in (
        torch.float32, torch.bfloat16, torch.float8_e5m2, torch.complex128, torch.bool,
        torch.int16)}
    assert names == {torch.float32: "float32", torch.bfloat16: "bfloat16",
                     torch.float8_e5m2: "float8_e5m2", torch.complex128: "complex128",
                     torch.bool: "bool", torch.int16: "int16"}
    f = a.facts()
    assert f["framework"] == "torch" and f["framework_version"] == torch.__version__
    prec = f["precision"]
    assert prec["float32_matmul_precision"] == torch.get_float32_matmul_precision()
    for k in ("matmul_allow_tf32", "cudnn_allow_tf32", "deterministic_algorithms",
              "cudnn_benchmark", "autocast_cpu"):
        assert isinstance(prec[k], bool)
    assert a.is_model(torch.nn.Linear(1, 1)) and not a.is_model(torch.zeros(1))
    assert a.is_tensor(torch.zeros(1)) and not a.is_tensor(np.zeros(1))


@pytest.mark.parametrize("kind", ["mixed_sign", "relu_like", "negative", "positive_offset", "ints"])
def test_large_cpu_tensors_use_rows_and_chunks_exactly(kind: str, cpu_path: str) -> None:
    """Tensors longer than the fast path's rows and chunks (tails included) stay exact."""
    g = torch.Generator().manual_seed(1)
    n = 3 * (1 << 18) + 4097  # several |x| chunks, many 4096-element rows, a ragged tail
    base = torch.randn(n, generator=g)
    t = {
        "mixed_sign": base * 50.0,
        "relu_like": torch.relu(base) * 3.0,  # about half exact zeros, abs_sum == sum
        "negative": -torch.rand(n, generator=g) - 1e-3,  # one sign, no zeros
        "positive_offset": base * 1e-3 + 7.0,  # mean dominates std: two-pass variance
        "ints": torch.randint(-3, 4, (n,), generator=g, dtype=torch.int32),
    }[kind]
    t[::1000] = 0.0 if kind != "negative" else t[::1000]
    if kind == "mixed_sign":
        t[5::1000] = -0.0
    a = TorchAdapter()
    ref = compute_stats(a.to_numpy(t), a.dtype_name(t))
    (got,) = a.resolve_stats([a.stats_handle(t)])
    _check(got, ref, kind)


def test_kernel_is_built_where_a_compiler_exists() -> None:
    """`pip install -e .` builds the one-pass kernel; silently losing it would halve capture speed."""
    import shutil
    import sysconfig

    if shutil.which(sysconfig.get_config_var("CC").split()[0] or "cc") is None:
        pytest.skip("no C compiler: the NumPy fallback is expected")
    assert hoststats._kernel is not None


def test_kernel_halves_agree_and_flag_non_finite() -> None:
    if hoststats._kernel is None:
        pytest.skip("netparity._fastvec was not built")
    k = hoststats._kernel
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((1 << 19) + 777) * 4).astype(np.float32)
    a[::97] = 0.0
    one, two, five = k.stats(a, 1), k.stats(a, 2), k.stats(a, 5)  # 5: uneven split, POSIX
    for got in (two, five):
        assert got[0] == one[0] == a.min() and got[1] == one[1] == a.max()
        assert got[5] == one[5] == int((a == 0).sum())
    for got in (one, two, five):
        np.testing.assert_allclose(got[2:5], [a.sum(dtype=np.float64),
                                              np.dot(a.astype(np.float64), a),
                                              np.abs(a).sum(dtype=np.float64)], rtol=1e-6)
    assert two == k.stats(a, 2)  # fixed split points: deterministic
    shifted = k.stats(a, 2, 5.0)  # statistics of a - 5 without a temporary
    d = a.astype(np.float64) - 5.0
    np.testing.assert_allclose(shifted[:5], [d.min(), d.max(), d.sum(), d @ d, np.abs(d).sum()],
                               rtol=1e-6)
    b = a.copy()
    b[123456] = np.nan
    assert not math.isfinite(k.stats(b, 2)[3])
    b[123456] = np.inf
    assert not math.isfinite(k.stats(b, 2)[3])
    with pytest.raises(TypeError):
        k.stats(np.zeros(4, dtype=np.int32))
    with pytest.raises(ValueError):
        k.stats(np.zeros(0, dtype=np.float32))
    with pytest.raises(ValueError):
        k.stats(a, 0)
    with pytest.raises(ValueError):
        k.stats(a, 17)


def test_kernel_runs_on_torchs_openmp_team() -> None:
    """With ATen's OpenMP backend the kernel splits a tensor over torch's own OpenMP team
    (the measured reason: POSIX threads fight torch's spinning workers inside a training step).
    Same split points as POSIX threads, so the same numbers, bit for bit."""
    if hoststats._kernel is None:
        pytest.skip("netparity._fastvec was not built")
    from netparity.frameworks.torch import adapter as torch_adapter

    if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
        pytest.skip("ATen's parallel backend is not OpenMP here")
    threads = torch_adapter.kernel_threads()
    assert threads == min(16, torch.get_num_threads())
    k = hoststats._kernel
    path = k.bind_openmp("torch")
    assert path is not None and "omp" in path.rsplit("/", 1)[-1]
    rng = np.random.default_rng(5)
    a = rng.standard_normal(3_000_001).astype(np.float32)
    on_team = [k.stats(a, n) for n in (2, 3, 4)]
    k.unbind_openmp()
    try:
        on_posix = [k.stats(a, n) for n in (2, 3, 4)]
    finally:
        assert k.bind_openmp("torch") is not None
    assert on_team == on_posix
    ref = k.stats(a, 1)
    for got in on_team:
        assert got[0] == ref[0] and got[1] == ref[1] and got[5] == ref[5]
        np.testing.assert_allclose(got[2:5], ref[2:5], rtol=1e-6)
    # and through the adapter, against the float64 reference
    t = torch.from_numpy(a)
    (s,) = TorchAdapter().resolve_stats([TorchAdapter().stats_handle(t)])
    _check(s, compute_stats(a), "float32")


def test_kernel_in_a_forked_child_does_not_use_the_parents_team() -> None:
    """A forked process (a DataLoader worker) has none of the parent's OpenMP threads; the
    kernel notices the new pid and computes on the calling thread instead of hanging."""
    if hoststats._kernel is None:
        pytest.skip("netparity._fastvec was not built")
    import multiprocessing as mp

    from netparity.frameworks.torch import adapter as torch_adapter

    torch_adapter.kernel_threads()  # binds in this (parent) process where possible
    a = np.arange(1 << 20, dtype=np.float32)
    want = hoststats._kernel.stats(a, 2)
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    proc = ctx.Process(target=_child_stats, args=(q, a))
    proc.start()
    proc.join(60)
    if proc.is_alive():
        proc.kill()
        pytest.fail("the kernel hung in a forked child")
    assert proc.exitcode == 0
    assert q.get(timeout=5) == want


def _child_stats(q, a) -> None:  # type: ignore[no-untyped-def]
    q.put(hoststats._kernel.stats(a, 2))
