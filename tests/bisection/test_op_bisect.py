"""``netparity bisect``'s operator stage: inside the module found, halves of its low-precision
operator calls run in the reference's dtype until the call(s) carrying the loss difference are
named (name, index in the module, source line), within 2 * log2(calls) + 2 runs; a difference
that is not one of dtype, and a PyTorch -> MindSpore pair, say "not switchable" instead."""

from __future__ import annotations

import linecache
from pathlib import Path

import pytest
from tests.safety.helpers import run_cli

SPEC = str(Path(__file__).with_name("tiny_vit_spec.py"))


@pytest.fixture(scope="module")
def bisect() -> object:
    pytest.importorskip("torch")
    from netparity.bisect import run_bisect

    return run_bisect


def _source(where: str) -> str:
    path, _, line = where.rpartition(":")
    return linecache.getline(path, int(line))


def test_float16_softmax_inside_attention_is_named(bisect: object) -> None:
    r = bisect(SPEC, SPEC, options={"gain": 8},  # type: ignore[operator]
               cand_options={"lowp_softmax": "blocks.2.attn"})
    assert r.region == "blocks.2.attn" and r.ops["switchable"], r.ops
    (op,) = r.ops["found"]
    # the call that lowers the logits to float16, feeding the softmax, on the softmax's line
    assert op["name"] == "Tensor.to" and op["out"] == ["float16"], op
    assert op["feeds"] == [f"Tensor.softmax (#{op['index'] + 1})"], op
    assert "softmax" in _source(op["where"]), op["where"]
    assert r.ops["fix_share"] >= 0.9
    assert len(r.ops["runs"]) <= r.ops["budget"] and r.runs_total <= r.budget


def test_bfloat16_autocast_names_the_linear(bisect: object) -> None:
    r = bisect(SPEC, SPEC, options={"gain": 8},  # type: ignore[operator]
               cand_options={"autocast": "bfloat16"})
    if r.verdict == "spread":  # the portable bfloat16 kernels: no module carries >= 90 %
        assert r.ops == {} and r.chain[0] == "embed", (r.chain, r.ops)  # (test_bisect.py)
        return
    assert r.region == "embed"
    assert [c["name"] for c in r.ops["found"]] == ["torch.nn.functional.linear"], r.ops
    assert "autocast" in r.ops["found"][0]["how"]
    assert len(r.ops["runs"]) <= r.ops["budget"]


def test_not_a_dtype_difference_is_not_switchable(bisect: object) -> None:
    r = bisect(SPEC, SPEC, options={"gain": 8},  # type: ignore[operator]
               cand_options={"eps_norm": "blocks.1.norm1"})
    assert r.region == "blocks.1.norm1"
    assert r.ops["switchable"] is False and r.ops["runs"] == []
    assert r.ops["note"].startswith("operators: not switchable for this pair")


def test_faithful_pair_has_no_operator_stage(bisect: object) -> None:
    r = bisect(SPEC, SPEC, options={"depth": 2})  # type: ignore[operator]
    assert r.verdict == "agree" and r.ops == {}


def test_cli_names_the_operator_and_no_ops_stops_at_the_module() -> None:
    pytest.importorskip("torch")
    args = ("bisect", SPEC, SPEC, "--opt", "gain=8", "--cand-opt", "lowp_softmax=blocks.2.attn",
            "-q")
    p = run_cli(*args)
    assert p.returncode == 1, p.stderr[-2000:]
    assert "OPERATOR: Tensor.to (call #" in p.stdout and "-> Tensor.softmax" in p.stdout
    p = run_cli(*args, "--no-ops")
    assert p.returncode == 1 and "FOUND: blocks.2.attn" in p.stdout and "OPERATOR" not in p.stdout
