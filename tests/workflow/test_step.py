"""The one-step parity workflow on the real PyTorch and MindSpore ResNet ports.

Each classic migration bug injected into the MindSpore side must be reported in the right phase
and at the right place; the clean port must pass. ResNet-18 at 56 px keeps this fast; the
ResNet-50 demo itself is exercised in test_demo.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed")
pytest.importorskip("mindspore", reason="MindSpore is not installed")

from netparity.examples.resnet.bugs import BUGS, FOUND_AT, expected_place  # noqa: E402
from netparity.workflow.step import run_step_parity  # noqa: E402

REF = "netparity.examples.resnet.specs.torch_spec"
CAND = "netparity.examples.resnet.specs.ms_spec"
OPTS = {"depth": 18, "batch_size": 2, "image_size": 56, "lr_max": 1e-3}

# bug -> (phase, where, step): every demo bug, as the examples declare it
EXPECTED = {None: (None, None, None), **{b: expected_place(b, OPTS["depth"]) for b in FOUND_AT}}


@pytest.mark.slow
@pytest.mark.parametrize("bug", list(EXPECTED), ids=lambda b: b or "clean")
def test_bug_is_named_in_the_right_phase_and_place(tmp_path, bug):
    # the free-running curves are information, not verdicts: run them for the clean pair only
    r = run_step_parity(REF, CAND, tmp_path / "run", steps=3, options=OPTS,
                        cand_options={"bug": bug}, free_running=bug is None)
    phase, where, step = EXPECTED[bug]
    assert r.first_phase == phase, [(p.name, p.status, p.summary) for p in r.phases]
    if phase is None:
        assert r and all(p.status in ("pass", "skipped") for p in r.phases), \
            [(p.name, p.status, p.summary) for p in r.phases]
        # no noise on the first screen: the step-0 comparison has no warning either
        assert r.compare_step0.counts()["warn"] == 0 and r.compare_step0.counts()["fail"] == 0
        assert len(r.losses["cand_free"]) == 3 and len(r.losses["ref_noise"]) == 3
        return
    first = r.first
    assert first.where == where
    if step is not None:
        assert first.step == step
    # every phase before the first divergence was checked and passed
    names = [p.name for p in r.phases]
    assert all(p.status == "pass" for p in r.phases[: names.index(phase)])
    j = r.to_json()
    assert j["first_divergence"]["phase"] == phase and j["first_divergence"]["where"] == where


def test_setup_phase_stops_on_mismatched_models(tmp_path):
    # A candidate with a different number of classes cannot start from the same weights.
    r = run_step_parity(REF, CAND, tmp_path / "run", steps=1, options={**OPTS, "num_classes": 4},
                        cand_options={"num_classes": 3}, run_eval=False)
    assert r.first_phase == "setup"
    assert "shape mismatch" in r.first.summary or "differ" in r.first.summary
    assert all(p.status == "skipped" for p in r.phases[1:])


def test_every_demo_bug_has_an_expected_place():
    assert set(FOUND_AT) == set(BUGS)


def test_step_cli_exit_codes_and_reports(tmp_path):
    out = tmp_path / "cli"
    p = subprocess.run(
        [sys.executable, "-m", "netparity", "step", REF, CAND, "-o", str(out), "--steps", "1",
         "--no-eval", "--opt", "depth=18", "--opt", "image_size=56", "--opt", "batch_size=2",
         "--cand-opt", "bug=same-pad"],
        capture_output=True, text=True, timeout=600)
    assert p.returncode == 1, p.stderr[-2000:]
    assert "FORWARD" in p.stdout and "layer2.0.conv1" in p.stdout
    data = json.loads((out / "step.json").read_text())
    assert data["first_divergence"]["phase"] == "forward"
    html = (out / "report.html").read_text()
    assert "layer2.0.conv1" in html and "loss per step" in html
    # the network view sits under the phase table, opened on the culprit
    assert html.index("class='npv'") < html.index("loss per step")
    view = json.loads(html.split("class='npv-data'>", 1)[1].split("</script>", 1)[0])
    assert view["nodes"][view["first"]["id"]]["ref"] == "layer2.0.conv1"
    # each side's numerics verdict: both ports train without NaN/Inf
    assert data["numerics"]["ref"]["healthy"] and data["numerics"]["cand"]["healthy"]
    assert "numerics: both runs healthy" in p.stdout and "Numerics" in html
    bad = subprocess.run([sys.executable, "-m", "netparity", "step", "nope_spec.py", CAND],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "spec file not found" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_spec_validation(tmp_path):
    from netparity.errors import UsageError
    from netparity.workflow.spec import load_spec

    f = tmp_path / "bad_spec.py"
    f.write_text("def build(**o):\n    return {'framework': 'torch'}\n")
    with pytest.raises(UsageError, match="lacks model, batches, train_step"):
        load_spec(str(f))
    f.write_text("x = 1\n")
    with pytest.raises(UsageError, match="must define build"):
        load_spec(str(f))
    assert Path(f).exists()
