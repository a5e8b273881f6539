"""What benchmarks/scan_accuracy.py found wrong on timm, fairseq 0.12.2 and yolov5 7.0.14 (each
reported API judged by running it on MindSpore 2.10 CPU), fixed: the scan's verdict for each line
below, and the fact behind it measured on both frameworks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from netparity.scan.analyze import scan_paths

pytestmark = pytest.mark.mindspore

LINES = {  # source line -> (status, advised target prefix or "", a word the advice must hold)
    "torch.transpose(x, 0, 1)": ("mapped", "mindspore.ops.swapaxes", ""),
    "torch.full((2, 3), 1.5)": ("trap", "mindspore.ops.full", "dtype"),
    "x.size(1)": ("trap", "mindspore.Tensor.shape", "x.shape[d]"),
    "torch.equal(x, y)": ("missing", "", "ops.equal(a, b).all()"),
    "torch.diag(x)": ("trap", "mindspore.ops.diag", "ops.diagonal"),
    "torch.normal(m, s)": ("trap", "mindspore.ops.normal", "shape first"),
    "x.flip(1)": ("trap", "mindspore.Tensor.flip", "tuple"),
    "x.unfold(1, 2, 1)": ("missing", "", "narrow"),
    "torch.nn.functional.fold(x, 4, 2)": ("trap", "mindspore.ops.fold", "int32 Tensor"),
    "torch.nn.utils.clip_grad_norm_(ps, 1.0)": ("trap", "mindspore.ops.clip_by_global_norm",
                                                "returns the clipped"),
    "torch.var_mean(x)": ("trap", "mindspore.ops.var_mean", "ddof=1"),
    "torch.nn.LSTMCell(3, 4)": ("trap", "mindspore.nn.LSTMCell", "hx="),
    "torch.nn.MaxPool3d(3)": ("trap", "mindspore.nn.MaxPool3d", "stride"),
    "act = torch.nn.GELU": ("trap", "mindspore.nn.GELU", "approximate=False"),
    "isinstance(m, torch.nn.GELU)": ("mapped", "mindspore.nn.GELU", ""),
}


def test_fixed_verdicts_on_cpu(tmp_path: Path) -> None:
    pytest.importorskip("mindspore")
    for i, line in enumerate(LINES):
        (tmp_path / f"t{i}.py").write_text(  # x: a tensor the scan can tell (a method)
            f"import torch\ndef f(x: torch.Tensor, y, m, s, ps):\n    {line}\n")
    res = scan_paths([str(tmp_path)], device="cpu", follow=False)
    by_file = {Path(f.file).name: f for f in res.findings if f.name != "torch.Tensor"}
    for i, (line, (status, target, word)) in enumerate(LINES.items()):
        f = by_file[f"t{i}.py"]
        assert (f.status, f.target.split(" (or ")[0] if target else "") == (status, target), line
        assert word in f.note, (line, f.note)
        assert not f.blocking, line


def test_the_facts_behind_them() -> None:
    ms = pytest.importorskip("mindspore")
    torch = pytest.importorskip("torch")
    from mindspore import Tensor, ops

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    # ops.full infers Int64 from 1.5 -> all ones; with dtype it is PyTorch's 1.5
    assert ops.full((2, 3), 1.5).asnumpy().max() == 1
    np.testing.assert_array_equal(ops.full((2, 3), 1.5, dtype=ms.float32).asnumpy(),
                                  torch.full((2, 3), 1.5).numpy())
    # torch.transpose swaps two dims: ops.swapaxes, not ops.transpose (a permutation)
    np.testing.assert_array_equal(ops.swapaxes(Tensor(x), 0, 1).asnumpy(),
                                  torch.transpose(torch.from_numpy(x), 0, 1).numpy())
    # Tensor.size is the element count in MindSpore
    assert Tensor(x).size == 6 and Tensor(x).shape[1] == torch.from_numpy(x).size(1)
    # ops.equal is element-wise; torch.equal one bool
    assert ops.equal(Tensor(x), Tensor(x)).shape == (2, 3) and torch.equal(
        torch.from_numpy(x), torch.from_numpy(x))
    # diag of a 2-D input: PyTorch extracts, ops.diag builds
    assert ops.diag(Tensor(x)).shape == (2, 3, 2, 3)
    np.testing.assert_array_equal(ops.diagonal(Tensor(x)).asnumpy(),
                                  torch.diag(torch.from_numpy(x)).numpy())
    # var_mean: ops divides by N unless ddof=1
    v, _ = ops.var_mean(Tensor(x), ddof=1)
    tv, _ = torch.var_mean(torch.from_numpy(x))
    np.testing.assert_allclose(v.asnumpy(), tv.numpy(), rtol=1e-6)
    # nn.GELU: tanh form by default
    g = ms.nn.GELU()(Tensor(x)).asnumpy()
    exact = ms.nn.GELU(approximate=False)(Tensor(x)).asnumpy()
    want = torch.nn.GELU()(torch.from_numpy(x)).numpy()
    assert not np.allclose(g, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(exact, want, rtol=1e-5, atol=1e-6)
    # Tensor.unfold(dim, size, step) windows: the printed composition
    t = torch.arange(10.0).reshape(2, 5)
    m = Tensor(t.numpy())
    comp = ops.stack([m.narrow(1, i, 2) for i in range(0, 5 - 2 + 1, 1)], 1)
    np.testing.assert_array_equal(comp.asnumpy(), t.unfold(1, 2, 1).numpy())
