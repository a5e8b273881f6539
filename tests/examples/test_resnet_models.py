"""ResNet demo models: torchvision facts, MindSpore port parity, injected model bugs."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ms = pytest.importorskip("mindspore")

from netparity.errors import MappingError, UsageError  # noqa: E402
from netparity.examples.resnet import bugs, ms_resnet, torch_resnet, weights  # noqa: E402

# Public facts about torchvision's models (1000 classes).
TORCHVISION_PARAMS = {18: 11_689_512, 34: 21_797_672, 50: 25_557_032}
TORCHVISION_STATE_KEYS = {18: 122, 50: 320}  # state_dict() keys incl. num_batches_tracked


@pytest.fixture(scope="module", autouse=True)
def _pynative():
    ms.set_context(mode=ms.PYNATIVE_MODE)


@pytest.mark.parametrize("depth", [18, 34, 50])
def test_torch_param_count_equals_torchvision(depth: int) -> None:
    model = torch_resnet.FACTORIES[depth]()
    assert sum(p.numel() for p in model.parameters()) == TORCHVISION_PARAMS[depth]


@pytest.mark.parametrize("depth", [18, 50])
def test_torch_names_follow_torchvision(depth: int) -> None:
    keys = list(torch_resnet.FACTORIES[depth]().state_dict())
    assert len(keys) == TORCHVISION_STATE_KEYS[depth]
    assert keys[:6] == [
        "conv1.weight",
        "bn1.weight",
        "bn1.bias",
        "bn1.running_mean",
        "bn1.running_var",
        "bn1.num_batches_tracked",
    ]
    assert "layer2.0.downsample.0.weight" in keys and "layer2.0.downsample.1.running_var" in keys
    assert keys[-2:] == ["fc.weight", "fc.bias"]
    if depth == 50:
        assert "layer4.2.conv3.weight" in keys and "layer1.0.downsample.0.weight" in keys
    else:
        assert "layer1.0.downsample.0.weight" not in keys


def test_torch_init_is_torchvision_scheme() -> None:
    model = torch_resnet.resnet50()
    w = model.layer3[1].conv2.weight
    # kaiming_normal_(fan_out, relu): std = sqrt(2 / (out * k * k))
    expected = np.sqrt(2.0 / (256 * 9))
    assert abs(float(w.std()) - expected) / expected < 0.05
    assert torch.all(model.layer3[1].bn2.weight == 1) and torch.all(model.layer3[1].bn2.bias == 0)


@pytest.mark.parametrize("depth", [18, 50])
def test_ms_port_has_same_params_pairwise(depth: int) -> None:
    tp = list(torch_resnet.FACTORIES[depth]().named_parameters())
    mp = ms_resnet.FACTORIES[depth]().trainable_params()
    assert len(tp) == len(mp)
    assert sum(p.size for p in mp) == TORCHVISION_PARAMS[depth]
    for (tname, tparam), mparam in zip(tp, mp):
        assert tuple(tparam.shape) == tuple(mparam.shape), (tname, mparam.name)
        assert weights.torch_to_ms_name(tname, depth) == mparam.name


def test_ms_port_uses_document_names() -> None:
    names50 = {p.name for p in ms_resnet.resnet50().get_parameters()}
    assert "layer1.0.down_sample_layer.0.weight" in names50
    assert "layer1.0.down_sample_layer.1.moving_variance" in names50
    assert "end_point.weight" in names50 and "fc.weight" not in names50
    names18 = {p.name for p in ms_resnet.resnet18().get_parameters()}
    assert "layer1.0.bn1d.gamma" in names18 and "layer1.0.bn1.gamma" not in names18
    assert "bn1.gamma" in names18  # the stem keeps bn1


# A small explicit mapping (what a user would write by hand for this pair of models).
EXPLICIT = {
    "conv1.weight": "conv1.weight",
    "bn1.weight": "bn1.gamma",
    "bn1.running_var": "bn1.moving_variance",
    "layer2.0.downsample.1.bias": "layer2.0.down_sample_layer.1.beta",
    "layer3.1.bn2.running_mean": "layer3.1.bn2d.moving_mean",
    "fc.bias": "end_point.bias",
}


def test_name_mapping_matches_explicit_list() -> None:
    for tname, mname in EXPLICIT.items():
        assert weights.torch_to_ms_name(tname, depth=18) == mname
    assert weights.torch_to_ms_name("layer3.1.bn2.weight", depth=50) == "layer3.1.bn2.gamma"
    assert weights.torch_to_ms_name("bn1.num_batches_tracked", depth=18) is None


def _pair(depth: int, classes: int = 10, bug: str | None = None, seed: int = 1):
    state = weights.make_weights(depth, classes, seed=seed)
    tnet = torch_resnet.FACTORIES[depth](num_classes=classes)
    torch_resnet.load_numpy_state(tnet, state)
    mnet = ms_resnet.FACTORIES[depth](num_classes=classes, bug=bug)
    ms_resnet.load_numpy_state(mnet, weights.torch_to_ms_state(state, depth))
    return tnet, mnet


def _x(size: int, batch: int = 2) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((batch, 3, size, size)).astype(np.float32)


def _forward(tnet, mnet, x: np.ndarray, train: bool) -> tuple[np.ndarray, np.ndarray]:
    tnet.train(train)
    mnet.set_train(train)
    with torch.no_grad():
        yt = tnet(torch.from_numpy(x)).numpy()
    return yt, mnet(ms.Tensor(x)).asnumpy()


@pytest.mark.parametrize("depth", [18, 50])
def test_eval_forward_matches_after_weight_copy(depth: int) -> None:
    tnet, mnet = _pair(depth)
    yt, ym = _forward(tnet, mnet, _x(32), train=False)
    scale = max(1.0, float(np.abs(yt).max()))
    assert np.abs(yt - ym).max() <= 1e-4 * scale


def test_train_forward_and_running_stats_match() -> None:
    # 64 px: layer4 is 2x2, so batch statistics are not degenerate at batch 2.
    tnet, mnet = _pair(18)
    yt, ym = _forward(tnet, mnet, _x(64), train=True)
    assert np.abs(yt - ym).max() <= 1e-4
    st, sm = torch_resnet.numpy_state(tnet), ms_resnet.numpy_state(mnet)
    for key in ("bn1.running_mean", "bn1.running_var", "layer4.1.bn2.running_var"):
        np.testing.assert_allclose(st[key], sm[weights.torch_to_ms_name(key, 18)], atol=1e-5)


def test_load_rejects_wrong_state() -> None:
    _, mnet = _pair(18)
    state = weights.torch_to_ms_state(weights.make_weights(18, 3), 18)  # fc shape differs
    with pytest.raises(MappingError):
        ms_resnet.load_numpy_state(mnet, state)
    with pytest.raises(MappingError):
        torch_resnet.load_numpy_state(torch_resnet.resnet18(), {"conv1.weight": np.zeros(1)})


def test_bug_list_and_validation() -> None:
    assert set(bugs.BUGS) == {
        "bn-momentum",
        "bn-eps",
        "same-pad",
        "bn-decay",
        "warmup",
        "eval-mode",
        "relu-approx",
        "label-smooth",
        "lr-decay",
    }
    assert all(isinstance(v, str) and v for v in bugs.BUGS.values())
    with pytest.raises(UsageError):
        ms_resnet.resnet18(bug="no-such-bug")


def test_bug_bn_eps_changes_forward() -> None:
    tnet, mnet = _pair(18, bug="bn-eps")
    yt, ym = _forward(tnet, mnet, _x(32), train=False)
    assert np.abs(yt - ym).max() > 1e-3


@pytest.mark.parametrize(("depth", "where"), [(18, "layer2.0.conv1"), (50, "layer2.0.conv2")])
def test_bug_same_pad_changes_forward_at_one_place(depth: int, where: str) -> None:
    tnet, mnet = _pair(depth, bug="same-pad")
    assert mnet.bug_location == where
    conv = dict(mnet.cells_and_names())[where]
    assert conv.pad_mode == "same"
    others = [c for n, c in mnet.cells_and_names() if isinstance(c, ms.nn.Conv2d) and n != where]
    assert all(c.pad_mode in ("pad", "valid") for c in others)
    yt, ym = _forward(tnet, mnet, _x(32), train=False)
    assert np.abs(yt - ym).max() > 1e-3


def test_bug_bn_momentum_changes_running_stats_not_train_output() -> None:
    tnet, mnet = _pair(18, bug="bn-momentum")
    yt, ym = _forward(tnet, mnet, _x(64), train=True)
    assert np.abs(yt - ym).max() <= 1e-4  # batch statistics are unaffected
    st, sm = torch_resnet.numpy_state(tnet), ms_resnet.numpy_state(mnet)
    # PyTorch: 0.9 * 0 + 0.1 * mean; the bug keeps only 0.1 of the old value: 0.9 * mean.
    np.testing.assert_allclose(
        sm["bn1.moving_mean"], 9.0 * st["bn1.running_mean"], rtol=1e-3, atol=1e-6
    )
