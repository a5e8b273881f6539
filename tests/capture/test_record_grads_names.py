"""``cap.record_grads`` with parameters whose ``.name`` cannot be assigned (as in libraries that
expose it as a read-only property): gradients are recorded under the parameters' own names, and
capture never tries to rename a parameter."""

from __future__ import annotations

import numpy as np
import pytest

ms = pytest.importorskip("mindspore", reason="MindSpore is not installed")

from netparity.frameworks.mindspore.capture import capture  # noqa: E402
from netparity.trace import open_trace  # noqa: E402


def _read_only_names(net):
    """Make every parameter's ``name`` a read-only property (MindSpore gives each Parameter
    its own class, so this touches nothing else)."""
    for p in net.get_parameters():
        type(p).name = property(ms.Parameter.name.fget)
        with pytest.raises(AttributeError):
            p.name = "renamed"


def test_record_grads_with_read_only_parameter_names(tmp_path):
    from mindspore import nn

    class Net(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Dense(3, 2)

        def construct(self, x):
            return self.fc(x)

    ms.set_seed(0)
    net = Net()
    _read_only_names(net)
    params = net.trainable_params()
    grad_fn = ms.value_and_grad(lambda x: net(x).sum(), None, params)
    x = ms.Tensor(np.arange(12, dtype=np.float32).reshape(4, 3))
    _, grads = grad_fn(x)  # computed outside the capture: only record_grads sees them
    with capture(net, tmp_path / "t", payload="tensors") as cap:
        assert cap.record_grads(grads, params) == 2
        assert cap.record_grads(grads, params) == 0  # once per step
        cap.step()
    assert not cap.errors
    t = open_trace(tmp_path / "t")
    got = {r.module: t.tensor(r) for r in t.records(kind="grad")}
    assert sorted(got) == ["fc.bias", "fc.weight"]
    for p, g in zip(params, grads):
        np.testing.assert_array_equal(got[p.name], g.asnumpy())
    assert [p.name for p in net.get_parameters()] == ["fc.weight", "fc.bias"]
