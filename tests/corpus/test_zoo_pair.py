"""A real model-zoo pair (see :mod:`tests.corpus.zoo_pair`): torchvision's MobileNetV2 against
``mindcv``'s, whose module tree is flattened and renamed and whose checkpoints list BatchNorm
tensors in another order. The weights convert through netparity's own mapping; the faithful pair
passes at module level with every block paired two places over, a one-layer mistake is named at
that layer, and ``netparity ckpt map`` pairs every tensor of the two checkpoint FILES."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
pytest.importorskip("mindspore", reason="MindSpore is not installed")
if importlib.util.find_spec("mindcv") is None:
    pytest.skip("mindcv is not installed", allow_module_level=True)

from tests.corpus import zoo_pair  # noqa: E402

import netparity  # noqa: E402
from netparity.cli import main  # noqa: E402

pytestmark = pytest.mark.slow  # three MindSpore captures of a full MobileNetV2: ~35 s


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo")
    ref = zoo_pair.torch_model()
    zoo_pair.capture_torch(ref, root / "ref")
    for bug in (None, *zoo_pair.BUGS):
        cand = zoo_pair.zoo_model(bug)
        assert zoo_pair.load_weights(ref, cand) == 262  # every tensor of the zoo model
        zoo_pair.capture_zoo(cand, root / f"cand-{bug}")
    return root


def test_faithful_zoo_pair_passes_with_blocks_paired_two_places_over(traces):
    r = netparity.compare(traces / "ref", traces / "cand-None")
    assert r, r.first_divergence
    assert r.counts()["warn"] == 0 and r.counts()["fail"] == 0
    by_module = {c.module: c.cand_module for c in r.calls if c.direction == "forward"}
    # a conv, its BatchNorm and its ReLU6 move together, two places over
    assert by_module["features.1"] == "features.3"
    assert [by_module[f"features.5.conv.1.{i}"] for i in range(3)] == [
        f"features.7.layers.{i}" for i in (3, 4, 5)]
    assert by_module["features.0.2"] == "features.2"
    assert by_module["features.17"] == "features.19"


@pytest.mark.parametrize("bug", zoo_pair.BUGS)
def test_one_layer_mistake_in_the_zoo_model_is_named_at_that_layer(traces, bug):
    r = netparity.compare(traces / "ref", traces / f"cand-{bug}")
    assert not r
    d = r.first_divergence
    assert (d.module, d.cand_module) == zoo_pair.FOUND_AT[bug]
    assert d.verdict == "introduced" and d.status == "fail"


def test_ckpt_map_pairs_every_tensor_of_the_two_checkpoint_files(tmp_path, capsys):
    import mindspore as ms

    ref, cand = zoo_pair.torch_model(), zoo_pair.zoo_model()
    torch.save(ref.state_dict(), tmp_path / "ref.pth")
    ms.save_checkpoint(cand, str(tmp_path / "cand.ckpt"))
    assert main(["ckpt", "map", str(tmp_path / "ref.pth"), str(tmp_path / "cand.ckpt"),
                 "-o", str(tmp_path / "m.json")]) == 0, capsys.readouterr()
    got = json.loads((tmp_path / "m.json").read_text())["params"]
    # the truth: both models create their layers in the same order; within a layer, by role
    role = {"gamma": "weight", "beta": "bias", "moving_mean": "running_mean",
            "moving_variance": "running_var"}

    def layers(names):
        out: dict[str, dict[str, str]] = {}
        for n in names:
            mod, _, leaf = n.rpartition(".")
            out.setdefault(mod, {})[role.get(leaf, leaf)] = n
        return list(out.values())

    rnames = [n for n in ref.state_dict() if not n.endswith("num_batches_tracked")]
    truth = {r[k]: c[k] for r, c in zip(layers(rnames), layers(cand.parameters_dict()))
             for k in r}
    assert len(truth) == 262 and got == truth
    os.remove(tmp_path / "ref.pth")
    os.remove(tmp_path / "cand.ckpt")
