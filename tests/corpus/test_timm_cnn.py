"""timm CNNs (nobody here wrote them) through ``netparity step``: EfficientNet-B0 (SiLU,
squeeze-excitation) in float64 must pass as a faithful candidate, and its BatchNorm eps copied
from a TensorFlow EfficientNet (1e-3) must be named at the stem's BatchNorm. Small images and
two steps keep it short; ``benchmarks/corpus.py --only timmcnn`` runs the full rows."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed")
if importlib.util.find_spec("timm") is None:
    pytest.skip("timm is not installed", allow_module_level=True)

from tests.corpus import timm_cnn_spec  # noqa: E402

from netparity.workflow.step import run_step_parity  # noqa: E402

SPEC = str(Path(timm_cnn_spec.__file__))
SMALL = {"arch": "efficientnet_b0", "image_size": 32, "batch_size": 2}


@pytest.mark.slow
@pytest.mark.parametrize("case", ["float64", "bn-eps"])
def test_efficientnet_faithful_passes_and_tf_batchnorm_eps_is_named(tmp_path, case):
    cand = {"dtype": "float64"} if case == "float64" else {"bug": case}
    r = run_step_parity(SPEC, SPEC, tmp_path / case, steps=2, options=SMALL,
                        cand_options=cand, run_eval=False, free_running=False)
    if case == "float64":
        assert r.first_phase is None, (r.first_phase, r.where, [p.summary for p in r.phases])
        assert not [p for p in r.phases if p.status == "warn"]
    else:
        assert (r.first_phase, r.where, r.first.step) == timm_cnn_spec.FOUND_AT[case]
