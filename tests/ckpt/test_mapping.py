"""Name mapping: built-in rules, structure without models, ambiguity, user mappings."""

from __future__ import annotations

import json

import numpy as np
import pytest

from netparity.ckpt import map_names, torch_to_mindspore_names
from netparity.ckpt.mapping import NameMap
from netparity.errors import MappingError

z = np.zeros


def bn(prefix: str, n: int, ms: bool) -> dict[str, np.ndarray]:
    leaves = ("moving_mean", "moving_variance", "gamma", "beta") if ms else (
        "weight", "bias", "running_mean", "running_var")
    out = {f"{prefix}.{leaf}": z(n, np.float32) for leaf in leaves}
    if not ms:
        out[f"{prefix}.num_batches_tracked"] = np.array(0)
    return out


def resnetish(ms: bool) -> dict[str, np.ndarray]:
    d: dict[str, np.ndarray] = {"conv1.weight": z((4, 3, 3, 3), np.float32)}
    d.update(bn("bn1", 4, ms))
    for layer in ("layer1", "layer2"):  # identical shapes: order and names must decide
        d[f"{layer}.0.conv1.weight"] = z((4, 4, 3, 3), np.float32)
        d.update(bn(f"{layer}.0.bn1", 4, ms))
        ds = "down_sample" if ms else "downsample"
        d[f"{layer}.0.{ds}.0.weight"] = z((4, 4, 1, 1), np.float32)
        d.update(bn(f"{layer}.0.{ds}.1", 4, ms))
    d["classifier.weight" if ms else "fc.weight"] = z((10, 4), np.float32)
    d["classifier.bias" if ms else "fc.bias"] = z(10, np.float32)
    return d


def test_resnet_like_without_models():
    ref, cand = resnetish(ms=False), resnetish(ms=True)
    m = map_names(ref, cand)
    assert m, (m.unmatched_ref, m.unmatched_cand, m.ambiguous)
    r2c = m.ref_to_cand()
    assert r2c["bn1.weight"] == "bn1.gamma" and r2c["bn1.running_var"] == "bn1.moving_variance"
    for layer in ("layer1", "layer2"):
        assert r2c[f"{layer}.0.downsample.0.weight"] == f"{layer}.0.down_sample.0.weight"
        assert r2c[f"{layer}.0.downsample.1.weight"] == f"{layer}.0.down_sample.1.gamma"
    assert r2c["fc.weight"] == "classifier.weight" and r2c["fc.bias"] == "classifier.bias"
    hows = {p.ref: p.how for p in m.pairs}
    assert hows["conv1.weight"] == "exact" and hows["bn1.weight"] == "rule"
    assert hows["fc.weight"] == "structure"
    assert set(m.dropped_ref) == {n for n in ref if n.endswith("num_batches_tracked")}
    # every parameter on both sides is accounted for exactly once
    assert sorted(r2c) == sorted(n for n in ref if n not in m.dropped_ref)
    assert sorted(r2c.values()) == sorted(cand)


def test_equal_layers_pair_in_order_and_true_ambiguity_is_reported_not_guessed():
    ref = {"a.weight": z((4, 4)), "b.weight": z((4, 4))}
    cand = {"x.weight": z((4, 4)), "y.weight": z((4, 4))}
    # the same sequence of layers on both sides: the order in which they were created decides
    m = map_names(ref, cand)
    assert m and [(p.ref, p.cand, p.how) for p in m.pairs] == [
        ("a.weight", "x.weight", "order"), ("b.weight", "y.weight", "order")]
    # three candidates for two: nothing is guessed
    m = map_names(ref, {**cand, "w.weight": z((4, 4))})
    assert not m and m.pairs == []
    assert m.ambiguous == {"a.weight": ["x.weight", "y.weight", "w.weight"],
                           "b.weight": ["x.weight", "y.weight", "w.weight"]}
    # a user mapping settles it
    m2 = map_names(ref, cand, mapping={"params": {"a.weight": "y.weight"}})
    assert m2 and m2.ref_to_cand() == {"a.weight": "y.weight", "b.weight": "x.weight"}
    assert [p.how for p in m2.pairs] == ["user", "structure"]


def test_user_mapping_errors_name_the_parameter():
    ref, cand = {"fc.weight": z((3, 4))}, {"head.weight": z((4, 3))}
    with pytest.raises(MappingError, match=r"fc.weight \(3, 4\) vs head.weight \(4, 3\)"):
        map_names(ref, cand, mapping={"fc.weight": "head.weight"})
    with pytest.raises(MappingError, match="nope"):
        map_names(ref, cand, mapping={"nope": "head.weight"})


def test_module_mapping_and_shape_mismatch_flagged():
    ref = {"fc.weight": z((3, 4)), "fc.bias": z(3), "out.weight": z((2, 2))}
    cand = {"head.weight": z((3, 4)), "head.bias": z(3), "out.weight": z((5, 2))}
    m = map_names(ref, cand, mapping={"modules": {"fc": "head"}})
    assert m.ref_to_cand()["fc.bias"] == "head.bias"
    assert not m and [p.ref for p in m.shape_mismatches()] == ["out.weight"]
    with pytest.raises(MappingError, match=r"out.weight \(2, 2\) vs out.weight \(5, 2\)"):
        m.check_shapes()


def test_rules_layernorm_embedding_prelu_conv1d():
    shapes = {"emb.weight": (10, 4), "ln.weight": (4,), "ln.bias": (4,), "gn.weight": (8,),
              "gn.bias": (8,), "proj.weight": (4, 4), "conv.weight": (3, 2, 5),
              "conv.bias": (3,), "act.weight": (1,)}
    r = torch_to_mindspore_names(shapes)
    assert r.names["emb.weight"] == "emb.embedding_table"
    assert (r.names["ln.weight"], r.names["ln.bias"]) == ("ln.gamma", "ln.beta")
    assert r.names["gn.weight"] == "gn.gamma"
    assert r.names["proj.weight"] == "proj.weight"  # 2-D, no bias, not named like an embedding
    assert r.reshape == {"conv.weight": (3, 2, 1, 5)}
    assert r.names["act.weight"] == "act.weight" and any("PReLU" in n for n in r.notes)
    typed = torch_to_mindspore_names(shapes, {"act": "prelu", "proj": "embedding"})
    assert typed.names["act.weight"] == "act.w"
    assert typed.names["proj.weight"] == "proj.embedding_table"


def test_namemap_json_is_a_mapping_file(tmp_path):
    from netparity.mapfile import load_mapping

    m = map_names(resnetish(False), resnetish(True))
    p = m.save(tmp_path / "map.json")
    assert load_mapping(p).params == m.ref_to_cand()
    assert json.loads(p.read_text()) == {"params": m.ref_to_cand()}
    again = map_names(resnetish(False), resnetish(True), mapping=NameMap.load(p))
    assert again and all(pp.how == "user" for pp in again.pairs)


def test_tied_weights_are_aliases_not_unmatched():
    # an LM head tied to the embedding: PyTorch's state dict lists both names, a MindSpore
    # port stores the shared parameter once
    from netparity.ckpt.diff import diff

    rng = np.random.default_rng(0)
    emb = rng.standard_normal((50, 8)).astype(np.float32)
    ref = {"embed.weight": emb, "block.weight": rng.standard_normal((8, 8)).astype(np.float32),
           "lm_head.weight": emb.copy()}
    cand = {"embed.embedding_table": emb, "block.weight": ref["block.weight"]}
    nm = map_names(ref, cand)
    assert nm.aliases_ref == {"lm_head.weight": "embed.weight"}
    assert nm and not nm.unmatched_ref
    assert diff(ref, cand)  # every tensor equal: the diff passes


def test_constant_leftovers_are_not_taken_for_tied_weights():
    # fresh BatchNorm gammas are all ones: equal to each other without being tied, so an extra
    # layer's gamma must stay unmatched
    ref = {"bn.weight": np.ones(8, np.float32), "extra.weight": np.ones(8, np.float32)}
    cand = {"bn.gamma": np.ones(8, np.float32)}
    nm = map_names(ref, cand)
    assert nm.unmatched_ref == ["extra.weight"] and not nm.aliases_ref


def test_order_pairs_layers_by_role_whatever_order_their_tensors_are_listed_in():
    """A flattened, renamed port whose checkpoint lists each BatchNorm as moving_mean,
    moving_variance, gamma, beta (PyTorch: weight, bias, running_mean, running_var), and a
    PyTorch list with every buffer after all parameters: every tensor pairs, none ambiguous."""
    z = np.zeros
    ref_params, ref_buffers, cand = {}, {}, {}
    for i in range(3):  # equal blocks: conv 8->8 then BatchNorm(8)
        ref_params[f"blocks.{i}.conv.weight"] = z((8, 8, 3, 3))
        ref_params[f"blocks.{i}.bn.weight"] = z(8)
        ref_params[f"blocks.{i}.bn.bias"] = z(8)
        ref_buffers[f"blocks.{i}.bn.running_mean"] = z(8)
        ref_buffers[f"blocks.{i}.bn.running_var"] = z(8)
        cand[f"features.{3 * i}.weight"] = z((8, 8, 3, 3))
        for leaf in ("moving_mean", "moving_variance", "gamma", "beta"):
            cand[f"features.{3 * i + 1}.{leaf}"] = z(8)
    m = map_names({**ref_params, **ref_buffers}, cand)
    assert m and not m.ambiguous
    got = m.ref_to_cand()
    assert got["blocks.1.bn.weight"] == "features.4.gamma"
    assert got["blocks.2.bn.running_var"] == "features.7.moving_variance"
    assert got["blocks.2.conv.weight"] == "features.6.weight"
    # a side listing only parameters (a trace of PyTorch parameters): the statistics, which the
    # other side alone lists, stay unmatched and do not make the rest ambiguous
    m = map_names(ref_params, cand)
    assert not m.ambiguous and m.ref_to_cand()["blocks.1.bn.bias"] == "features.4.beta"
    assert sorted(m.unmatched_cand)[:2] == ["features.1.moving_mean", "features.1.moving_variance"]
