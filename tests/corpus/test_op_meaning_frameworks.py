"""Ops paired by meaning on real captures: PyTorch's ``nn.Linear`` (``aten.addmm(bias, x,
w.t())``) and ``torch.linalg.vector_norm`` against a MindSpore port that runs ``nn.Dense``
(``MatMul`` + ``BiasAdd``) and the norm as ``square``, ``sum``, ``sqrt``: each pairs as one
computation, and the faithful port passes at op level."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
ms = pytest.importorskip("mindspore", reason="MindSpore is not installed")

import netparity  # noqa: E402
from netparity.align import align_traces  # noqa: E402
from netparity.trace import open_trace  # noqa: E402


def _models():
    from mindspore import nn, ops

    class Ref(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(32, 32)

        def forward(self, x):
            h = torch.tanh(self.fc(x))
            return h / torch.linalg.vector_norm(h, dim=-1, keepdim=True)

    class Port(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Dense(32, 32)

        def construct(self, x):
            h = ops.tanh(self.fc(x))
            return ops.div(h, ops.sqrt(ops.sum(ops.square(h), -1, keepdim=True)))

    torch.manual_seed(0)
    ref, port = Ref(), Port()
    port.fc.weight.set_data(ms.Tensor(ref.fc.weight.detach().numpy()))
    port.fc.bias.set_data(ms.Tensor(ref.fc.bias.detach().numpy()))
    return ref, port


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("meaning")
    ref, port = _models()
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    for payload in ("stats", "tensors"):
        with torch.no_grad(), netparity.capture(ref, str(root / f"ref-{payload}"), level="op",
                                                payload=payload) as cap:
            ref(torch.from_numpy(x))
            cap.step()
        ms.set_context(mode=ms.PYNATIVE_MODE)
        with netparity.capture(port, str(root / f"cand-{payload}"), level="op",
                               payload=payload) as cap:
            port(ms.Tensor(x))
            cap.step()
    return root


def test_linear_and_norm_pair_as_computations(traces):
    al = align_traces(open_trace(traces / "ref-stats"), open_trace(traces / "cand-stats"),
                      level="op")
    pairs = [([c.op for c in m.ref], [c.op for c in m.cand]) for m in al.matches]
    assert (["linear"], ["matmul", "add"]) in pairs
    assert (["linalg_vector_norm"], ["square", "sum", "sqrt"]) in pairs
    assert (["tanh"], ["tanh"]) in pairs and (["div"], ["div"]) in pairs
    assert not al.unmatched_cand
    # what stays unmatched on the PyTorch side only rearranges data (the weight's transpose)
    assert {c.op for c in al.unmatched_ref} <= {"transpose", "identity"}


@pytest.mark.parametrize("payload", ["stats", "tensors"])
def test_faithful_port_passes_at_op_level(traces, payload):
    r = netparity.compare(traces / f"ref-{payload}", traces / f"cand-{payload}", level="op")
    assert r, [(p.key, p.reason) for p in r.pairs if p.status != "pass"]
    assert all(p.status == "pass" for p in r.pairs)
    assert not [p for p in r.pairs if "shape mismatch" in p.reason]
