"""The fused C pass of a tensor pair (``_fastvec.pair_update``) against the NumPy pass.

``netparity.compare.metrics`` judges full-tensor pairs in C when the kernel is built and keeps
the NumPy pass as the reference (``USE_KERNEL = False``). Every reported number must be the
reference's: maxima, counts, required tolerances and the histogram exactly, the sums (mean
error, RMSE, cosine, RMS) up to summation order. Covered here: float32/float16/float64/mixed
arrays, bfloat16 and float16 payloads read from traces (the kernel decodes bf16 bits itself),
NaN/Inf in every combination, zeros in the reference, float64 overflow, empty, tiny and odd
sizes, tensors spanning several kernel reads and the histogram's sampling boundary, and a
bf16/fp16 capture of a real PyTorch model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import netparity
from netparity.compare import metrics
from netparity.trace import Record, TraceWriter, build_manifest

pytestmark = pytest.mark.skipif(metrics._kernel is None,
                                reason="C kernel netparity._fastvec not built")

#: metrics that are sums over elements: equal up to summation order
SUMS = {"mean_abs", "rmse", "mean_rel", "cosine", "ref_rms", "cand_rms"}


@pytest.fixture
def numpy_pass() -> Iterator[Callable[..., Any]]:
    """Run a callable on the NumPy reference pass (the kernel is restored afterwards)."""

    def run(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        metrics.USE_KERNEL = False
        try:
            return fn(*args, **kw)
        finally:
            metrics.USE_KERNEL = True

    yield run
    metrics.USE_KERNEL = True


def assert_same(ref: dict[str, Any], got: dict[str, Any], where: str = "") -> None:
    assert set(ref) == set(got), where
    for k, x in ref.items():
        y = got[k]
        if k in SUMS and isinstance(x, float) and math.isfinite(x):
            assert y == pytest.approx(x, rel=1e-12, abs=1e-300), f"{where} {k}"
        elif isinstance(x, float) and math.isnan(x):
            assert isinstance(y, float) and math.isnan(y), f"{where} {k}"
        else:
            assert y == x, f"{where} {k}: NumPy {x!r}, kernel {y!r}"


def _pair(n: int, pattern: str, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(n)
    b = a + 1e-3 * rng.standard_normal(n)
    if pattern == "nonfinite" and n:
        idx = rng.permutation(n)
        for j, (x, y) in enumerate([(np.nan, np.nan), (np.nan, 1.0), (2.0, np.nan),
                                    (np.inf, np.inf), (np.inf, -np.inf), (-np.inf, -np.inf),
                                    (np.inf, 1.0), (3.0, -np.inf), (np.nan, np.inf)]):
            for i in idx[j::9][: max(1, n // 50)]:
                a[i], b[i] = x, y
    elif pattern == "zeros":  # r == 0: min_rtol inf where d > atol, the RMS floor elsewhere
        a[::7] = 0.0
        b[::14] = 0.0
    elif pattern == "spike" and n:  # the deciding element late in the tensor
        b[-1] = a[-1] + 0.5
    return a, b


SIZES = [0, 1, 5, 63, 64, 65, 1000, metrics.HIST_FULL, metrics.HIST_FULL + 1,
         metrics.KERNEL_CHUNK + 3]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("pattern", ["noise", "nonfinite", "zeros", "spike"])
def test_arrays_match_numpy_pass(n: int, pattern: str,
                                 numpy_pass: Callable[..., Any]) -> None:
    a, b = _pair(n, pattern)
    for da, db in [(np.float32, np.float32), (np.float16, np.float16), (np.float64, np.float64),
                   (np.float64, np.float32)]:
        x, y = a.astype(da), b.astype(db)
        for rtol, atol in [(1.3e-6, 1e-5), (0.0, 1e-4), (1e-2, 0.0), (-1e-3, 1e-3)]:
            want = numpy_pass(metrics.array_metrics, x, y, rtol=rtol, atol=atol)
            got = metrics.array_metrics(x, y, rtol=rtol, atol=atol)
            assert_same(want, got, f"{pattern} n={n} {x.dtype}/{y.dtype} {rtol} {atol}")


def test_float64_overflow_and_integers(numpy_pass: Callable[..., Any]) -> None:
    # |c - r| overflows to inf with both sides finite: counted as a finite pair, as NumPy does
    a = np.array([1.7e308, -1.7e308, 1.0, 2.0] * 40)
    b = np.array([-1.7e308, 1.7e308, 1.0, 2.5] * 40)
    want = numpy_pass(lambda: metrics.array_metrics(a, b, rtol=1e-3, atol=1e-3))
    got = metrics.array_metrics(a, b, rtol=1e-3, atol=1e-3)
    assert got["max_abs"] == math.inf
    assert_same(want, got)
    i, j = np.arange(-50, 50, dtype=np.int32), np.arange(50, -50, -1, dtype=np.int64)
    assert_same(numpy_pass(lambda: metrics.array_metrics(i, j, rtol=0.1, atol=1.0)),
                metrics.array_metrics(i, j, rtol=0.1, atol=1.0))


def test_kernel_refuses_bad_state() -> None:
    k = metrics._kernel
    assert k is not None
    a = np.zeros(8, np.float32)
    ds, is_, h = np.zeros(10), np.zeros(9, np.int64), np.zeros(2 * metrics.N_BINS, np.int64)
    with pytest.raises(ValueError, match="element counts differ"):
        k.pair_update(a, 1, a[:4], 1, ds, is_, h, 0, 8, metrics.CHUNK, 1, 1.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="scale"):
        k.pair_update(a, 1, a, 1, ds, is_, h, 0, 8, metrics.CHUNK, 1, math.nan, 0.0, 0.0)
    with pytest.raises(ValueError, match="state buffer"):
        k.pair_update(a, 1, a, 1, ds[:3], is_, h, 0, 8, metrics.CHUNK, 1, 1.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="state buffer"):  # one histogram copy is not enough
        k.pair_update(a, 1, a, 1, ds, is_, h[: metrics.N_BINS], 0, 8, metrics.CHUNK, 1, 1.0,
                      0.0, 0.0)
    with pytest.raises(ValueError, match="whole number"):
        k.pair_update(a[:3].view(np.uint8)[:5], 2, a[:3].view(np.uint8)[:5], 2, ds, is_, h, 0,
                      8, metrics.CHUNK, 1, 1.0, 0.0, 0.0)


def _all_pairs(r: Any) -> list[Any]:
    return sorted(r.pairs + r.params, key=lambda p: (p.key, p.direction, p.role, p.arg))


def _compare_both(ref: Path, cand: Path,
                  numpy_pass: Callable[..., Any]) -> Any:
    want = numpy_pass(lambda: netparity.compare(ref, cand, workers=1))
    got = netparity.compare(ref, cand, workers=2)
    assert got.status == want.status
    pw, pg = _all_pairs(want), _all_pairs(got)
    assert [(p.key, p.status, p.reason) for p in pg] == [(p.key, p.status, p.reason) for p in pw]
    for p, q in zip(pw, pg):
        assert_same(p.metrics, q.metrics, p.key)
    return got


def test_bfloat16_trace_with_nonfinite(net: Callable[..., Path],
                                       numpy_pass: Callable[..., Any]) -> None:
    # bf16 payloads reach the kernel as stored bits (decoded in C), through the trace's reader
    def edit(module: str, direction: str, role: str, arr: np.ndarray) -> np.ndarray:
        if module == "net.l1" and direction == "forward" and role == "output":
            arr = arr.copy()
            arr[5], arr[17] = np.nan, np.inf
        return arr

    ref = net(dtype="bfloat16", size=70_000, edit=edit)
    cand = net(dtype="bfloat16", size=70_000, edit=edit, noise=3e-3,
               perturb={("net.l3", "forward"): 0.2})
    got = _compare_both(ref, cand, numpy_pass)
    assert got.status == "fail"
    l1 = [p for p in got.pairs if p.module == "net.l1" and p.direction == "forward"
          and p.role == "output"][0]
    assert l1.metrics["nonfinite_match"] == 2


def _fp16_trace(path: Path, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    base = np.random.default_rng(0)
    with TraceWriter(path, manifest=build_manifest(framework="numpy", device="cpu")) as w:
        for i, n in enumerate([0, 1, 7, 4099, 70_001]):
            x = base.standard_normal(n).astype(np.float16)
            x = (x + np.float16(0.01) * rng.standard_normal(n).astype(np.float16)).astype(
                np.float16)
            if n > 10:
                x[3], x[9] = np.float16(np.inf), np.float16(np.nan)
            ev = w.next_event()
            stats = netparity.stats.compute_stats(x.astype(np.float32))
            w.add(Record(kind="module", module=f"m{i}", op="linear", direction="forward",
                         role="output", arg="0", dtype="float16", shape=(n,), event=ev,
                         stats=stats), payload=x)
    return path


def test_float16_trace_odd_and_empty_tensors(tmp_path: Path,
                                             numpy_pass: Callable[..., Any]
                                             ) -> None:
    got = _compare_both(_fp16_trace(tmp_path / "a", 1), _fp16_trace(tmp_path / "b", 2),
                        numpy_pass)
    sizes = {p.metrics.get("numel") for p in got.pairs}
    assert {0, 1, 7, 4099, 70_001} <= sizes


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_torch_low_precision_capture(tmp_path: Path, dtype: str,
                                     numpy_pass: Callable[..., Any]) -> None:
    torch = pytest.importorskip("torch")
    tdt = getattr(torch, dtype)

    def run(path: Path, shift: float) -> Path:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 16)).to(tdt)
        with torch.no_grad():
            model[2].bias += shift  # the one difference between the runs
        x = torch.randn(32, 64).to(tdt)
        with netparity.capture(model, str(path), level="module", payload="tensors") as cap:
            model(x).float().pow(2).mean().backward()
            cap.step()
        return path

    got = _compare_both(run(tmp_path / "ref", 0.0), run(tmp_path / "cand", 0.05), numpy_pass)
    assert got.status == "fail"
    assert {p.ref_dtype for p in got.pairs} == {dtype}
