"""The float64 golden floor: parameter gradients that replay cannot judge (a candidate
compiled with ``torch.compile`` is captured only at its boundary) are held to the float32
reference's own error against a float64 run of the reference -- a faithful compiled pair
passes, a compiled-only backward mistake is still named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from netparity.workflow.golden import golden_ok  # noqa: E402

SPEC = str(Path(__file__).resolve().parents[1] / "compiled" / "specs" / "tiny_torch.py")


def test_the_bound() -> None:
    assert golden_ok(0.3, 0.1, 5.0) and not golden_ok(0.6, 0.1, 5.0)
    assert golden_ok(5e-7, 0.0, 5.0)  # one rounding apart when float32 itself is exact


def _step(out: Path, *extra: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    p = subprocess.run([sys.executable, "-m", "netparity", "step", SPEC, SPEC, "-o", str(out),
                        "--steps", "1", "--no-eval", "-q", "--cand-opt", "compile=true", *extra],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode in (0, 1), p.stderr[-3000:]
    return p.returncode, json.loads((out / "step.json").read_text())


@pytest.mark.slow
def test_a_compiled_only_backward_mistake_is_named_by_the_golden_floor(tmp_path: Path) -> None:
    rc, data = _step(tmp_path / "bug", "--cand-opt", "bug=compiled-grad")
    assert rc == 1
    bwd = next(p for p in data["phases"] if p["name"] == "backward")
    # the gradients of the Linear before it differ; the compiled-region bisection names the
    # module whose compiled backward makes the difference
    assert bwd["status"] == "fail" and bwd["where"] == "2", bwd
    assert "against a float64 golden run of the reference: 0." in bwd["summary"]
    golden = bwd["evidence"]["golden"]
    assert golden and not any(g["ok"] for g in golden if g["param"].startswith("0."))
    assert min(g["cand_err"] for g in golden) > 100 * max(g["ref_err"] for g in golden)
