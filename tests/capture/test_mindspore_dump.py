"""MindSpore graph-mode dump (real run on CPU in a subprocess) -> netparity trace; CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("mindspore", reason="MindSpore is not installed")

from netparity.cli import main  # noqa: E402
from netparity.errors import TraceError, UsageError  # noqa: E402
from netparity.frameworks.mindspore.dump import (  # noqa: E402
    import_dump,
    scope_module,
    write_dump_config,
)
from netparity.trace import open_trace  # noqa: E402

SCRIPT = textwrap.dedent(
    """
    import sys, numpy as np, mindspore as ms
    from mindspore import nn, Tensor
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(0)
    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 2, 3, pad_mode="pad", padding=1)
            self.bn = nn.BatchNorm2d(2)
            self.relu = nn.ReLU()
            self.fc = nn.Dense(32, 3)
        def construct(self, x):
            x = self.relu(self.bn(self.conv1(x)))
            return self.fc(x.reshape(x.shape[0], -1))
    net = Net()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    step = nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.Momentum(net.trainable_params(), 0.1, 0.9))
    x = Tensor(np.random.default_rng(0).random((2, 1, 4, 4), dtype=np.float32))
    y = Tensor(np.array([0, 1], np.int32))
    for _ in range(2):
        step(x, y)
    np.save(sys.argv[1], net.fc.bias.asnumpy())
    """
)


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    d = tmp_path_factory.mktemp("msdump")
    cfg = d / "dump.json"
    assert main(["msdump", "config", "-o", str(cfg), "--dir", str(d / "out")]) == 0
    (d / "train.py").write_text(SCRIPT)
    env = dict(os.environ, MINDSPORE_DUMP_CONFIG=str(cfg), GLOG_v="3")
    r = subprocess.run([sys.executable, str(d / "train.py"), str(d / "bias.npy")], env=env,
                       cwd=d, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return d


def test_config_file():
    import tempfile

    p = write_dump_config(os.path.join(tempfile.mkdtemp(), "c.json"), "rel", iteration="0|2-3")
    c = json.loads(p.read_text())
    assert os.path.isabs(c["common_dump_settings"]["path"])
    assert c["common_dump_settings"]["iteration"] == "0|2-3" and c["e2e_dump_settings"]["enable"]
    with pytest.raises(UsageError):
        write_dump_config("x.json", "d", iteration="zero")


def test_scope_to_module():
    assert scope_module("Default/network-WithLossCell/_backbone-Net/conv1-Conv2d/Conv2D-op1") == (
        "conv1", "forward")
    assert scope_module("Gradients/Default/network-WithLossCell/_backbone-Net/bn-BatchNorm2d/"
                        "Grad_BatchNorm/BatchNormGrad-op0") == ("bn", "backward")
    assert scope_module("Default/optimizer-Momentum/ApplyMomentum-op0") == ("", "update")
    assert scope_module("Default/network-WithLossCell/_backbone-Net/Reshape-op0") == ("", "forward")


def test_import_real_dump(dump, tmp_path):
    out = tmp_path / "trace"
    assert main(["msdump", "import", str(dump / "out"), "-o", str(out)]) == 0
    tr = open_trace(out)
    assert tr.steps() == [0, 1] and tr.manifest["framework"] == "mindspore"
    fwd = tr.records(step=0, kind="op", direction="forward")
    mods = {(r.module, r.native) for r in fwd}
    assert {("conv1", "Conv2D"), ("bn", "BatchNorm"), ("relu", "ReLU"), ("fc", "MatMul")} <= mods
    assert tr.records(step=0, kind="op", direction="backward", op="conv_backward")
    conv = [r for r in fwd if r.native == "Conv2D" and r.role == "output"][0]
    assert conv.shape == (2, 2, 4, 4) and conv.op == "conv"
    # statistics agree with the stored payload
    arr = tr.tensor(conv)
    assert conv.stats["max"] == pytest.approx(float(arr.max()))
    # the Parameter dump of the last step is the trained value the script saved
    bias = [r for r in tr.records(step=1, kind="param") if r.module == "fc_bias"][0]
    np.testing.assert_array_equal(tr.tensor(bias), np.load(dump / "bias.npy"))
    # forward ops precede backward ops in execution order
    seq = [r.direction for r in tr.records(step=0, kind="op")]
    assert seq.index("backward") > seq.index("forward")


def test_bad_dump_dir(tmp_path):
    with pytest.raises(TraceError):
        import_dump(tmp_path / "missing", tmp_path / "t")
    (tmp_path / "empty").mkdir()
    assert main(["msdump", "import", str(tmp_path / "empty"), "-o", str(tmp_path / "t")]) == 2
