"""``--emulate fp16-ops=...`` of ``netparity step`` and ``netparity bisect``: the candidate's
step runs with those operator classes in float16 (applied where every spec is built), so
bisect names the convolution (module and operator) and step names it in FORWARD; a bad
request is one line, exit 2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.safety.helpers import assert_one_line_error, run_cli

SPEC = str(Path(__file__).with_name("conv_spec.py"))


def test_bisect_emulated_conv_is_found_module_and_operator() -> None:
    pytest.importorskip("torch")
    p = run_cli("bisect", SPEC, SPEC, "--opt", "gain=8", "--opt", "convs=1",
                "--emulate", "fp16-ops=conv", "-q")
    assert p.returncode == 1, p.stderr[-2000:]
    assert "FOUND: conv1" in p.stdout and "OPERATOR: torch.conv2d" in p.stdout, p.stdout


def test_step_emulated_conv_is_named_where_float16_loses(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    p = run_cli("step", SPEC, SPEC, "--opt", "gain=8", "--steps", "1", "--no-eval",
                "--emulate", "fp16-ops=conv", "-q", "--out", str(tmp_path / "s"))
    assert p.returncode == 1, p.stderr[-2000:]
    m = re.search(r"loss\s+ref: (\S+)\s+cand: (\S+)", p.stdout)
    assert m and m.group(1) != m.group(2), p.stdout[-1500:]
    # replay runs the candidate's modules under the same emulation (it used to replay them in
    # float32 and clear the float16 difference as rounding noise: PASS)
    assert "FORWARD phase at conv1" in p.stdout.splitlines()[0], p.stdout[-1500:]


@pytest.mark.parametrize("cmd", ["step", "bisect"])
def test_bad_emulate_is_one_line(cmd: str, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    extra = ["--out", str(tmp_path / "s")] if cmd == "step" else []
    assert_one_line_error(run_cli(cmd, SPEC, SPEC, "--emulate", "fp16-ops=bogus", *extra),
                          "bogus")
