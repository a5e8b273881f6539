"""A model nobody here wrote (torchvision's MobileNetV2) against a port that organises its module
tree differently (conv + norm + activation groups flattened into the parent sequence: every block
index shifted by two, layers renamed). Alignment must pair modules by the parameters they own:
the faithful port passes, and a one-layer mistake is named at that layer."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

from tests.corpus.models import (  # noqa: E402
    copy_weights_in_order,
    flat_mobilenet_v2,
    torchvision_models,
)

import netparity  # noqa: E402
from netparity.ckpt.mapping import map_names, state_of  # noqa: E402


def _capture_step(model, path, x, y):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()
    with netparity.capture(model, str(path), payload="tensors", optimizer=opt,
                           level="both") as cap:
        torch.manual_seed(1)  # the same dropout mask on both sides
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        cap.record_loss(loss)
        cap.step()


@pytest.fixture(scope="module")
def pair_traces(tmp_path_factory):
    tvm = torchvision_models()
    torch.manual_seed(0)
    ref = tvm.mobilenet_v2(num_classes=10)
    x, y = torch.randn(2, 3, 64, 64), torch.randint(0, 10, (2,))
    out = {}
    for name, eps in (("clean", 1e-5), ("bn-eps", 1e-3)):
        cand = flat_mobilenet_v2(10, stem_bn_eps=eps)
        copy_weights_in_order(ref, cand)
        d = tmp_path_factory.mktemp(name)
        _capture_step(cand, d / "cand", x, y)
        out[name] = d / "cand"
    out["ref"] = tmp_path_factory.mktemp("ref") / "ref"
    _capture_step(ref, out["ref"], x, y)
    return out


def test_checkpoint_map_pairs_a_reorganised_tree_from_the_two_files_alone():
    tvm = torchvision_models()
    ref, cand = tvm.mobilenet_v2(num_classes=10), flat_mobilenet_v2(10)
    rs, cs = state_of(ref), state_of(cand)
    truth = dict(zip(rs, cs))  # both models create their tensors in the same order
    nm = map_names(dict(rs), dict(cs))  # plain dicts: no model, names/shapes/order only
    got = nm.ref_to_cand()
    wrong = [r for r, c in got.items() if truth[r] != c]
    assert not wrong, wrong[:5]
    missing = [r for r in truth if r not in got and not r.endswith("num_batches_tracked")]
    assert not missing and not nm.ambiguous, (missing[:5], list(nm.ambiguous)[:5])


@pytest.mark.parametrize("level", ["module", "both"])
def test_faithful_port_with_another_tree_passes(pair_traces, level):
    r = netparity.compare(pair_traces["ref"], pair_traces["clean"], level=level)
    assert r, [(p.key, p.status, p.reason) for p in r.all_pairs() if p.status != "pass"][:5]
    assert r.counts()["warn"] == 0
    # the blocks pair with their shifted counterparts, not by index
    by_module = {c.module: c.cand_module for c in r.calls if c.direction == "forward"
                 and c.level == "module"}
    assert by_module["features.1"] == "features.3"
    assert by_module["features.17"] == "features.19"
    assert by_module["features.1.conv.0.0"] == "features.3.dw.0"


@pytest.mark.parametrize("level", ["module", "both"])
def test_one_layer_mistake_is_named_at_that_layer(pair_traces, level):
    r = netparity.compare(pair_traces["ref"], pair_traces["bn-eps"], level=level)
    assert not r
    d = r.first_divergence
    assert d.verdict == "introduced" and d.status == "fail"
    assert (d.module, d.cand_module) == ("features.0.1", "features.1")
    assert np.isfinite(d.metrics["max_abs"])
