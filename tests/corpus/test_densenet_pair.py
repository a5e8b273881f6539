"""A real model-zoo pair organised differently across a container boundary (see
:mod:`tests.corpus.densenet_pair`): torchvision's DenseNet applies its final ReLU after
``features``, mindcv's inside it. The faithful pair passes at module level and at
``--level both`` (the moved ReLU is not a divergence: the consumer sees the same values once it
is applied); a BatchNorm epsilon slip is named in its dense layer, and a ReLU the reference
never applies is named where it is added."""

from __future__ import annotations

import importlib.util

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed")
pytest.importorskip("mindspore", reason="MindSpore is not installed")
if importlib.util.find_spec("mindcv") is None:
    pytest.skip("mindcv is not installed", allow_module_level=True)

from tests.corpus import densenet_pair  # noqa: E402

import netparity  # noqa: E402


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("densenet")
    ref = densenet_pair.torch_model()
    densenet_pair.capture_torch(ref, root / "ref", level="both")
    for bug in (None, *densenet_pair.BUGS):
        cand = densenet_pair.zoo_model(bug)
        assert densenet_pair.load_weights(ref, cand) == 56  # every tensor of the zoo model
        densenet_pair.capture_zoo(cand, root / f"cand-{bug}", level="both")
    return root


@pytest.mark.parametrize("level", ["module", "both"])
def test_faithful_densenet_pair_passes_with_the_final_relu_moved_out_of_features(traces, level):
    r = netparity.compare(traces / "ref", traces / "cand-None", level=level)
    assert r, r.first_divergence
    assert r.counts()["warn"] == 0 and r.counts()["fail"] == 0
    out = [p for p in r.pairs if p.module == "features" and p.kind == "module"
           and p.role == "output"]
    assert [p.metrics.get("moved_op") for p in out] == ["relu on the reference"]
    assert any("parameter-free op" in n for n in r.notes)


@pytest.mark.parametrize("level", ["module", "both"])
@pytest.mark.parametrize("bug", densenet_pair.BUGS)
def test_mistake_in_the_zoo_densenet_is_named_where_it_is_made(traces, bug, level):
    r = netparity.compare(traces / "ref", traces / f"cand-{bug}", level=level)
    assert not r
    d = r.first_divergence
    assert (d.module, d.cand_module) == densenet_pair.FOUND_AT[bug]
    assert d.verdict == "introduced" and d.status == "fail"
