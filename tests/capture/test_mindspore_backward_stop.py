"""A live ``stop_on_nonfinite`` in MindSpore's backward (issue 30 item 1): the ``sqrt`` of a zero
variance stops the run in step 2's backward, naming the normalising Cell, the ``Sqrt`` primitive
whose backward made the NaN/Inf and its forward source line -- the same from in-code
``capture(..., stop_on_nonfinite=True)`` and zero-code ``netparity run --stop-on-nonfinite``.

Before: the stop checked forward primitives only and stopped at step 3's first ``matmul``
(its parameter already NaN, "entered").
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("mindspore")

from tests.capture.test_zero_code_parity import WAYS, _env, numerics  # noqa: E402
from tests.capture.test_zero_code_parity_mindspore import LOOP, SQRT  # noqa: E402

STOP = SQRT.replace("STEPS, KW = 4, {}",
                    'STEPS, KW = 4, {"level": "op", "stop_on_nonfinite": True}')
SQRT_LINE = next(i for i, ln in enumerate(STOP.splitlines(), 1) if "ops.sqrt(var)" in ln)


@pytest.mark.parametrize("way", WAYS)
def test_backward_stop_names_the_sqrt(tmp_path, way) -> None:  # type: ignore[no-untyped-def]
    """Both ways: exit status 1 (as PyTorch's stop), zero-code with the stop's one line; the
    saved origin names Cell ``1`` (the Norm), ``Sqrt`` and the line of ``ops.sqrt(var)``."""
    assert "STEPS, KW = 4, {\"level\"" in STOP
    (tmp_path / "train.py").write_text(STOP + LOOP)
    out = tmp_path / way
    cmd = ([sys.executable, "train.py", str(out)] if way == "in-code" else
           [sys.executable, "-m", "netparity", "run", "-o", str(out), "--stop-on-nonfinite",
            "--", "python", "train.py"])
    res = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert res.returncode == 1, res.stderr[-3000:]
    line = "NaN/Inf introduced by sqrt in 1 (backward, step 2, rank 0) at train.py:"
    assert line in res.stderr, res.stderr[-3000:]
    if way == "zero-code":
        assert f"netparity: stopped: {line}" in res.stderr and "Traceback" not in res.stderr
    rc, report = numerics(out)
    assert rc == 1
    o = report["live_stop"]
    assert (o["direction"], o["step"], o["module"], o["verdict"]) == ("backward", 2, "1",
                                                                      "introduced"), o
    assert (o["op"], o["native"]) == ("sqrt", "Sqrt"), o
    assert o["source"] == f"train.py:{SQRT_LINE}", o
    assert "sqrt of zero or negative input" in o["cause"] and "in its backward" in o["cause"]
