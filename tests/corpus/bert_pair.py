"""A BERT-style encoder nobody here wrote (``transformers``' ``BertModel``, random init) and an
independent MindSpore port of it, for op-level comparisons.

The port follows BERT's architecture as its paper and ``modeling_bert`` describe it, written the
way a MindSpore user would: ``nn.Dense`` for every projection, ``nn.LayerNorm`` with BERT's
epsilon 1e-12 (MindSpore's default is 1e-7), exact GELU (``nn.GELU(approximate=False)``;
MindSpore's default is the tanh approximation), attention as batched ``MatMul`` + ``Softmax``.
Weights are copied by name through netparity's own checkpoint mapping (``gamma``/``beta``,
``embedding_table``), so the port keeps MindSpore's names.

Mistakes (``bug=``), each a MindSpore default a port picks up by accident:

* ``ln-eps``     the embeddings' ``LayerNorm`` with epsilon 1e-5 (PyTorch's ``nn.LayerNorm``
                 default, from a generic recipe) instead of BERT's 1e-12: the summed embeddings
                 have a variance of ~1e-3 (initialiser std 0.02), so it shifts that norm's output
                 by ~0.4 %. (MindSpore's own default, 1e-7, changes it by ~5e-5 relative, and
                 deeper norms, whose inputs have unit variance, by float32 rounding only.)
* ``gelu-tanh``  ``nn.GELU()`` (tanh approximation, MindSpore's default) in every intermediate
                 activation: ~1e-4 relative.

``transformers`` imports torchvision's image utilities; :func:`bert_model` makes torchvision
importable with the CPU torch first (see :mod:`tests.corpus.models`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

VOCAB, HIDDEN, HEADS, LAYERS, FFN, MAX_POS = 96, 64, 4, 2, 128, 32
BATCH, SEQ = 2, 16
BUGS = ("ln-eps", "gelu-tanh")

#: where an op-level comparison must name each mistake, in the reference's module names:
#: the first layer's module that runs the mistaken op
FOUND_AT = {
    "ln-eps": "embeddings.LayerNorm",
    "gelu-tanh": "encoder.layer.0.intermediate.intermediate_act_fn",
}


def bert_model(seed: int = 0) -> Any:
    """``transformers.BertModel`` with a small configuration and random weights, in eval mode
    (no dropout: the two frameworks' dropout masks could never agree)."""
    import pytest
    import torch
    from tests.corpus.models import torchvision_models

    pytest.importorskip("transformers", reason="transformers is not installed")
    torchvision_models()  # transformers imports torchvision: make it importable first
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                     num_attention_heads=HEADS, intermediate_size=FFN,
                     max_position_embeddings=MAX_POS, type_vocab_size=2)
    model = BertModel(cfg)
    model.eval()
    return model


def inputs(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Token ids and token-type ids, ``[BATCH, SEQ]`` int64."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, size=(BATCH, SEQ)).astype(np.int64)
    types = (np.arange(SEQ)[None, :] >= SEQ // 2).astype(np.int64).repeat(BATCH, 0)
    return ids, types


def ms_bert(bug: str | None = None) -> Any:
    """The MindSpore port (weights random until :func:`load_weights`)."""
    import mindspore as ms
    from mindspore import nn, ops

    if bug not in (None, *BUGS):
        raise ValueError(f"unknown bug {bug!r}; choose from {', '.join(BUGS)}")
    head_dim = HIDDEN // HEADS

    def layer_norm(eps: float = 1e-12) -> nn.Cell:
        return nn.LayerNorm((HIDDEN,), epsilon=eps)

    class Embeddings(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.word_embeddings = nn.Embedding(VOCAB, HIDDEN)
            self.position_embeddings = nn.Embedding(MAX_POS, HIDDEN)
            self.token_type_embeddings = nn.Embedding(2, HIDDEN)
            self.LayerNorm = layer_norm(1e-5 if bug == "ln-eps" else 1e-12)

        def construct(self, ids: ms.Tensor, types: ms.Tensor) -> ms.Tensor:
            pos = ops.arange(ids.shape[1]).reshape(1, -1)
            x = (self.word_embeddings(ids) + self.token_type_embeddings(types)
                 + self.position_embeddings(pos))
            return self.LayerNorm(x)

    class SelfAttention(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.query = nn.Dense(HIDDEN, HIDDEN)
            self.key = nn.Dense(HIDDEN, HIDDEN)
            self.value = nn.Dense(HIDDEN, HIDDEN)

        def heads(self, x: ms.Tensor) -> ms.Tensor:
            b, n, _ = x.shape
            return x.reshape(b, n, HEADS, head_dim).transpose(0, 2, 1, 3)

        def construct(self, x: ms.Tensor) -> ms.Tensor:
            q, k, v = self.heads(self.query(x)), self.heads(self.key(x)), self.heads(self.value(x))
            scores = ops.matmul(q, k.swapaxes(-1, -2)) * (head_dim ** -0.5)
            ctx = ops.matmul(ops.softmax(scores, -1), v)
            b, _, n, _ = ctx.shape
            return ctx.transpose(0, 2, 1, 3).reshape(b, n, HIDDEN)

    class SelfOutput(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.dense = nn.Dense(HIDDEN, HIDDEN)
            self.LayerNorm = layer_norm()

        def construct(self, h: ms.Tensor, x: ms.Tensor) -> ms.Tensor:
            return self.LayerNorm(self.dense(h) + x)

    class Attention(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.self = SelfAttention()
            self.output = SelfOutput()

        def construct(self, x: ms.Tensor) -> ms.Tensor:
            return self.output(self.self(x), x)

    class Intermediate(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.dense = nn.Dense(HIDDEN, FFN)
            self.intermediate_act_fn = nn.GELU(approximate=bug == "gelu-tanh")

        def construct(self, x: ms.Tensor) -> ms.Tensor:
            return self.intermediate_act_fn(self.dense(x))

    class Output(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.dense = nn.Dense(FFN, HIDDEN)
            self.LayerNorm = layer_norm()

        def construct(self, h: ms.Tensor, x: ms.Tensor) -> ms.Tensor:
            return self.LayerNorm(self.dense(h) + x)

    class Layer(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.attention = Attention()
            self.intermediate = Intermediate()
            self.output = Output()

        def construct(self, x: ms.Tensor) -> ms.Tensor:
            a = self.attention(x)
            return self.output(self.intermediate(a), a)

    class Encoder(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.CellList([Layer() for _ in range(LAYERS)])

        def construct(self, x: ms.Tensor) -> ms.Tensor:
            for blk in self.layer:
                x = blk(x)
            return x

    class Pooler(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.dense = nn.Dense(HIDDEN, HIDDEN)
            self.activation = nn.Tanh()

        def construct(self, x: ms.Tensor) -> ms.Tensor:
            return self.activation(self.dense(x[:, 0]))

    class Bert(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.embeddings = Embeddings()
            self.encoder = Encoder()
            self.pooler = Pooler()

        def construct(self, ids: ms.Tensor, types: ms.Tensor) -> tuple[ms.Tensor, ms.Tensor]:
            x = self.encoder(self.embeddings(ids, types))
            return x, self.pooler(x)

    net = Bert()
    net.set_train(False)
    return net


def load_weights(ref: Any, cand: Any) -> int:
    """Copy the PyTorch model's weights into the MindSpore port through netparity's checkpoint
    mapping (names, then structure); returns the number of tensors copied."""
    from netparity.ckpt.mapping import map_names, state_of
    from netparity.frameworks.models import set_weights

    rs, cs = state_of(ref), state_of(cand)
    nm = map_names(rs, cs, ref_model=ref, cand_model=cand)
    assert nm, (nm.unmatched_ref, nm.unmatched_cand, nm.ambiguous)
    nm.check_shapes()
    arrays = {p.cand: np.asarray(rs[p.ref]).reshape(p.cand_shape) for p in nm.pairs}
    set_weights(cand, arrays, {k: "float32" for k in arrays})
    return len(arrays)


def capture_torch(model: Any, path: Any, *, level: str = "op", payload: str = "tensors") -> None:
    """One forward pass of the PyTorch model under capture."""
    import torch

    import netparity

    ids, types = inputs()
    with torch.no_grad(), netparity.capture(model, str(path), level=level,
                                            payload=payload) as cap:
        out = model(input_ids=torch.from_numpy(ids), token_type_ids=torch.from_numpy(types))
        cap.record("pooled", out.pooler_output)
        cap.step()


def noise_copy(model: Any, seed: int = 1) -> Any:
    """A copy of the PyTorch model with every float weight moved one unit in the last place,
    up or down at random: its capture is the *noise run* that calibrates each tensor's
    tolerance (:mod:`netparity.compare.noise`)."""
    import copy

    import torch

    from netparity.compare.noise import perturb_last_bit

    rng = np.random.default_rng(seed)
    out = copy.deepcopy(model)
    with torch.no_grad():
        for p in out.parameters():
            p.copy_(torch.from_numpy(perturb_last_bit(p.detach().numpy(), rng)))
    return out


def capture_mindspore(model: Any, path: Any, *, level: str = "op",
                      payload: str = "tensors") -> None:
    """One forward pass of the MindSpore port under capture."""
    import mindspore as ms

    import netparity

    ids, types = inputs()
    ms.set_context(mode=ms.PYNATIVE_MODE)
    with netparity.capture(model, str(path), level=level, payload=payload) as cap:
        _, pooled = model(ms.Tensor(ids.astype(np.int32)), ms.Tensor(types.astype(np.int32)))
        cap.record("pooled", pooled)
        cap.step()


def table(out: Any, levels: tuple[str, ...] = ("module", "op", "both")) -> list[str]:
    """Capture the reference, its noise run and every port under ``out`` (``level="both"``),
    compare each at every level with the tolerance table and with the noise run, and return
    one line per comparison: what the README's corpus table quotes."""
    from collections import Counter
    from pathlib import Path

    import netparity

    root = Path(out)
    ref = bert_model()
    capture_torch(ref, root / "ref", level="both")
    capture_torch(noise_copy(ref), root / "noise", level="both")
    variants = (None, *BUGS)
    for bug in variants:
        cand = ms_bert(bug)
        load_weights(ref, cand)
        capture_mindspore(cand, root / f"cand-{bug or 'faithful'}", level="both")
    lines = [f"{'port':10} {'level':7} {'judged by':10} {'verdict':7} {'calls':>5} "
             f"{'pairs':>5}  pass/warn/fail   first divergence"]
    for bug in variants:
        for level in levels:
            for noise in (None, root / "noise"):
                r = netparity.compare(root / "ref", root / f"cand-{bug or 'faithful'}",
                                      level=level, noise_run=noise)
                n = Counter(p.status for p in r.pairs)
                counts = f"{n['pass']:>4}/{n['warn']}/{n['fail']}"
                fd = r.first_divergence
                lines.append(
                    f"{bug or 'faithful':10} {level:7} {'noise run' if noise else 'table':10} "
                    f"{'PASS' if r else 'FAIL':7} {len(r.calls):5} {len(r.pairs):5}  "
                    f"{counts:17}"
                    f"{fd.module + ' (' + fd.verdict + ')' if fd else '-'}")
    return lines


if __name__ == "__main__":  # python -m tests.corpus.bert_pair OUT_DIR
    import sys
    import tempfile

    for line in table(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()):
        print(line)
