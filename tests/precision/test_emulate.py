"""``emulate_fp16``: a live PyTorch step with float16-only operator classes, as a device that
only has them in float16 runs it -- its effect on the loss, and where (``precision``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.precision.nets import ResNetish  # noqa: E402
from torch.nn import functional as F  # noqa: E402, N812

import netparity  # noqa: E402
from netparity.precision import check_precision, emulate_fp16  # noqa: E402
from netparity.trace import open_trace  # noqa: E402


def _step(spec: str | None, scale: float = 1.0, capture: str | None = None):  # noqa: ANN202
    torch.manual_seed(0)
    m = ResNetish()
    x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))

    def run() -> float:
        loss = F.cross_entropy(m(x), y) * scale
        loss.backward()
        return float(loss)

    calls: dict[str, int] = {}
    if capture:
        with netparity.capture(m, capture, level="op", payload="tensors") as cap:
            with emulate_fp16(spec or "fp16-ops") as calls:
                loss = run()
            cap.step()
    elif spec:
        with emulate_fp16(spec) as calls:
            loss = run()
    else:
        loss = run()
    return loss, m.stem.weight.grad, calls


def test_float16_convolutions_move_the_loss_a_little_and_underflow_small_gradients():
    ref, g_ref, _ = _step(None)
    emu, g_emu, calls = _step("fp16-ops=conv,pool")
    assert calls["aten.convolution.default"] == 5 and calls["aten.convolution_backward.default"]
    assert "aten.addmm.default" not in calls  # matmul not chosen
    assert 0 < abs(emu - ref) / ref < 1e-3
    # without loss scaling (a loss 1e-6 as large) float16 flushes the stem's gradient to zero
    _, small_ref, _ = _step(None, 1e-6)
    _, small_emu, _ = _step("fp16-ops=conv", 1e-6)
    assert (small_ref != 0).all() and (small_emu == 0).all()
    assert g_ref.shape == g_emu.shape


def test_precision_names_where_the_emulated_float16_operators_lose(tmp_path):
    _step("fp16-ops=conv", capture=str(tmp_path / "t"))
    with open_trace(tmp_path / "t") as tr:
        r = check_precision(tr)
    assert not r
    mods = {o.module for o in r.flagged if o.native == "aten.convolution.default"}
    assert mods == {"stem", "layer1.conv1", "layer1.conv2", "layer2.conv1", "layer2.conv2"}
    assert all(o.status == "demoted" and o.dtype == "float16" for o in r.flagged)
    assert {o.op for o in r.flagged} <= {"conv", "conv_backward", "cast", "copy"}
