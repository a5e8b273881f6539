"""The fix the scan prints for a line is code that runs in MindSpore and computes PyTorch's
numbers (issue 32): for each argument form seen in real code, the torch call is scanned, the
printed ``set a=b, c=d`` settings are applied to the MindSpore counterpart with the table's
argument renames, both run on the same input and the outputs are compared."""

from __future__ import annotations

import ast
import re
from typing import Any

import numpy as np
import pytest

from netparity.scan.analyze import classify, load_table
from netparity.scan.static import module_names, scan_source

pytestmark = pytest.mark.mindspore

ms = pytest.importorskip("mindspore")
torch = pytest.importorskip("torch")


def _finding(src: str) -> Any:
    table = load_table()
    known = set(table["apis"])
    (use,) = scan_source("import torch\nfrom torch import nn\n" + src, "t.py", known,
                         module_names(known))
    return use, classify(use, table, {})


def _settings(note: str) -> dict[str, Any]:
    """Every ``set a=b, c=d:`` the note prints, as keyword arguments."""
    out: dict[str, Any] = {}
    for m in re.finditer(r"set ((?:\w+=(?:\([^)]*\)|'[^']*'|[^,:;]+)(?:, )?)+)", note):
        call = ast.parse(f"f({m.group(1).rstrip(', ')})", mode="eval").body
        assert isinstance(call, ast.Call)
        out.update({k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg})
    return out


def _ms_layer(src: str) -> tuple[Any, Any]:
    """The torch layer written in ``src`` and its MindSpore port as the scan advises."""
    use, f = _finding(src)
    entry = load_table()["apis"][use.name]
    renames = entry.get("args") or {}
    kwargs = {renames.get(k, k): a.value for k, a in use.kwargs.items()
              if k not in ("padding", "bias")}
    kwargs.update(_settings(f.note))
    ms_cls = eval(entry["target"], {"mindspore": ms})  # noqa: S307 -- a dotted name
    tlayer = eval(src, {"nn": torch.nn, "torch": torch})  # noqa: S307 -- the test's own line
    # positional arguments up to padding (MindSpore's next parameter is pad_mode); padding
    # itself is written as the printed settings say
    npos = min(t.get("pos", t.get("padding_pos", 9)) for t in entry["traps"])
    return tlayer, ms_cls(*[a.value for a in use.args[:npos]], **kwargs)


FORMS = [
    # (torch line, input shape)
    ("nn.Conv2d(2, 3, 5, padding=(2, 2))", (1, 2, 7, 7)),
    ("nn.Conv2d(2, 3, (3, 5), padding=(1, 2))", (1, 2, 7, 7)),
    ("nn.Conv2d(2, 3, 3, stride=2, padding=1)", (1, 2, 7, 7)),
    ("nn.Conv2d(2, 3, 1)", (1, 2, 7, 7)),
    ("nn.Conv2d(2, 3, 3, padding='same', bias=False)", (1, 2, 7, 7)),
    ("nn.Conv1d(2, 3, 5, padding=(2,))", (1, 2, 9)),
    ("nn.Conv3d(2, 3, 3, padding=(1, 1, 1))", (1, 2, 5, 5, 5)),
    ("nn.MaxPool2d(3, 2, ceil_mode=True)", (1, 2, 8, 8)),
    ("nn.MaxPool2d(kernel_size=3, stride=2, padding=1)", (1, 2, 7, 7)),
    ("nn.MaxPool2d(3, 2, 1, ceil_mode=True)", (1, 2, 8, 8)),
    ("nn.MaxPool2d(2)", (1, 2, 8, 8)),
    ("nn.AvgPool2d(3, 2, 1)", (1, 2, 7, 7)),
    ("nn.AvgPool2d(2, ceil_mode=True)", (1, 2, 7, 7)),
]


@pytest.mark.parametrize(("src", "shape"), FORMS, ids=[f[0] for f in FORMS])
def test_printed_fix_runs_and_matches_pytorch(src: str, shape: tuple[int, ...]) -> None:
    tlayer, mlayer = _ms_layer(src)
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    if hasattr(tlayer, "weight"):
        mlayer.weight.set_data(ms.Tensor(tlayer.weight.detach().numpy().reshape(
            mlayer.weight.shape)))
        if tlayer.bias is not None:
            mlayer.bias.set_data(ms.Tensor(tlayer.bias.detach().numpy()))
    want = tlayer(torch.from_numpy(x)).detach().numpy()
    got = mlayer(ms.Tensor(x)).asnumpy()
    assert got.shape == want.shape, src
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=src)


def test_semantics_behind_the_traps_hold() -> None:
    """Traps (and their absence) measured by running both sides."""
    x = np.random.default_rng(1).normal(size=(2, 3, 4, 4)).astype(np.float32)
    tx, mx = torch.from_numpy(x), ms.Tensor(x)
    # CrossEntropyLoss(label_smoothing): the same loss (a false trap before)
    logits = np.random.default_rng(2).normal(size=(4, 5)).astype(np.float32)
    y = np.array([0, 1, 2, 3])
    want = torch.nn.CrossEntropyLoss(label_smoothing=0.1)(torch.from_numpy(logits),
                                                          torch.from_numpy(y)).item()
    got = ms.nn.CrossEntropyLoss(label_smoothing=0.1)(ms.Tensor(logits),
                                                      ms.Tensor(y.astype(np.int32))).asnumpy()
    assert abs(float(got) - want) < 1e-5
    # InstanceNorm2d on CPU: GroupNorm(C, C, affine=False) is PyTorch's InstanceNorm2d(C)
    _, f = _finding("nn.InstanceNorm2d(3)")
    assert f.status == "trap" and "set affine=False" in f.note
    got = ms.nn.GroupNorm(3, 3, affine=False)(mx).asnumpy()
    np.testing.assert_allclose(got, torch.nn.InstanceNorm2d(3)(tx).numpy(), atol=1e-4)
    # torch.var / Tensor.std: unbiased by default; the MindSpore CPU forms need ddof=1
    np.testing.assert_allclose(ms.ops.var(mx, 1, ddof=1).asnumpy(), tx.var(1).numpy(),
                               rtol=1e-5)
    np.testing.assert_allclose(mx.std(1, 1).asnumpy(), tx.std(1).numpy(), rtol=1e-5)
    assert not np.allclose(ms.ops.var(mx, 1).asnumpy(), tx.var(1).numpy())
    # leaky_relu: ops.leaky_relu's default slope is 0.2, the advice alpha=0.01 matches
    np.testing.assert_allclose(ms.ops.leaky_relu(mx, 0.01).asnumpy(),
                               torch.nn.functional.leaky_relu(tx).numpy(), rtol=1e-6)
    # rms_norm composition printed for F.rms_norm
    w = np.linspace(0.5, 1.5, 4).astype(np.float32)
    eps = 1e-6
    mw = ms.Tensor(w)
    got = (mx * ms.ops.rsqrt(mx.pow(2).mean(-1, keep_dims=True) + eps) * mw).asnumpy()
    want = torch.nn.functional.rms_norm(tx, (4,), torch.from_numpy(w), eps).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
