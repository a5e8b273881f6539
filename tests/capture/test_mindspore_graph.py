"""MindSpore GRAPH_MODE capture: Cell forward outputs through in-graph probes, restoration."""

from __future__ import annotations

import numpy as np
import pytest

ms = pytest.importorskip("mindspore", reason="MindSpore is not installed")

from mindspore import nn  # noqa: E402

from netparity.frameworks.mindspore.capture import capture  # noqa: E402
from netparity.trace import open_trace  # noqa: E402


class MLP(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(4, 8)
        self.act = nn.ReLU()
        self.fc2 = nn.Dense(8, 3)

    def construct(self, x):
        return self.fc2(self.act(self.fc1(x)))


def _reference(w: dict[str, np.ndarray], x: np.ndarray) -> dict[str, np.ndarray]:
    """Each Cell's forward output, by numpy, for the weights ``w``."""
    h = x @ w["fc1.weight"].T + w["fc1.bias"]
    a = np.maximum(h, 0)
    y = a @ w["fc2.weight"].T + w["fc2.bias"]
    return {"fc1": h, "act": a, "fc2": y, "": y}


@pytest.fixture
def graph_mode():
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        yield
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def test_graph_mode_cell_outputs(graph_mode, tmp_path):
    ms.set_seed(0)
    net = MLP()
    classes = {name: type(c) for name, c in net.cells_and_names()}
    constructs = {name: type(c).construct for name, c in net.cells_and_names()}
    opt = nn.SGD(net.trainable_params(), learning_rate=0.5)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    target = rng.standard_normal((5, 3)).astype(np.float32)

    def loss_fn(xb, tb):
        return ((net(xb) - tb) ** 2).mean()

    grad_fn = ms.value_and_grad(loss_fn, None, opt.parameters)
    expected = []
    with capture(net, tmp_path / "t", payload="tensors", optimizer=opt) as cap:
        for _ in range(2):
            expected.append(_reference({p.name: p.asnumpy().copy()
                                        for p in net.trainable_params()}, x))
            loss, grads = grad_fn(ms.Tensor(x), ms.Tensor(target))
            opt(grads)
            cap.record_loss(loss)
            cap.step()
        notes = list(cap.notes)
    assert any("GRAPH_MODE" in n and "probe" in n for n in notes)

    # restored: each Cell has its own class (and construct) back
    for name, c in net.cells_and_names():
        assert type(c) is classes[name] and type(c).construct is constructs[name]
        assert "_netparity_probe" not in vars(c)

    tr = open_trace(tmp_path / "t")
    assert tr.steps() == [0, 1]
    for step in (0, 1):
        fwd = tr.records(step=step, kind="module", direction="forward")
        by_mod = {r.module: r for r in fwd}
        assert set(by_mod) == {"", "fc1", "act", "fc2"} and len(fwd) == 4
        for path, ref in expected[step].items():
            r = by_mod[path]
            assert r.role == "output" and r.call == 0 and r.shape == ref.shape
            np.testing.assert_allclose(tr.tensor(r), ref, rtol=1e-5, atol=1e-6)
        assert by_mod["fc1"].native == "mindspore.nn.Dense" and by_mod["fc1"].op == "linear"
        assert by_mod["act"].native == "mindspore.nn.ReLU"
    # the two steps saw different weights
    assert not np.allclose(expected[0]["fc2"], expected[1]["fc2"])
