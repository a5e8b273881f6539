"""The framework registry: detection by discovery, subclasses from other libraries, stub modules
under a framework's name, dtype names that do not trust ``str()``, and the capture facade."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from netparity.errors import FrameworkError
from netparity.frameworks import registry
from netparity.frameworks.base import FrameworkAdapter
from netparity.frameworks.registry import adapter_for, framework_of, get_adapter
from netparity.trace import open_trace

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
ms = pytest.importorskip("mindspore", reason="MindSpore is not installed")


class ThirdPartyNet(torch.nn.Module):
    """A model class as another library would define it: a subclass of a subclass."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class Deeper(ThirdPartyNet):
    pass


Deeper.__module__ = "somelib.models"  # as if it came from another package


class ThirdPartyCell(ms.nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.dense = ms.nn.Dense(3, 2)

    def construct(self, x):  # type: ignore[no-untyped-def]
        return self.dense(x)


def test_numpy_objects_survive_a_stub_jax_module(monkeypatch: pytest.MonkeyPatch) -> None:
    # a module named after a framework that is not the framework (here: no jax installed)
    monkeypatch.setitem(sys.modules, "jax", types.ModuleType("jax"))
    registry._BY_TYPE.clear()
    assert adapter_for(np.zeros(3)).name == "numpy"
    assert adapter_for(np.float32(1.0)).name == "numpy"


def test_a_stub_registered_framework_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    # a registry entry whose subpackage cannot be imported (framework half-installed)
    monkeypatch.setitem(registry.FRAMEWORKS, "fakefw", "netparity.frameworks.no_such_package")
    monkeypatch.setitem(sys.modules, "fakefw", types.ModuleType("fakefw"))
    registry._BY_TYPE.clear()
    assert adapter_for(np.zeros(2)).name == "numpy"
    assert adapter_for(torch.zeros(2)).name == "torch"
    with pytest.raises(FrameworkError, match="fakefw is not installed"):
        get_adapter("fakefw")


def test_unknown_names_and_objects_are_framework_errors() -> None:
    with pytest.raises(FrameworkError, match="unknown framework 'jax'"):
        get_adapter("jax")
    with pytest.raises(FrameworkError, match="no framework adapter for objects of type"):
        adapter_for(object())
    with pytest.raises(FrameworkError, match="not a model of any imported framework"):
        framework_of(np.zeros(3))


def test_subclasses_from_other_libraries_are_models_of_their_framework() -> None:
    assert framework_of(Deeper()) == "torch"
    assert adapter_for(Deeper()).name == "torch"
    assert framework_of(ThirdPartyCell()) == "mindspore"
    assert adapter_for(ThirdPartyCell()).name == "mindspore"
    assert adapter_for(torch.optim.SGD(Deeper().parameters(), lr=0.1)).name == "torch"
    net = ThirdPartyCell()
    assert adapter_for(ms.nn.Momentum(net.trainable_params(), 0.1, 0.9)).name == "mindspore"


def test_every_registered_adapter_implements_the_base() -> None:
    for name in registry.FRAMEWORKS:
        a = get_adapter(name)
        assert isinstance(a, FrameworkAdapter) and a.name == name and a.module == name


def test_mindspore_dtype_names_do_not_use_str(monkeypatch: pytest.MonkeyPatch) -> None:
    # a third-party library patching the dtype class's __str__ must not change dtype names
    t = ms.Tensor(np.zeros(2, np.float32))
    bf = t.astype(ms.bfloat16)
    monkeypatch.setattr(type(ms.float32), "__str__", lambda self: "Patched")
    monkeypatch.setattr(type(ms.bfloat16), "__str__", lambda self: "Patched")
    a = get_adapter("mindspore")
    assert str(ms.float32) == "Patched"
    assert a.dtype_name(t) == "float32" and a.dtype_name(bf) == "bfloat16"


def test_torch_dtype_names_cover_every_exported_dtype() -> None:
    a = get_adapter("torch")
    assert a.dtype_name(torch.zeros(1, dtype=torch.bfloat16)) == "bfloat16"
    assert a.dtype_name(torch.zeros(1, dtype=torch.complex32)) == "complex32"  # not "chalf"
    assert a.dtype_name(torch.zeros(1, dtype=torch.half)) == "float16"


def test_capture_facade_finds_the_framework_of_a_subclass(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import netparity.capture.policy  # noqa: F401 - binds the package to netparity.capture

    assert callable(netparity.capture)
    model = Deeper()
    with netparity.capture(model, str(tmp_path / "t")) as cap:
        model(torch.ones(1, 3)).sum().backward()
        cap.step()
    mods = {r.module for r in open_trace(tmp_path / "t").records(kind="module")}
    assert mods == {"", "body", "body.0", "body.1"}
    with pytest.raises(FrameworkError, match="capture needs a model"):
        netparity.capture(np.zeros(2), str(tmp_path / "u"))


def test_model_helpers_dispatch_through_the_registry() -> None:
    from netparity.frameworks import models

    counts = models.param_counts(Deeper())
    assert (counts.total, counts.tensors) == (8, 2)
    net = ThirdPartyCell()
    done = models.set_weights(net, {"dense.bias": np.array([1.0, 2.0], np.float32)})
    assert done == ["dense.bias"] and net.dense.bias.asnumpy().tolist() == [1.0, 2.0]
    assert isinstance(models.as_tensor(np.ones(2), "torch"), torch.Tensor)
    assert float(models.scalar_tensor(2.5, "mindspore").asnumpy()) == 2.5


def test_capture_defaults_per_framework() -> None:
    assert get_adapter("torch").capture_defaults() == {}
    expected = ms.get_context("device_target") == "CPU"
    assert get_adapter("mindspore").capture_defaults() == {"launch_blocking": expected}
