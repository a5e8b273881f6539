"""Issue 32, "done when": a scan of the whole installed timm package exits 0 (nothing blocks the
port on CPU) and its default roll-up fits a screen; the CPU forms the scan advises instead of
the timm blockers it used to report run on MindSpore CPU and compute PyTorch's numbers."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from netparity.cli import main

pytestmark = pytest.mark.mindspore


@pytest.mark.slow
def test_timm_scan_fits_a_screen_and_nothing_blocks(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mindspore")
    spec = importlib.util.find_spec("timm")  # (does not import timm)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("timm is not installed")
    timm_dir = Path(next(iter(spec.submodule_search_locations)))
    monkeypatch.setenv("COLUMNS", "80")  # a plain terminal: the narrowest case
    assert main(["scan", str(timm_dir)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) <= 60, len(lines)
    assert all(len(line) <= 80 for line in lines)
    assert "0 block the port" in " ".join(lines[:3])
    assert "more APIs" in out and "--detail" in out


def test_cpu_forms_of_former_timm_blockers_run_and_agree() -> None:
    """What the table advises on CPU for the 11 APIs that blocked timm's scan, run both sides."""
    ms = pytest.importorskip("mindspore")
    torch = pytest.importorskip("torch")
    from mindspore import Tensor, ops

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 6)).astype(np.float32)
    tx, mx = torch.from_numpy(x), Tensor(x)
    close = np.testing.assert_allclose
    # torch.roll -> ops.cat((x.narrow(d, n - s, s), x.narrow(d, 0, n - s)), d)
    for s, d in ((1, 1), (2, 2), (-1, 1), (7, 1)):
        n = x.shape[d]
        k = s % n
        got = ops.cat((mx.narrow(d, n - k, k), mx.narrow(d, 0, n - k)), d) if k else mx
        close(got.asnumpy(), torch.roll(tx, s, d).numpy())
    # F.normalize -> x / ops.norm(x, ord=p, dim=dim, keepdim=True).clamp(min=eps)
    x0 = x.copy()
    x0[0, 0] = 0.0  # a zero row: the eps clamp matters
    got = Tensor(x0) / ops.norm(Tensor(x0), ord=2, dim=-1, keepdim=True).clamp(min=1e-12)
    close(got.asnumpy(), torch.nn.functional.normalize(torch.from_numpy(x0), dim=-1).numpy(),
          rtol=1e-5, atol=1e-7)
    # F.layer_norm -> ops.LayerNorm(-k, -k, epsilon=eps)(x, w, b)[0], eps set explicitly
    w, b = rng.normal(size=6).astype(np.float32), rng.normal(size=6).astype(np.float32)
    got = ops.LayerNorm(-1, -1, epsilon=1e-5)(mx, Tensor(w), Tensor(b))[0]
    want = torch.nn.functional.layer_norm(tx, (6,), torch.from_numpy(w), torch.from_numpy(b))
    close(got.asnumpy(), want.numpy(), rtol=1e-4, atol=1e-5)
    # einsum 'bij,bjk->bik' -> ops.bmm
    y = rng.normal(size=(2, 6, 3)).astype(np.float32)
    close(ops.bmm(mx, Tensor(y)).asnumpy(),
          torch.einsum("bij,bjk->bik", tx, torch.from_numpy(y)).numpy(), rtol=1e-5, atol=1e-5)
    # masked_fill_ / clamp_ -> out of place
    mask = x > 0.3
    close(mx.masked_fill(Tensor(mask), 0.0).asnumpy(),
          tx.clone().masked_fill_(torch.from_numpy(mask), 0.0).numpy())
    close(mx.clamp(-0.5, 0.5).asnumpy(), tx.clone().clamp_(-0.5, 0.5).numpy())
    # new_full -> ops.full(size, v, dtype=x.dtype)
    got = ops.full((3, 2), 1.5, dtype=mx.dtype)
    close(got.asnumpy(), tx.new_full((3, 2), 1.5).numpy())
    assert got.dtype == ms.float32
    # normal_ / uniform_ / bernoulli_ -> ops.normal / ops.uniform / ops.bernoulli (statistics)
    big = (200, 200)
    n = ops.normal(big, Tensor(1.0), Tensor(0.02)).asnumpy()
    assert n.shape == big and abs(n.mean() - 1.0) < 0.002 and abs(n.std() - 0.02) < 0.002
    u = ops.uniform(big, Tensor(-0.1), Tensor(0.3)).asnumpy()
    assert u.min() >= -0.1 and u.max() < 0.3 and abs(u.mean() - 0.1) < 0.005
    bern = ops.bernoulli(Tensor(np.zeros(big, np.float32)), p=0.25).asnumpy()
    assert set(np.unique(bern)) <= {0.0, 1.0} and abs(bern.mean() - 0.25) < 0.01
