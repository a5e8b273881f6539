"""MindSporeAdapter: dtypes, statistics (host and device paths) against netparity.stats."""

from __future__ import annotations

import numpy as np
import pytest

ms = pytest.importorskip("mindspore", reason="MindSpore is not installed")

from netparity.dtypes import decode, encode_bf16  # noqa: E402
from netparity.frameworks.mindspore.adapter import MindSporeAdapter  # noqa: E402
from netparity.frameworks.registry import adapter_for  # noqa: E402
from netparity.stats import compute_stats  # noqa: E402

RNG = np.random.default_rng(0)
VALUES = np.concatenate([RNG.normal(0, 3, 61), [0.0, np.nan, np.inf, -np.inf, 70000.0, -1e5]])


def _cases():
    f = VALUES.astype(np.float32)
    big = (RNG.normal(0, 2, 100_003) + 0.5).astype(np.float32)  # finite: the one-pass path
    off = (RNG.normal(0, 1e-3, 5_000) + 7.0).astype(np.float32)  # mean-dominated variance
    return [
        ("float32-finite", ms.Tensor(big), big),
        ("float32-offset", ms.Tensor(off), off),
        ("float16-finite", ms.Tensor(big.astype(np.float16)), big.astype(np.float16)),
        ("bfloat16-finite", ms.Tensor(big).astype(ms.bfloat16), decode(encode_bf16(big), "bfloat16")),
        ("float32", ms.Tensor(f), f),
        ("float16", ms.Tensor(VALUES.astype(np.float16)), VALUES.astype(np.float16)),
        ("bfloat16", ms.Tensor(f).astype(ms.bfloat16), decode(encode_bf16(f), "bfloat16")),
        ("int32", ms.Tensor(np.arange(-5, 7, dtype=np.int32)), np.arange(-5, 7)),
        ("bool", ms.Tensor(np.array([True, False, True])), np.array([True, False, True])),
        ("empty", ms.Tensor(np.zeros((0, 3), np.float32)), np.zeros((0, 3), np.float32)),
        ("all-nan", ms.Tensor(np.full(4, np.nan, np.float32)), np.full(4, np.nan, np.float32)),
    ]


def _close(a, b, rel):
    assert a.keys() == b.keys()
    for k in a:
        if a[k] is None or b[k] is None:
            assert a[k] is None and b[k] is None, k
        elif isinstance(b[k], int):
            assert a[k] == b[k] and isinstance(a[k], int), k
        elif k == "mean":  # relative to the data's spread: a mean may cancel to ~0
            assert abs(a[k] - b[k]) <= rel * (abs(b[k]) + b["std"]) + 1e-12, k
        else:
            assert a[k] == pytest.approx(b[k], rel=rel, abs=1e-12), k


@pytest.mark.parametrize("mode", ["host", "device"])
def test_stats_match_numpy_reference(mode):
    a = MindSporeAdapter(stats_mode=mode)
    cases = _cases()
    got = a.resolve_stats([a.stats_handle(t) for _, t, _ in cases])  # one batch
    for (_label, _t, ref), st in zip(cases, got):
        # host: one pass with float32 lanes for finite data (netparity.hoststats, ~1e-7), the
        # reference itself otherwise; device: float64 reductions in another order
        _close(st, compute_stats(ref), rel=1e-9 if mode == "device" else 1e-6)


def test_dtypes_payload_bits_and_adapter_lookup():
    a = MindSporeAdapter()
    f = np.array([1.5, -2.0, np.nan, 3.0e38], np.float32)
    t = ms.Tensor(f).astype(ms.bfloat16)
    assert a.dtype_name(t) == "bfloat16"
    raw = a.to_numpy(t)
    assert raw.dtype == np.uint16 and np.array_equal(raw[:2], encode_bf16(f)[:2])
    thunk, nbytes = a.snapshot(t)
    assert nbytes == 8 and np.array_equal(thunk(), raw)
    p = ms.Parameter(ms.Tensor(f), name="w")
    assert a.is_tensor(p) and a.dtype_name(p) == "float32"
    assert adapter_for(p).name == "mindspore" and adapter_for(ms.nn.Dense(2, 2)).name == "mindspore"
    # snapshot copies: later in-place changes do not reach the stored payload
    x = ms.Tensor(np.arange(4, dtype=np.float32))
    thunk, _ = a.snapshot(x)
    x[0] = 100.0
    assert thunk()[0] == 0.0


def test_facts_and_seed():
    a = MindSporeAdapter()
    f = a.facts()
    assert f["framework"] == "mindspore" and f["framework_version"] == ms.__version__
    assert f["device"] == ms.get_context("device_target")
    assert f["execution_mode"] in ("PYNATIVE", "GRAPH")
    assert a.seed(7)["set_seed"] == 7 and ms.get_seed() == 7
    import mindspore.dataset as ds

    assert ds.config.get_seed() == 7


def test_run_facts_trigger_no_mindspore_warning() -> None:
    # reading Ascend-only context options on CPU makes MindSpore log a warning on every capture
    # (its logger writes to the process's stderr: a child process shows what a user sees)
    import subprocess
    import sys

    code = ("import mindspore as ms; ms.set_context(device_target='CPU'); "
            "from netparity.frameworks.registry import get_adapter; "
            "print(get_adapter('mindspore').facts()['framework'])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "mindspore", p.stderr[-500:]
    assert "ascend_config" not in p.stderr, p.stderr[-500:]
