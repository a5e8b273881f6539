"""``cap.record_grads`` with parameters whose ``.name`` cannot be assigned (as in libraries that
expose it as a read-only property): gradients are recorded under the parameters' own names, and
capture never tries to rename a parameter."""

from __future__ import annotations

import numpy as np
import pytest

ms = pytest.importorskip("mindspore", reason="MindSpore is not installed")

from netparity.frameworks.mindspore.capture import capture  # noqa: E402
from netparity.trace import open_trace  # noqa: E402


def _read_only_names(net, monkeypatch):
    """Make the parameters' ``name`` a read-only property, for this test only (MindSpore's
    Parameter classes are shared: monkeypatch puts the property back afterwards)."""
    for p in net.get_parameters():
        if isinstance(type(p).__dict__.get("name"), property) and type(p).name.fset is None:
            continue
        monkeypatch.setattr(type(p), "name", property(ms.Parameter.name.fget))
    for p in net.get_parameters():
        with pytest.raises(AttributeError):
            p.name = "renamed"


def test_record_grads_with_read_only_parameter_names(tmp_path, monkeypatch):
    from mindspore import nn

    class Net(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Dense(3, 2)

        def construct(self, x):
            return self.fc(x)

    ms.set_seed(0)
    net = Net()
    _read_only_names(net, monkeypatch)
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


def test_torch_record_grads_names_parameters_by_identity(tmp_path):
    """``torch.autograd.grad`` never fills ``.grad``: ``record_grads`` records the gradients
    under the model's parameter names (PyTorch parameters have no name of their own), once
    per step, and only the ones asked for."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    import netparity

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    params = list(model.parameters())
    x = torch.randn(5, 3)
    with netparity.capture(model, str(tmp_path / "t"), payload="tensors") as cap:
        grads = torch.autograd.grad(model(x).square().sum(), params)
        assert all(p.grad is None for p in params)
        assert cap.record_grads(grads[:2], params[:2]) == 2
        assert cap.record_grads(grads, params) == 2  # the first two were recorded already
        assert cap.record_grads([torch.ones(1)], [torch.nn.Parameter(torch.ones(1))]) == 0
        cap.step()
    t = open_trace(tmp_path / "t")
    got = {r.module: t.tensor(r) for r in t.records(kind="grad")}
    names = [n for n, _ in model.named_parameters()]
    assert sorted(got) == sorted(names)
    for n, g in zip(names, grads):
        np.testing.assert_array_equal(got[n], g.numpy())
