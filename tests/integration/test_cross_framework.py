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
    with netparity.capture(tnet, str(run), level="both", payload="tensors", optimizer=opt) as cap:
        opt.zero_grad()
        loss = loss_fn(tnet(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        opt.step()
        cap.record_loss(loss)
        cap.step()
    return float(loss.detach())


def _ms_step(mnet: Any, x: np.ndarray, y: np.ndarray, run: Path) -> float:
    mnet.set_train(True)
    opt = ms.nn.SGD(mnet.trainable_params(), learning_rate=LR)
    loss_fn = ms.nn.CrossEntropyLoss()

    def forward_fn(xx: Any, yy: Any) -> Any:
        return loss_fn(mnet(xx), yy)

    grad_fn = ms.value_and_grad(forward_fn, None, opt.parameters)
    with netparity.capture(mnet, str(run), level="both", payload="tensors", optimizer=opt) as cap:
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
    js = json.loads(out.read_text())
    # the per-pair table is a Parquet file beside the JSON (pairs_file)
    from netparity.report.pairs_parquet import read_pairs

    js["pairs"] = read_pairs(work / js["pairs_file"], within=work)
    return r.returncode, js, r.stdout


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


# ---- fixtures: one conversion + capture + compare per model, shared by the tests ----------


def _run_and_compare(kind: str, work: Path, bug: str | None = None) -> dict[str, Any]:
    r = run_pair(kind, work, bug)
    for level in ("module", "op"):
        rc, js, text = _compare(r["ref"], r["cand"], level, work)
        r[level] = {"rc": rc, "json": js, "text": text}
    return r


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run_and_compare("cnn", tmp_path_factory.mktemp("cnn"))


@pytest.fixture(scope="module")
def block(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run_and_compare("block", tmp_path_factory.mktemp("block"))


@pytest.fixture(scope="module")
def cnn_bug(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run_and_compare("cnn", tmp_path_factory.mktemp("cnn_bug"), bug="same-pad")


def _ok(status: str) -> bool:
    # "warn": outside the elementwise tolerance but within the normwise cross-framework bound
    return status in ("pass", "warn")


def _summary(js: dict[str, Any]) -> str:
    u = js["unmatched"]
    return (f"{len(js['pairs'])} pairs, {len(js['params'])} params; unmatched "
            f"{len(u['calls_ref'])} calls ref / {len(u['calls_cand'])} cand, "
            f"{len(u['params_ref'])} params ref / {len(u['params_cand'])} cand, "
            f"{len(u['tensors'])} tensor-count differences")


def _check_module_level(r: dict[str, Any], expected_modules: set[str]) -> None:
    js = r["module"]["json"]
    assert r["module"]["rc"] == 0, r["module"]["text"]
    assert js["passed"] and js["first_divergence"] is None and js["first_backward"] is None
    calls = js["calls"]
    assert all(_ok(c["status"]) for c in calls)
    # every module of the network is matched, with the same path, forward and backward
    for direction in ("forward", "backward"):
        got = {c["module"] for c in calls if c["direction"] == direction}
        assert expected_modules <= got, (direction, expected_modules - got)
        assert all(c["module"] == c["cand_module"] for c in calls if c["direction"] == direction)
    assert all(_ok(p["status"]) for p in js["pairs"]), _summary(js)
    # parameter gradients and updated parameters (buffers included) are all compared and pass
    kinds = Counter(p["kind"] for p in js["params"])
    assert kinds["param"] >= kinds["grad"] > 0
    assert len(js["loss"]) == 1 and _ok(js["loss"][0]["status"])
    assert all(_ok(p["status"]) for p in js["params"])
    u = js["unmatched"]
    assert u["calls_ref"] == [] and u["calls_cand"] == [] and u["params_cand"] == []
    # PyTorch's num_batches_tracked has no MindSpore counterpart; nothing else is left over
    assert all(p["name"].endswith("num_batches_tracked")
               for p in u["params_ref"])
    print(f"module level: {_summary(js)}")


def _check_op_level(r: dict[str, Any], expected_ops: set[str], all_pairs: bool,
                    layouts: frozenset[str] = frozenset()) -> None:
    js = r["op"]["json"]
    calls = js["calls"]
    # MindSpore's op capture sees Python-called primitives and Tensor arithmetic in forward
    # only: its backward primitives run in the C++ grad executor and tensor reductions/views
    # (x.sum(), x.reshape()) dispatch in C++ (docs/capture-mindspore.md). So every matched op
    # call is forward, and the PyTorch backward ops (and aten glue like t/view/detach) are left
    # unmatched.
    assert calls and all(c["direction"] == "forward" for c in calls)
    assert all(_ok(c["status"]) for c in calls), [c for c in calls if not _ok(c["status"])]
    assert js["first_divergence"] is None and js["first_backward"] is None
    got = {c["op"] for c in calls} | {c["cand_op"] for c in calls}
    assert expected_ops <= got, expected_ops - got
    outs = [p for p in js["pairs"] if p["role"] == "output"]
    assert outs and all(_ok(p["status"]) for p in outs)
    assert all(_ok(p["status"]) for p in js["params"])  # same params/grads as module level
    unmatched_ref = Counter(c["direction"] for c in js["unmatched"]["calls_ref"])
    unmatched_cand = Counter(c["direction"] for c in js["unmatched"]["calls_cand"])
    assert unmatched_ref["backward"] > 0 and unmatched_cand.get("backward", 0) == 0
    if all_pairs:
        # ... so the op-level verdict is INCOMPLETE, not PASS: the candidate holds no backward
        # (nor update) op records (no verdict on missing evidence); every pair compared passes
        assert r["op"]["rc"] == 1 and js["status"] == "incomplete", r["op"]["text"]
        assert r["op"]["text"].startswith("INCOMPLETE: candidate has no backward op records")
        assert all(_ok(p["status"]) for p in js["pairs"])
        seen = {(p.get("metrics") or {}).get("layout") for p in js["pairs"]}
        assert layouts <= seen  # layout conventions recognised, not silently ignored
    print(f"op level: {_summary(js)}; unmatched ref by direction {dict(unmatched_ref)}, "
          f"cand {dict(unmatched_cand)}")


CNN_MODULES = {"conv1", "bn1", "relu1", "pool1", "conv2", "relu2", "pool2", "flatten", "fc"}
BLOCK_MODULES = {"emb", "ln1", "attn", "attn.q", "attn.k", "attn.v", "attn.softmax", "attn.proj",
                 "ln2", "mlp", "mlp.fc1", "mlp.act", "mlp.fc2", "head"}


def test_cnn_losses_agree_after_weight_conversion(cnn: dict[str, Any]) -> None:
    assert cnn["mloss"] == pytest.approx(cnn["tloss"], rel=1e-5)


def test_cnn_module_level_every_pair_passes(cnn: dict[str, Any]) -> None:
    _check_module_level(cnn, CNN_MODULES)
    # conv1's bias sits before a training-mode batch norm: its gradient is zero in exact
    # arithmetic, rounding noise on each side, and passes as such (not as agreement)
    (g,) = [p for p in cnn["module"]["json"]["params"]
            if p["kind"] == "grad" and p["module"].endswith("conv1.bias")]
    assert g["status"] == "pass" and "rounding noise" in g["reason"], g


def test_cnn_op_level_every_matched_pair_passes(cnn: dict[str, Any]) -> None:
    _check_op_level(cnn, {"conv", "batch_norm", "relu", "max_pool"}, all_pairs=True)
    calls = {(c["module"], c["op"]): c for c in cnn["op"]["json"]["calls"]}
    # aten.convolution(x, w, b) is matched with MindSpore's Conv2D + BiasAdd as one group
    assert calls[("conv2", "conv")]["cand_op"] == "conv+add"
    # batch norm: the running statistics going in are the values before the update on both
    # sides (MindSpore's op hook runs after the primitive updated them in place)
    bn_in = [p for p in cnn["op"]["json"]["pairs"]
             if p["module"] == "bn1" and p["op"] == "batch_norm" and p["role"] == "input"]
    assert len(bn_in) == 5 and all(p["status"] == "pass" for p in bn_in)


def test_block_losses_agree_after_weight_conversion(block: dict[str, Any]) -> None:
    assert block["mloss"] == pytest.approx(block["tloss"], rel=1e-5)


def test_block_module_level_every_pair_passes(block: dict[str, Any]) -> None:
    _check_module_level(block, BLOCK_MODULES)


# Not "gelu": MindSpore's exact GELU is several operators (Sqrt, Div and Erf primitives, then
# x * 0.5 * (1 + erf) as Tensor operators) against one aten.gelu; the test does not require them
# to group (mlp.act is compared at module level). The Dense layers pair
# aten.addmm with BiasAdd (same output); MatMul stays unmatched because addmm takes the bias as
# its first input, so the N:M rule (first inputs and last outputs agree) does not apply.
BLOCK_OPS = {"layer_norm", "softmax", "matmul", "linear", "embedding", "mean"}


def test_block_op_level_matched_outputs_pass(block: dict[str, Any]) -> None:
    _check_op_level(block, BLOCK_OPS, all_pairs=False)


# Two op-level *input* pairs differ by layout convention, not value: aten.embedding's ids [2, 6]
# vs the [12] ids MindSpore's Embedding passes to Gather, and attn.k's weight as aten.mm sees it
# (W^T) vs MatMul's W with transpose_b=True. compare recognises both (metrics["layout"]).
def test_block_op_level_every_matched_pair_passes(block: dict[str, Any]) -> None:
    _check_op_level(block, BLOCK_OPS, all_pairs=True,
                    layouts=frozenset({"reshaped", "transposed"}))


def test_same_pad_bug_is_found_at_the_conv_that_introduces_it(cnn_bug: dict[str, Any]) -> None:
    for level in ("module", "op"):
        res = cnn_bug[level]
        assert res["rc"] == 1, res["text"]
        d = res["json"]["first_divergence"]
        assert (d["module"], d["direction"], d["verdict"]) == ("conv2", "forward", "introduced")
        assert d["op"] == "conv" and d["status"] == "fail"
        # everything before the seeded layer still passes
        before = [c for c in res["json"]["calls"]
                  if c["direction"] == "forward" and c["module"] in {"conv1", "bn1", "relu1",
                                                                     "pool1"}]
        assert before and all(_ok(c["status"]) for c in before)


# ---- regression tests for the library fixes this end-to-end test needed ------------------


def test_torch_op_capture_records_batch_norm_buffers_after_the_update(tmp_path: Path) -> None:
    """native_batch_norm updates running stats without bumping the version counter."""
    from netparity.trace import open_trace

    torch.manual_seed(0)
    bn = torch.nn.BatchNorm1d(3)
    opt = torch.optim.SGD(bn.parameters(), lr=0.1)
    x = torch.randn(4, 3) * 2 + 1
    with netparity.capture(bn, str(tmp_path / "t"), level="op", payload="tensors",
                           optimizer=opt) as cap:
        loss = bn(x).pow(2).sum()
        loss.backward()
        opt.step()
        cap.step()
    tr = open_trace(tmp_path / "t")
    (rm,) = tr.records(kind="param", name="running_mean")
    np.testing.assert_array_equal(tr.tensor(rm), bn.running_mean.numpy())
    assert np.abs(bn.running_mean.numpy()).max() > 0.01  # it did move
    # the seed gradient of backward() (ones_like) is a backward op, not a forward one
    seeds = tr.records(kind="op", op="ones_like")
    assert seeds and all(r.direction == "backward" for r in seeds)
