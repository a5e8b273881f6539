"""Hugging Face GPT-2 (nobody here wrote it) as a causal LM with AdamW, gradient clipping and
warmup, through ``netparity step``: a float64 candidate passes in every phase, with no warning;
a difference that only the second block's attention makes is named there, not in block 0."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed")
if importlib.util.find_spec("transformers") is None:
    pytest.skip("transformers is not installed", allow_module_level=True)

from tests.corpus import gpt2_spec  # noqa: E402

from netparity.workflow.step import run_step_parity  # noqa: E402

SPEC = str(Path(gpt2_spec.__file__))


@pytest.mark.slow
@pytest.mark.parametrize("cand", [{"dtype": "float64"}, {"bug": "attn-layer-scale"},
                                  {"dtype": "float64", "dropout": 0.1}, {"hand_loss": True}],
                         ids=["faithful-float64", "attn-layer-scale", "faithful-dropout",
                              "hand-written-loss"])
def test_gpt2(tmp_path, cand):
    # dropout 0.1 (transformers' default) on both sides: the same masks at every step
    opts = {"dropout": cand["dropout"]} if "dropout" in cand else None
    r = run_step_parity(SPEC, SPEC, tmp_path / "run", steps=2, options=opts, cand_options=cand,
                        run_eval=False, free_running=False)
    if "bug" in cand:
        want = gpt2_spec.FOUND_AT[cand["bug"]]
        assert (r.first_phase, r.where, r.first.step) == want, r.first.summary
    else:
        assert r.first_phase is None, [(p.name, p.status, p.summary) for p in r.phases]
        assert not [p for p in r.phases if p.status == "warn"]
