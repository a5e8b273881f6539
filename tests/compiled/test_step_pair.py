"""Eager <-> compiled as a pair type of ``netparity step`` (issue 30, item 4): the same spec on
both sides, the candidate with the workflow's ``compile`` option (``torch.compile`` in place).
A faithful pair passes; a module whose compiled path differs is named by bisecting the compiled
regions, with ``torch._inductor.compiler_bisector``'s answer on that region."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from netparity.workflow.compiled import bisect_compiled, pop_compile  # noqa: E402
from netparity.workflow.step import run_step_parity  # noqa: E402
from safety.helpers import run_cli  # noqa: E402  (tests/ is on sys.path)

SPECS = Path(__file__).parent / "specs"
TINY = str(SPECS / "tiny_torch.py")


def _step(tmp_path: Path, **opts: object):
    return run_step_parity(TINY, TINY, tmp_path / "out", steps=2, options=dict(opts),
                           cand_options={"compile": True}, run_eval=False, noise=False,
                           free_running=False)


def test_faithful_pair_passes(tmp_path) -> None:
    r = _step(tmp_path)
    assert r, [(p.name, p.status, p.summary) for p in r.phases]
    cand = json.loads((tmp_path / "out" / "cand" / "manifest.json").read_text())
    assert cand["compiled"]["regions"] == [""]  # the candidate really ran compiled
    ref = json.loads((tmp_path / "out" / "ref" / "manifest.json").read_text())
    assert "compiled" not in ref


def test_compiled_only_difference_is_named_at_its_module(tmp_path) -> None:
    r = _step(tmp_path, bug="compiled-eps")
    assert not r and r.first_phase == "forward"
    assert r.where == "2", (r.where, r.phase("forward").summary)
    found = r.phase("forward").evidence["compiled_region"]
    assert found["native"] == "Scale"
    assert found["compiler"]["backend"] == "eager"  # dynamo's capture, before any compiler
    assert "smallest compiled region" in r.phase("forward").summary


def test_bisect_of_a_faithful_model_finds_nothing() -> None:
    b = bisect_compiled(TINY, {"compile": True})
    assert b.region is None and b.full < 1e-4


def test_cli_option(tmp_path) -> None:
    p = run_cli("step", TINY, TINY, "--cand-opt", "compile=true", "--opt", "bug=compiled-eps",
                "--steps", "1", "--no-eval", "--payload", "stats", "-o", str(tmp_path / "o"))
    assert "FAIL" in p.stdout and "(Scale)" in p.stdout, p.stdout[-3000:] + p.stderr[-2000:]


def test_compile_option_belongs_to_a_build_that_names_it() -> None:
    def own(compile: bool = False, **kw: object) -> dict:  # noqa: A002
        return {}

    assert pop_compile(own, {"compile": True}) == (None, {"compile": True})
    assert pop_compile(lambda **kw: {}, {"compile": "aot_eager", "x": 1}) == ("aot_eager",
                                                                              {"x": 1})


def test_mindspore_pynative_vs_graph_passes(tmp_path) -> None:
    """MindSpore PyNative vs graph compilation of the same network (``mindspore.jit`` of its
    ``construct``, the other side left in PyNative)."""
    pytest.importorskip("mindspore")
    spec = str(SPECS / "tiny_ms.py")
    r = run_step_parity(spec, spec, tmp_path / "out", steps=2, cand_options={"compile": True},
                        run_eval=False, noise=False, free_running=False)
    assert r, [(p.name, p.status, p.summary) for p in r.phases]
    cand = json.loads((tmp_path / "out" / "cand" / "manifest.json").read_text())
    assert cand["spec_options"]["compile"] is True


@pytest.mark.slow
def test_corpus_torchvision_resnet18_eager_vs_compiled_passes(tmp_path) -> None:
    """Corpus row: torchvision's ResNet-18 eager vs ``torch.compile`` (inductor, CPU), batch 2,
    2 steps, with the noise run -> PASS (about 60 s, most of it inductor compiling on 2 cores).

    64 px. At 32 px layer4 is 1x1 and its batch norms normalise 2 values per channel: the
    compiled model, seen only at its boundary, has those parameter gradients judged by the
    float64 golden floor (analyzers/golden.py); that passed on a warm compile cache here
    (worst 0.205 vs the float32 reference's 0.0766) but failed once in a fresh clone's CI
    rehearsal, not yet explained -- kept out of the suite until it is (issue 28 note)."""
    spec = str(SPECS / "tv_resnet18.py")
    r = run_step_parity(spec, spec, tmp_path / "out", steps=2, options={"image_size": 64},
                        cand_options={"compile": True}, run_eval=False, free_running=False)
    assert r, [(p.name, p.status, p.summary) for p in r.phases]
