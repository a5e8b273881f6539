"""A BERT-style encoder nobody here wrote (``transformers.BertModel``, random weights) against an
independent MindSpore port, compared at op level: ``aten.addmm(bias, x2d, w.t())`` must pair with
``MatMul + BiasAdd`` (never argument by argument), attention run as one fused
``scaled_dot_product_attention`` against ``MatMul``s must not pair the port's internal tensors,
views never pair with computing ops; the faithful port passes with zero warnings, and a port
with one MindSpore-default mistake is named at the op's module."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed")
pytest.importorskip("mindspore", reason="MindSpore is not installed")
if importlib.util.find_spec("transformers") is None:
    pytest.skip("transformers is not installed", allow_module_level=True)

from tests.corpus import bert_pair  # noqa: E402

import netparity  # noqa: E402

pytestmark = pytest.mark.slow  # transformers' import alone takes ~15 s on the 2-core machine

VARIANTS = (None, *bert_pair.BUGS)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """Op-level traces (tensor payloads) of the reference, its noise run and every port."""
    root = tmp_path_factory.mktemp("bert")
    ref = bert_pair.bert_model()
    bert_pair.capture_torch(ref, root / "ref")
    bert_pair.capture_torch(bert_pair.noise_copy(ref), root / "noise")
    for bug in VARIANTS:
        cand = bert_pair.ms_bert(bug)
        assert bert_pair.load_weights(ref, cand) == 39
        bert_pair.capture_mindspore(cand, root / f"cand-{bug}")
    return root


def _compare(traces, bug, noise):
    return netparity.compare(traces / "ref", traces / f"cand-{bug}", level="op",
                             noise_run=traces / "noise" if noise else None)


def _squeezed(shape):
    return [d for d in shape if d != 1]


@pytest.mark.parametrize("noise", [False, True], ids=["tolerance-table", "noise-run"])
def test_faithful_port_passes_at_op_level_with_no_warning(traces, noise):
    r = _compare(traces, None, noise)
    assert r, r.first_divergence
    st = [p.status for p in r.all_pairs()]
    assert st.count("pass") == len(st), {s: st.count(s) for s in set(st)}
    # every projection is compared as one computation: addmm <-> MatMul + BiasAdd
    linear = [c for c in r.calls if c.op == "linear"]
    assert len(linear) == 1 + 6 * bert_pair.LAYERS  # pooler + 6 per layer
    assert all(c.cand_op == "matmul+add" for c in linear)
    # tensors of different shapes are compared only element-wise in the other layout (the
    # token ids PyTorch's embedding takes [2, 16] and MindSpore's Gather [32]), and no view
    # paired with a computing op
    assert all(_squeezed(p.ref_shape) == _squeezed(p.cand_shape) or p.metrics.get("layout")
               for p in r.pairs)
    assert not [p for p in r.pairs if "shape mismatch" in p.reason]
    views = {"reshape", "transpose", "identity", "broadcast", "slice", "squeeze"}
    assert all((c.op in views) == (c.cand_op in views) for c in r.calls)


@pytest.mark.parametrize("bug", bert_pair.BUGS)
def test_mistake_named_at_its_module(traces, bug):
    r = _compare(traces, bug, noise=True)
    assert not r
    assert r.first_divergence.module == bert_pair.FOUND_AT[bug]
    assert r.first_divergence.verdict == "introduced"


def test_tolerance_table_names_the_mistakes_too(traces):
    """Without a noise run the LayerNorm epsilon fails; the tanh GELU (~1e-4 relative) is
    within the cross-framework table's warn band -- named, as a warning, at its module."""
    ln = _compare(traces, "ln-eps", noise=False)
    assert not ln and ln.first_divergence.module == bert_pair.FOUND_AT["ln-eps"]
    gelu = _compare(traces, "gelu-tanh", noise=False)
    assert gelu.first_divergence.module == bert_pair.FOUND_AT["gelu-tanh"]


def test_cli_compare_level_op_exit_status(traces):
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root / "src")}  # this checkout's netparity

    def run(bug):
        return subprocess.run(
            [sys.executable, "-m", "netparity", "compare", str(traces / "ref"),
             str(traces / f"cand-{bug}"), "--level", "op", "--quiet"],
            capture_output=True, text=True, cwd=root, env=env)

    ok = run(None)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "PASS" in ok.stdout
    assert run("ln-eps").returncode == 1
