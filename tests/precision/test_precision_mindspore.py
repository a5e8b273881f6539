"""``netparity precision`` on a MindSpore trace: primitives replayed from their recorded
classes and arguments (float32's kernel where MindSpore's CPU has no float64 one)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")

import netparity  # noqa: E402
from netparity.precision import check_precision  # noqa: E402
from netparity.trace import open_trace  # noqa: E402


def _trace(path: Path, bad: bool) -> Path:
    from mindspore import nn, ops

    class Net(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, has_bias=True)
            self.fc = nn.Dense(4 * 8 * 8, 16)
            self.ln = nn.LayerNorm((16,))
            self.softmax = ops.Softmax(-1)
            self.cast = ops.Cast()

        def construct(self, x):  # type: ignore[no-untyped-def]
            h = self.ln(self.fc(ops.relu(self.conv(x)).reshape(x.shape[0], -1)))
            if bad:  # softmax computed in float16
                return self.cast(self.softmax(self.cast(h, ms.float16)), ms.float32)
            return self.softmax(h)

    ms.set_context(mode=ms.PYNATIVE_MODE)
    net = Net()
    x = ms.Tensor(np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32))
    with netparity.capture(net, path, level="op", payload="tensors") as cap:
        net(x)
        cap.step()
    return path


@pytest.mark.parametrize("bad", [False, True])
def test_mindspore_softmax_in_float16_is_named(tmp_path, bad):
    with open_trace(_trace(tmp_path / "t", bad)) as tr:
        r = check_precision(tr)
    conv = next(o for o in r.ops if o.native == "Conv2D")
    assert conv.status == "ok" and conv.reference == "cpu-fp32 (no float64 kernel)"
    assert sum(o.err is not None for o in r.ops) >= 6
    if not bad:
        assert r, [(o.where(), o.reason) for o in r.flagged]
        return
    (o,) = r.flagged
    assert (o.native, o.status, o.dtype, o.judged) == ("Softmax", "demoted", "float16",
                                                       "float32")
