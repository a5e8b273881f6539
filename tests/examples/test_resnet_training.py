"""ResNet demo training pieces: LR schedule, loss, weight-decay groups, steps, specs, bugs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from netparity.errors import UsageError
from netparity.examples.resnet.schedule import HParams, cosine_lr


def test_cosine_lr_warmup_and_decay_values() -> None:
    lr = cosine_lr(0.0, 0.0, 0.4, total_steps=10, warmup_steps=4)
    assert lr[:4] == pytest.approx([0.1, 0.2, 0.3, 0.4])  # linear, reaching lr_max at step 3
    # step 4: linear (10-4)/6 = 1, cosine 0.5 * (1 + cos(2*pi*0.47*4/6))
    assert lr[4] == pytest.approx(0.4 * (0.5 * (1 + math.cos(2 * math.pi * 0.47 * 4 / 6)) + 1e-5))
    assert lr[-1] == pytest.approx(
        0.4 * ((1 / 6) * 0.5 * (1 + math.cos(2 * math.pi * 0.47 * 9 / 6)) + 1e-5)
    )
    assert all(0 < v <= 0.4 for v in lr)


def test_warmup_bug_is_one_step_late() -> None:
    good = cosine_lr(0.0, 0.0, 0.4, 10, 4)
    bad = cosine_lr(0.0, 0.0, 0.4, 10, 4, bug="warmup")
    assert bad[0] == 0.0 and bad[1:4] == pytest.approx(good[:3])
    assert bad[4:] == good[4:]
    with pytest.raises(UsageError):
        cosine_lr(0.0, 0.0, 0.1, 3, 5)


def test_hparams_are_the_documents() -> None:
    hp = HParams()
    assert (hp.momentum, hp.weight_decay, hp.label_smooth) == (0.875, 1 / 32768, 0.1)


torch = pytest.importorskip("torch")
ms = pytest.importorskip("mindspore")

from netparity.examples.resnet import ms_resnet, ms_train, torch_resnet, torch_train, weights  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _pynative():
    ms.set_context(mode=ms.PYNATIVE_MODE)


def test_label_smoothing_loss_equal_on_both_sides() -> None:
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal((5, 7)) * 3).astype(np.float32)
    labels = np.array([0, 6, 3, 3, 1])
    lt = torch_train.CrossEntropySmooth(0.1, 7)(torch.from_numpy(logits), torch.from_numpy(labels))
    lm = ms_train.CrossEntropySmooth(smooth_factor=0.1, num_classes=7)(
        ms.Tensor(logits), ms.Tensor(labels.astype(np.int32))
    )
    # Independent numpy reference of the document's smoothing (off value s / (C - 1)).
    target = np.full((5, 7), 0.1 / 6)
    target[np.arange(5), labels] = 0.9
    logp = (
        logits
        - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True))
        - logits.max(1, keepdims=True)
    )
    expected = float(-(target * logp).sum(1).mean())
    assert float(lt) == pytest.approx(expected, rel=1e-5)
    assert float(lm.asnumpy()) == pytest.approx(expected, rel=1e-5)


def test_weight_decay_groups_exclude_bn_and_biases() -> None:
    tnet = torch_resnet.resnet18(num_classes=4)
    groups = torch_train.param_groups(tnet)
    names = {id(p): n for n, p in tnet.named_parameters()}
    decayed = {names[id(p)] for p in groups[0]["params"]}
    plain = {names[id(p)] for p in groups[1]["params"]}
    assert groups[0]["weight_decay"] == 1 / 32768 and groups[1]["weight_decay"] == 0.0
    assert all(n.endswith(".weight") and "bn" not in n and "downsample.1" not in n for n in decayed)
    assert {"fc.bias", "bn1.weight", "bn1.bias", "layer2.0.downsample.1.weight"} <= plain
    assert "fc.weight" in decayed and "conv1.weight" in decayed

    mnet = ms_resnet.resnet18(num_classes=4)
    mg = ms_train.param_groups(mnet)
    mdecayed = {p.name for p in mg[0]["params"]}
    mplain = {p.name for p in mg[1]["params"]}
    # Same split as the PyTorch side, through the name mapping.
    assert mdecayed == {weights.torch_to_ms_name(n, 18) for n in decayed}
    assert mplain == {weights.torch_to_ms_name(n, 18) for n in plain}
    assert [p.name for p in mg[2]["order_params"]] == [p.name for p in mnet.trainable_params()]
    bad = ms_train.param_groups(mnet, bug="bn-decay")
    assert len(bad[0]["params"]) == len(mnet.trainable_params())


def _pair(depth: int = 18, classes: int = 4, bug: str | None = None):
    state = weights.make_weights(depth, classes, seed=2)
    tnet = torch_resnet.FACTORIES[depth](num_classes=classes)
    torch_resnet.load_numpy_state(tnet, state)
    mnet = ms_resnet.FACTORIES[depth](num_classes=classes, bug=bug)
    ms_resnet.load_numpy_state(mnet, weights.torch_to_ms_state(state, depth))
    return tnet, mnet


def _one_step(bug: str | None = None, lr: float = 0.05):
    tnet, mnet = _pair(bug=bug)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 64, 64)).astype(np.float32)
    y = np.array([1, 3])
    topt = torch_train.make_optimizer(tnet, lr)
    tloss, tgrads = torch_train.train_step(tnet, torch_train.CrossEntropySmooth(0.1, 4), topt, x, y)
    step = ms_train.TrainStep(
        mnet,
        ms_train.CrossEntropySmooth(smooth_factor=0.1, num_classes=4),
        ms_train.make_optimizer(mnet, [lr], bug=bug),
    )
    mloss = step(x, y.astype(np.int32))
    return (
        tloss,
        mloss,
        tgrads,
        step.last_grads,
        torch_resnet.numpy_state(tnet),
        ms_resnet.numpy_state(mnet),
    )


def test_one_training_step_matches_on_both_sides() -> None:
    tloss, mloss, tg, mg, ts, msd = _one_step()
    assert tloss == pytest.approx(mloss, rel=1e-5)
    assert len(tg) == len(mg) == 62
    for name, g in tg.items():
        other = mg[weights.torch_to_ms_name(name, 18)]
        assert np.abs(g - other).max() <= 1e-4 * max(1.0, float(np.abs(g).max())), name
    for name, v in ts.items():
        assert np.abs(v - msd[weights.torch_to_ms_name(name, 18)]).max() <= 1e-4, name


def test_bn_decay_bug_changes_only_the_update_of_bn_and_biases() -> None:
    _, _, _, _, ts, msd = _one_step(bug="bn-decay", lr=1.0)
    gamma = "layer1.0.bn1.weight"  # gamma starts at 1: decay moves it by lr * wd
    diff_gamma = np.abs(ts[gamma] - msd[weights.torch_to_ms_name(gamma, 18)])
    assert float(np.median(diff_gamma)) == pytest.approx(1 / 32768, rel=0.05)
    conv = "layer1.0.conv1.weight"
    assert np.abs(ts[conv] - msd[weights.torch_to_ms_name(conv, 18)]).max() < 1e-5


def test_eval_mode_bug_uses_batch_statistics() -> None:
    tnet, mnet = _pair(bug="eval-mode")
    x = np.random.default_rng(3).standard_normal((4, 3, 32, 32)).astype(np.float32) * 2 + 1
    y = np.array([0, 1, 2, 3])
    good = torch_train.evaluate(tnet, [(x, y)])
    bad = ms_train.evaluate(mnet, [(x, y.astype(np.int32))], bug="eval-mode")
    ok = ms_train.evaluate(_pair()[1], [(x, y.astype(np.int32))])
    assert ok["loss"] == pytest.approx(good["loss"], rel=1e-4)
    assert abs(bad["loss"] - good["loss"]) > 1e-3
    # the reference can reproduce the buggy evaluation on purpose
    assert torch_train.evaluate(tnet, [(x, y)], train_mode=True)["loss"] == pytest.approx(
        bad["loss"], rel=1e-3
    )


def test_training_loops_write_checkpoints(tmp_path) -> None:
    tnet, mnet = _pair()
    b = [
        (
            np.random.default_rng(4).standard_normal((2, 3, 32, 32)).astype(np.float32),
            np.array([0, 1]),
        )
    ]
    tres = torch_train.train(tnet, b, [0.01, 0.01], 4, ckpt_dir=tmp_path / "t", save_every=1)
    mres = ms_train.train(
        mnet, [(b[0][0], b[0][1].astype(np.int32))], [0.01, 0.01], 4, ckpt_dir=tmp_path / "m"
    )
    assert len(tres.losses) == len(mres.losses) == 2
    assert [p.name for p in tres.checkpoints] == ["resnet-1.pt", "resnet-2.pt"]
    assert [p.name for p in mres.checkpoints] == ["resnet-2.ckpt"]
    loaded = torch.load(tres.checkpoints[-1], weights_only=True)
    assert torch.equal(loaded["fc.bias"], tnet.fc.bias.detach())
    params = ms.load_checkpoint(str(mres.checkpoints[-1]))
    np.testing.assert_array_equal(params["end_point.bias"].asnumpy(), mnet.end_point.bias.asnumpy())
    assert torch_train.evaluate(tnet, b)["count"] == 2.0
