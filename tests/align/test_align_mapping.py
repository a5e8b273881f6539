"""Mapping files: overrides, validation, emit/reload round trip, and the CLI."""

from __future__ import annotations

import json

import pytest
from align_helpers import MS, TORCH, run_net

from netparity.align import align_traces, load_mapping
from netparity.cli import main
from netparity.errors import MappingError


def pair_set(al):
    return sorted((tuple(c.name for c in m.ref), tuple(c.name for c in m.cand)) for m in al.matches)


def test_mapping_overrides_automatic_pairs(builder, tmp_path):
    a, b = builder("a"), builder("b")
    run_net(a, TORCH)
    run_net(b, TORCH)
    ta, tb = a.close(), b.close()
    # deliberately cross two modules: the mapping wins over equal paths
    mp = tmp_path / "m.yaml"
    mp.write_text("modules:\n  bn1: layer1.0.bn1\n  layer1.0.bn1: bn1\n")
    al = align_traces(ta, tb, mapping=load_mapping(mp))
    got = {m.ref[0].module: (m.cand[0].module, m.method) for m in al.matches}
    assert got["bn1"] == ("layer1.0.bn1", "mapping")
    assert got["layer1.0.bn1"] == ("bn1", "mapping")
    assert got["conv1"] == ("conv1", "path")


def test_mapping_rules_and_params(builder):
    a, b = builder("t", "torch"), builder("m", "mindspore")
    run_net(a, TORCH)
    run_net(b, MS)
    mapping = {"rules": [{"ref": r"^(.*)\.downsample\.0$", "cand": r"\1.down_sample.bn"}],
               "params": {"conv1.weight": "fc_does_not_exist"}}
    al = align_traces(a.close(), b.close(), mapping=mapping)
    got = {m.ref[0].module: (m.cand[0].module, m.method) for m in al.matches}
    assert got["layer1.0.downsample.0"] == ("layer1.0.down_sample.bn", "mapping")
    # a params entry naming nothing that exists is ignored, the automatic rule still applies
    assert {p.ref.module: p.cand.module for p in al.params}["conv1.weight"] == "conv1.weight"


@pytest.mark.parametrize("text, suffix, msg", [
    ("modules: [1, 2", ".yaml", "not valid YAML"),
    ("{\"modules\": 3}", ".json", "'modules' must map"),
    ("{\"rules\": [{\"ref\": \"(\", \"cand\": \"x\"}]}", ".json", "bad regular expression"),
    ("{\"ops\": [{\"ref\": [], \"cand\": [\"add\"]}]}", ".json", "non-empty list"),
    ("{\"layers\": {}}", ".json", "unknown key"),
    ("[1, 2]", ".json", "must be an object"),
])
def test_bad_mapping_file(tmp_path, text, suffix, msg):
    p = tmp_path / f"bad{suffix}"
    p.write_text(text)
    with pytest.raises(MappingError, match=msg) as e:
        load_mapping(p)
    assert "\n" not in str(e.value)


def test_missing_mapping_file(tmp_path):
    with pytest.raises(MappingError, match="no such mapping file"):
        load_mapping(tmp_path / "nope.yaml")


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_emit_mapping_round_trip(builder, tmp_path, suffix):
    a, b = builder("t", "torch"), builder("m", "mindspore")
    run_net(a, TORCH)
    run_net(b, MS, noise=1e-3, linear_as_matmul_add=True)
    ta, tb = a.close(), b.close()
    out = tmp_path / f"found{suffix}"
    assert main(["align", str(ta.path), str(tb.path), "--level", "both", "--emit-mapping", str(out)]) == 0
    emitted = load_mapping(out)
    assert emitted.modules["fc"] == "classifier"
    assert emitted.params["bn1.weight"] == "bn1.gamma"
    assert emitted.ops == [(("linear",), ("matmul", "add"))]
    first = align_traces(ta, tb, level="both")
    again = align_traces(ta, tb, level="both", mapping=emitted)
    assert pair_set(again) == pair_set(first)
    assert {(p.ref.module, p.cand.module) for p in again.params} == {
        (p.ref.module, p.cand.module) for p in first.params}
    assert any(m.method == "mapping" for m in again.matches)


def test_cli_summary_and_errors(builder, tmp_path, capsys):
    a, b = builder("a"), builder("b")
    run_net(a, TORCH, calls=2)
    run_net(b, TORCH)
    ta, tb = a.close(), b.close()
    assert main(["align", str(ta.path), str(tb.path), "--steps", "0"]) == 0
    out = capsys.readouterr().out
    assert "unmatched ref 3" in out and "conv1" in out
    assert main(["align", str(ta.path), str(tb.path), "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["summary"]["unmatched_ref"] == 3
    assert main(["align", str(ta.path), str(tmp_path / "missing")]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main(["align", str(ta.path), str(tb.path), "--mapping", str(bad)]) == 2
    assert "netparity: error:" in capsys.readouterr().err
