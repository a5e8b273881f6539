"""Plain ``compare`` with a MindSpore reference calibrates itself too (issue 28, deliver 0): the
capture records each leaf ``mindspore.nn`` Cell's settings, and compare replays the Cell's math
in float64. A wrong replay would clear real differences or invent them, so each Cell kind's
replay is held to MindSpore's own float32 output, and the direction MindSpore -> PyTorch is
checked end to end on an independent ViT port."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ms = pytest.importorskip("mindspore", reason="MindSpore is not installed")
torch = pytest.importorskip("torch")

from netparity.compare.noise import FLOOR_EPS, unit_roundoff  # noqa: E402
from netparity.frameworks.mindspore.capture import leaf_meta  # noqa: E402
from netparity.frameworks.torch.leafmods import build_leaf, run_leaf  # noqa: E402
from netparity.precision.engine import normwise  # noqa: E402


def _cells() -> list[tuple[str, object, tuple[int, ...]]]:
    nn = ms.nn
    return [
        ("conv same stride 2", nn.Conv2d(3, 8, 3, stride=2, pad_mode="same", has_bias=True),
         (2, 3, 9, 8)),
        ("conv same even kernel", nn.Conv2d(3, 4, 4, pad_mode="same"), (2, 3, 7, 7)),
        ("conv pad 1 dilated", nn.Conv2d(4, 4, 3, pad_mode="pad", padding=1, dilation=2,
                                         group=2, has_bias=True), (1, 4, 10, 10)),
        ("conv pad (t,b,l,r)", nn.Conv2d(3, 4, 3, pad_mode="pad", padding=(1, 1, 2, 2)),
         (1, 3, 6, 6)),
        ("conv valid", nn.Conv2d(3, 4, 2, stride=2, pad_mode="valid"), (2, 3, 8, 8)),
        ("dense", nn.Dense(16, 5), (4, 16)),
        ("layernorm", nn.LayerNorm((16,), epsilon=1e-6), (3, 7, 16)),
        ("batchnorm train", nn.BatchNorm2d(4), (3, 4, 5, 5)),
        ("gelu erf", nn.GELU(approximate=False), (4, 9)),
        ("gelu tanh", nn.GELU(), (4, 9)),
        ("relu", nn.ReLU(), (4, 9)),
        ("silu", nn.SiLU(), (4, 9)),
    ]


@pytest.mark.parametrize("i", range(12), ids=[c[0] for c in _cells()])
def test_each_cell_kind_replays_mindspores_own_output(i):
    """The float64 replay of the Cell's recorded settings makes MindSpore's float32 output
    again to a few units of float32 -- the bound plain compare requires before it trusts it."""
    name, cell, shape = _cells()[i]
    cell.set_train(True)
    x = np.random.default_rng(i).standard_normal(shape).astype(np.float32)
    out = cell(ms.Tensor(x)).asnumpy()
    meta = leaf_meta(cell)
    params = {n: p.asnumpy() for n, p in cell.parameters_and_names(expand=False)}
    mod = build_leaf(meta, params)
    assert mod is not None, (name, meta)
    r64 = run_leaf(mod, [x])
    assert r64 is not None and r64.shape == out.shape, name
    assert normwise(out.astype(np.float64), r64) <= FLOOR_EPS * unit_roundoff("float32"), name


def test_a_wrong_setting_is_not_replayed_as_the_reference():
    """The self-check is what keeps a mismatched replay out: the same Cell with a recorded
    epsilon 100x off does not make the reference's output again."""
    cell = ms.nn.LayerNorm((16,), epsilon=1e-2)
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32) * 0.05
    out = cell(ms.Tensor(x)).asnumpy()
    meta = leaf_meta(cell)
    meta["attrs"]["epsilon"] = 1e-4
    r64 = run_leaf(build_leaf(meta, {n: p.asnumpy() for n, p in
                                     cell.parameters_and_names(expand=False)}), [x])
    assert normwise(out.astype(np.float64), r64) > FLOOR_EPS * unit_roundoff("float32")


def test_cells_with_children_and_unknown_kinds_are_not_replayed():
    nn = ms.nn
    assert leaf_meta(nn.SequentialCell([nn.ReLU()])) == {}
    assert build_leaf(leaf_meta(nn.Dense(3, 4, activation="relu")),
                      {"weight": np.ones((4, 3)), "bias": np.ones(4)}) is None
    assert build_leaf({"framework": "mindspore", "class": "os.system", "attrs": {},
                       "training": True, "params": []}, {}) is None


@pytest.mark.slow
@pytest.mark.parametrize("bug", [None, "ln-eps"], ids=["faithful", "ln-eps"])
def test_mindspore_reference_against_an_independent_pytorch_port(tmp_path, bug):
    """MindSpore reference, PyTorch candidate (the ViT ports of the corpus): the faithful pair
    is no FAIL of plain compare; LayerNorm eps 1e-7 in the PyTorch candidate is named
    introduced at the first norm by replay of the MindSpore Cell."""
    from tests.corpus import ms_vit_spec, vit_spec

    import netparity
    from netparity.workflow.step import run_step_parity

    run_step_parity(str(Path(ms_vit_spec.__file__)), str(Path(vit_spec.__file__)),
                    tmp_path / "s", steps=2, cand_options={"bug": bug}, run_eval=False,
                    free_running=False)
    r = netparity.compare(tmp_path / "s" / "ref", tmp_path / "s" / "cand")
    replay = r.settings.get("leaf_replay", {})
    introduced = [(d["step"], d["module"]) for d in replay.get("introduced", [])]
    if bug is None:
        assert r.status != "fail" and introduced == [], (r.first_divergence, introduced)
    else:
        assert r.status == "fail" and (1, "blocks.0.norm1") in introduced, introduced
