"""PyTorch <-> MindSpore: MindSpore's own loader and writer, a CNN converted and run in both."""

from __future__ import annotations

import numpy as np
import pytest

from netparity.ckpt import convert, diff, load_checkpoint, map_names, save_checkpoint
from netparity.ckpt.io import CheckpointDict
from netparity.dtypes import decode, encode_bf16

ms = pytest.importorskip("mindspore", reason="MindSpore not installed")
torch = pytest.importorskip("torch", reason="PyTorch not installed")
from mindspore import nn as msnn  # noqa: E402
from torch import nn as tnn  # noqa: E402


def sample() -> CheckpointDict:
    rng = np.random.default_rng(1)
    ck = CheckpointDict()
    ck["w32"] = rng.standard_normal((3, 4)).astype(np.float32)
    ck["w16"] = rng.standard_normal(6).astype(np.float16)
    ck["i32"] = np.array([3, -1], np.int32)
    ck["i64"] = np.array(12345678901, np.int64)
    ck["flag"] = np.array([True, False, False])
    ck["bf"] = encode_bf16(rng.standard_normal((2, 2)).astype(np.float32))
    ck.dtypes["bf"] = "bfloat16"
    return ck


@pytest.mark.parametrize("use_mindspore", [True, False])
def test_mindspore_loads_what_we_write(tmp_path, use_mindspore):
    ck = sample()
    p = save_checkpoint(ck, tmp_path / "w.ckpt", use_mindspore=use_mindspore)
    got = ms.load_checkpoint(str(p))
    assert list(got) == list(ck)
    for k, v in ck.items():
        par = got[k]
        if ck.dtype(k) == "bfloat16":
            assert par.dtype == ms.bfloat16
            assert np.array_equal(par.astype(ms.float32).asnumpy(), decode(v, "bfloat16"))
        else:
            assert par.asnumpy().dtype == v.dtype and np.array_equal(par.asnumpy(), v), k
            assert par.shape == v.shape


def test_we_read_what_mindspore_writes(tmp_path):
    ck = sample()
    items = []
    for k, v in ck.items():
        t = ms.Tensor(decode(v, "bfloat16"), ms.bfloat16) if k == "bf" else ms.Tensor(v)
        items.append({"name": k, "data": t})
    for crc in (False, True):
        p = tmp_path / f"ms{int(crc)}.ckpt"
        ms.save_checkpoint(items, str(p), crc_check=crc, append_dict={"epoch": 3, "tag": "x"})
        got = load_checkpoint(p)
        assert [k for k in got if k != "epoch"] == list(ck)
        for k, v in ck.items():
            assert got.dtype(k) == ck.dtype(k) and np.array_equal(got[k], v), k
        assert got["epoch"].tolist() == 3 and got.extras["tag"] == "x"


class TorchCNN(tnn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = tnn.Conv2d(3, 8, 3, padding=1, bias=True)
        self.bn1 = tnn.BatchNorm2d(8)
        self.relu = tnn.ReLU()
        self.conv2 = tnn.Conv1d(8, 6, 3, padding=1, bias=True)  # MindSpore: (out, in, 1, k)
        self.fc = tnn.Linear(6, 5)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))  # (n, 8, h, w)
        x = x.flatten(2)  # (n, 8, h*w)
        x = self.conv2(x).mean(dim=2)
        return self.fc(x)


class MsCNN(msnn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = msnn.Conv2d(3, 8, 3, pad_mode="pad", padding=1, has_bias=True)
        self.bn1 = msnn.BatchNorm2d(8, momentum=0.9, eps=1e-5)  # = 1 - PyTorch momentum
        self.relu = msnn.ReLU()
        self.conv2 = msnn.Conv1d(8, 6, 3, pad_mode="pad", padding=1, has_bias=True)
        self.classifier = msnn.Dense(6, 5)

    def construct(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = x.reshape(x.shape[0], x.shape[1], -1)
        x = self.conv2(x).mean(axis=2)
        return self.classifier(x)


def trained_torch_cnn() -> TorchCNN:
    torch.manual_seed(0)
    net = TorchCNN()
    with torch.no_grad():  # non-trivial BatchNorm statistics and affine parameters
        net.bn1.running_mean.uniform_(-0.5, 0.5)
        net.bn1.running_var.uniform_(0.5, 2.0)
        net.bn1.weight.uniform_(0.5, 1.5)
        net.bn1.bias.uniform_(-0.2, 0.2)
        net.bn1.num_batches_tracked.fill_(7)
    return net.eval()


def test_cnn_torch_to_mindspore_runs_the_same(tmp_path):
    tnet = trained_torch_cnn()
    torch.save(tnet.state_dict(), tmp_path / "ref.pth")
    mnet = MsCNN()
    rep = convert(tmp_path / "ref.pth", tmp_path / "cand.ckpt", template=mnet)
    assert rep, rep.missing
    assert rep.names["fc.weight"] == "classifier.weight" and rep.how["fc.weight"] == "structure"
    assert rep.names["bn1.running_var"] == "bn1.moving_variance"
    assert rep.reshaped["conv2.weight"] == [(6, 8, 3), (6, 8, 1, 3)]
    assert "bn1.num_batches_tracked" in rep.dropped
    params = ms.load_checkpoint(str(tmp_path / "cand.ckpt"))
    not_loaded, unused = ms.load_param_into_net(mnet, params)
    assert not_loaded == [] and unused == []
    mnet.set_train(False)
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(np.float32)
    want = tnet(torch.from_numpy(x)).detach().numpy()
    got = mnet(ms.Tensor(x)).asnumpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # and the converted file is the same weights as the source, parameter by parameter
    d = diff(tmp_path / "ref.pth", tmp_path / "cand.ckpt", a_model=tnet, b_model=mnet)
    assert d, d.to_json()
    assert d.counts_ref.trainable_tensors == 8 and d.counts_cand.trainable_tensors == 8
    assert d.counts_ref.tensors == 11 and d.counts_cand.tensors == 10  # stats + counter


def test_mindspore_back_to_torch_with_template(tmp_path):
    tnet = trained_torch_cnn()
    mnet = MsCNN()
    convert(tnet, tmp_path / "cand.ckpt", template=mnet)
    fresh = TorchCNN().eval()
    rep = convert(tmp_path / "cand.ckpt", tmp_path / "back.pt", template=fresh)
    assert rep and rep.reshaped["conv2.weight"] == [(6, 8, 1, 3), (6, 8, 3)]
    fresh.load_state_dict(torch.load(tmp_path / "back.pt", weights_only=True))
    for (k, a), b in zip(tnet.state_dict().items(), fresh.state_dict().values()):
        if not k.endswith("num_batches_tracked"):  # MindSpore keeps no counter
            assert torch.equal(a, b), k


def test_layernorm_embedding_prelu_against_mindspore_cell(tmp_path):
    class T(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = tnn.Embedding(10, 4)
            self.norm = tnn.LayerNorm(4)
            self.act = tnn.PReLU()

    class M(msnn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.tok = msnn.Embedding(10, 4)
            self.norm = msnn.LayerNorm((4,))
            self.act = msnn.PReLU()

    t, m = T(), M()
    nm = map_names(t, m)
    assert nm and {p.ref: (p.cand, p.how) for p in nm.pairs} == {
        "tok.weight": ("tok.embedding_table", "rule"),
        "norm.weight": ("norm.gamma", "rule"),
        "norm.bias": ("norm.beta", "rule"),
        "act.weight": ("act.w", "rule"),
    }
    # rules alone (no template) need the model's layer types for PReLU and Embedding
    rep = convert(t, tmp_path / "x.ckpt", src_model=t)
    assert sorted(rep.names.values()) == ["act.w", "norm.beta", "norm.gamma",
                                          "tok.embedding_table"]
    not_loaded, _ = ms.load_param_into_net(m, ms.load_checkpoint(str(tmp_path / "x.ckpt")))
    assert not_loaded == []


def test_diff_after_one_sgd_step_finds_exactly_the_updated_params():
    net = trained_torch_cnn()
    net.conv1.weight.requires_grad_(False)  # frozen: must not be reported
    before = {k: v.clone() for k, v in net.state_dict().items()}
    opt = torch.optim.SGD([p for p in net.parameters() if p.requires_grad], lr=0.1)
    x = torch.randn(2, 3, 6, 6)
    net(x).square().mean().backward()
    opt.step()
    after = net.state_dict()
    changed = sorted(k for k in before if not torch.equal(before[k], after[k]))
    assert changed and "conv1.weight" not in changed
    d = diff(before, after, a_model=net, b_model=net)
    assert not d and sorted(d.differing()) == changed
    assert all(p.ok for p in d.params if p.ref not in changed)


def test_resnet18_maps_without_rules_like_the_example_mapping():
    from netparity.examples.resnet import ms_resnet, torch_resnet, weights

    t, m = torch_resnet.resnet18(num_classes=10), ms_resnet.resnet18(num_classes=10)
    for ref_model, cand_model in ((None, None), (t, m)):
        nm = map_names(t.state_dict(), m.parameters_dict(), ref_model=ref_model,
                       cand_model=cand_model)
        assert nm, (nm.unmatched_ref, nm.unmatched_cand, nm.ambiguous)
        want = {k: weights.torch_to_ms_name(k, 18) for k in t.state_dict()}
        assert {p.ref: p.cand for p in nm.pairs} == {k: v for k, v in want.items() if v}
