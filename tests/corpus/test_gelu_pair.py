"""A tanh GELU that is one op on one side and its formula (eight ops, two of them ``add``\\ s of
the hidden width next to the linear layers' bias adds) on the other (see
:mod:`tests.corpus.gelu_pair`): the faithful port passes at every level, and a wrong constant
in the formula is named at the activation."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed")
pytest.importorskip("mindspore", reason="MindSpore is not installed")

from tests.corpus import gelu_pair  # noqa: E402

import netparity  # noqa: E402

LEVELS = ("module", "op", "both")


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("gelu")
    ref = gelu_pair.torch_model()
    gelu_pair.capture_torch(ref, root / "ref")
    for bug in (None, *gelu_pair.BUGS):
        cand = gelu_pair.ms_model(bug)
        assert gelu_pair.load_weights(ref, cand) == 6
        gelu_pair.capture_ms(cand, root / f"cand-{bug}")
    return root


@pytest.mark.parametrize("level", LEVELS)
def test_gelu_as_one_op_against_its_formula_passes(traces, level):
    r = netparity.compare(traces / "ref", traces / "cand-None", level=level)
    assert r and r.counts()["warn"] == 0, r.first_divergence
    assert not [p.name for p in r.pairs if p.kind == "op"
                and _size(p.ref_shape) != _size(p.cand_shape)]


@pytest.mark.parametrize("level", LEVELS)
def test_a_wrong_constant_in_the_formula_is_named_at_the_activation(traces, level):
    r = netparity.compare(traces / "ref", traces / "cand-gelu-coef", level=level)
    d = r.first_divergence
    assert not r and (d.module, d.cand_module) == gelu_pair.FOUND_AT["gelu-coef"]
    assert d.verdict == "introduced"


def _size(shape):
    n = 1
    for d in shape:
        n *= d
    return n
