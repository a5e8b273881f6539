"""PyTorch vs MindSpore, end to end: convert weights, capture one training step, compare.

For a small CNN (conv, batch-norm, ReLU, max-pool, linear) and a small transformer block
(embedding, layer-norm, explicit attention, GELU MLP), built the same way in both frameworks
(``cross_models.py``):

1. ``netparity ckpt convert model.pth model.ckpt --template init.ckpt`` (CLI) and
   ``mindspore.load_param_into_net`` with nothing missing;
2. one SGD training step captured on each side (``level="both"``, full tensors);
3. ``netparity compare`` (CLI) at module and op level: exit 0, every matched pair passes;
4. a seeded migration bug (stride-2 conv with ``pad_mode="same"``) is reported as the first
   divergence, at that conv, forward, *introduced*.

Real frameworks, no mocks. One module-scoped fixture per model runs the captures once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is needed for the cross-framework test")
ms = pytest.importorskip("mindspore", reason="MindSpore is needed for the cross-framework test")

import cross_models as cm  # noqa: E402  (needs the frameworks above)

import netparity  # noqa: E402

SRC = str(Path(__file__).resolve().parents[2] / "src")
LR = 0.1


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -m netparity ARGS`` the way a user would (a fresh process)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "netparity", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def _convert_weights(tnet: Any, mnet: Any, work: Path) -> None:
    """torch state dict -> .pth -> ``netparity ckpt convert`` -> .ckpt -> MindSpore net."""
    pth, tmpl, out = work / "model.pth", work / "init.ckpt", work / "model.ckpt"
    torch.save(tnet.state_dict(), pth)
    ms.save_checkpoint(mnet, str(tmpl))
    r = _cli("ckpt", "convert", str(pth), str(out), "--template", str(tmpl), cwd=work)
    assert r.returncode == 0, r.stdout + r.stderr
    not_loaded, ckpt_not_loaded = ms.load_param_into_net(mnet, ms.load_checkpoint(str(out)))
    assert not_loaded == [] and ckpt_not_loaded == []
    # The conversion really carried the values (not just names): every torch tensor is found.
    msd = {p.name: p.asnumpy() for p in mnet.get_parameters()}
    tsd = {k: v.detach().numpy() for k, v in tnet.state_dict().items()
           if not k.endswith("num_batches_tracked")}
    assert len(msd) == len(tsd)
    for name, v in tsd.items():
        assert any(m.shape == v.shape and np.array_equal(m, v) for m in msd.values()), name


def _torch_step(tnet: Any, x: np.ndarray, y: np.ndarray, run: Path) -> float:
    tnet.train()
    opt = torch.optim.SGD(tnet.parameters(), lr=LR)
    loss_fn = torch.nn.CrossEntropyLoss()
    with netparity.capture(tnet, run, level="both", payload="tensors", optimizer=opt) as cap:
        opt.zero_grad()
        loss = loss_fn(tnet(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        opt.step()
        cap.record_loss(loss)
        cap.step()
    return float(loss)


def _ms_step(mnet: Any, x: np.ndarray, y: np.ndarray, run: Path) -> float:
    mnet.set_train(True)
    opt = ms.nn.SGD(mnet.trainable_params(), learning_rate=LR)
    loss_fn = ms.nn.CrossEntropyLoss()

    def forward_fn(xx: Any, yy: Any) -> Any:
        return loss_fn(mnet(xx), yy)

    grad_fn = ms.value_and_grad(forward_fn, None, opt.parameters)
    with netparity.capture(mnet, run, level="both", payload="tensors", optimizer=opt) as cap:
        loss, grads = grad_fn(ms.Tensor(x), ms.Tensor(y.astype(np.int32)))
        opt(grads)
        cap.record_loss(loss)
        cap.step()
    return float(loss.asnumpy())


def _compare(ref: Path, cand: Path, level: str, work: Path) -> tuple[int, dict[str, Any], str]:
    out = work / f"compare-{level}.json"
    r = _cli("compare", str(ref), str(cand), "--level", level, "--json", str(out), "--quiet",
             cwd=work)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    return r.returncode, json.loads(out.read_text()), r.stdout


def run_pair(kind: str, work: Path, bug: str | None = None) -> dict[str, Any]:
    """Build, convert, capture one step on both sides; return the trace paths and losses."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    torch.manual_seed(0)
    ms.set_seed(0)
    if kind == "cnn":
        tnet, mnet = cm.torch_cnn(), cm.ms_cnn(bug=bug)
        rng = np.random.default_rng(0)
        x = rng.standard_normal(cm.CNN_IN).astype(np.float32)
        y = rng.integers(0, cm.CNN_CLASSES, cm.CNN_IN[0]).astype(np.int64)
    else:
        tnet, mnet = cm.torch_block(), cm.ms_block()
        rng = np.random.default_rng(0)
        x = rng.integers(0, cm.VOCAB, (2, cm.SEQ)).astype(np.int32)
        y = rng.integers(0, cm.TOK_CLASSES, 2).astype(np.int64)
    work.mkdir(parents=True, exist_ok=True)
    _convert_weights(tnet, mnet, work)
    tx = x.astype(np.int64) if kind == "block" else x
    tloss = _torch_step(tnet, tx, y, work / "ref")
    mloss = _ms_step(mnet, x, y, work / "cand")
    return {"ref": work / "ref", "cand": work / "cand", "tloss": tloss, "mloss": mloss,
            "work": work}
