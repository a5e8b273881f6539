"""Plain ``compare`` of two op-level traces with tensors judges each op pair against the
reference op's own noise (float64 replays; issue 28, deliver 0): a ViT-ish block ported to
MindSpore with LayerNorm eps 1e-7 (MindSpore's default) instead of 1e-6 was a WARN (the
cross-framework table's band), exit 0; it is a FAIL naming the LayerNorm."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ms = pytest.importorskip("mindspore")

import netparity  # noqa: E402
from netparity.cli import main  # noqa: E402

D = 32


def _weights() -> dict[str, np.ndarray]:
    r = np.random.default_rng(0)
    return {"w1": (r.standard_normal((D, 48)) * 0.01).astype(np.float32),  # small patches:
            "w2": (r.standard_normal((10, D)) * 0.2).astype(np.float32)}  # eps matters


def _x() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((8, 48)).astype(np.float32)


def _torch(path: Path) -> Path:
    w = _weights()
    m = torch.nn.Sequential(torch.nn.Linear(48, D), torch.nn.LayerNorm(D, eps=1e-6),
                            torch.nn.GELU(), torch.nn.Linear(D, 10))
    with torch.no_grad():
        m[0].weight.copy_(torch.from_numpy(w["w1"]))
        m[3].weight.copy_(torch.from_numpy(w["w2"]))
        m[0].bias.zero_()
        m[3].bias.zero_()
    with netparity.capture(m, path, level="op", payload="tensors",
                           directions=("forward",)) as cap:
        m(torch.from_numpy(_x()))
        cap.step()
    return path


def _mindspore(path: Path, bug: str | None) -> Path:
    from mindspore import nn

    ms.set_context(mode=ms.PYNATIVE_MODE)
    w = _weights()
    m = nn.SequentialCell(nn.Dense(48, D),
                          nn.LayerNorm((D,), epsilon=1e-7 if bug == "ln-eps" else 1e-6),
                          nn.GELU(approximate=bug == "gelu-tanh"), nn.Dense(D, 10))
    m[0].weight.set_data(ms.Tensor(w["w1"]))
    m[3].weight.set_data(ms.Tensor(w["w2"]))
    m[0].bias.set_data(ms.Tensor(np.zeros(D, np.float32)))
    m[3].bias.set_data(ms.Tensor(np.zeros(10, np.float32)))
    with netparity.capture(m, path, level="op", payload="tensors",
                           directions=("forward",)) as cap:
        m(ms.Tensor(_x()))
        cap.step()
    return path


@pytest.fixture(scope="module")
def ref(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _torch(tmp_path_factory.mktemp("ref") / "pt")


@pytest.mark.parametrize("bug, op", [(None, None), ("ln-eps", "layer_norm"),
                                     ("gelu-tanh", "gelu")])
def test_plain_compare_judges_ops_against_their_own_noise(ref, tmp_path, capsys, bug, op):
    from netparity.analyzers.divergence import compare

    cand = _mindspore(tmp_path / "ms", bug)
    rc = main(["compare", str(ref), str(cand), "--level", "op", "-q"])
    out = capsys.readouterr().out
    if bug is None:
        assert rc == 0 and out.startswith("PASS"), out
        return
    assert rc == 1 and out.startswith("FAIL"), out
    assert f"({op}) -- INTRODUCED here (fail)" in out, out
    r = compare(str(ref), str(cand), level="op")
    (p,) = [p for p in r.pairs_with_status("fail") if p.metrics.get("replay_noise")]
    ev = p.metrics["replay_noise"]
    assert ev["local"] > 100 * max(ev["noise"], 2.0**-23) and "introduced" in p.reason
