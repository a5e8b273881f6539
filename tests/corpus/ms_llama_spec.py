"""An independent MindSpore port (PyNative) of the LLaMA decoder of ``llama_spec``, for
``netparity step`` against it: the candidate side of a cross-framework LLM pair.

Written the way Meta's reference code names things, not like transformers: ``tok_embeddings``
(a MindSpore ``nn.Embedding``, whose table is ``embedding_table``), ``layers.N.attention.wq/wk/
wv/wo``, ``layers.N.feed_forward.w1/w2/w3`` (w1 the gate, w2 the down projection, w3 the up
projection: not transformers' order), ``attention_norm``, ``ffn_norm``, ``norm``, ``output``. The
rotary tables and the causal mask are constants the attention owns (no rotary module, no
buffers). The weights come from the reference through the mapping netparity finds itself: the
spec gives no ``name_map``.

The faithful port matches transformers: RMSNorm ``x * rsqrt(mean(x^2) + eps) * weight`` with eps
1e-5 computed in float32, rotate-half rotary embeddings with theta 10000, each key/value head
shared by consecutive query heads (``repeat_interleave``), the causal mask added before a float32
softmax, ``mindspore.experimental.optim.AdamW`` (bias-corrected, decoupled decay, eps 1e-8),
clipping to global norm 1 and the reference's warmup. Mistakes (``bug=``), each a classic
LLM-port error:

* ``rms-eps``          RMSNorm eps 1e-6 (transformers' ``LlamaConfig`` default, Meta's
                       LLaMA-2 uses 1e-5): forward, the first norm;
* ``norm-plus-one``    RMSNorm scaled by ``(1 + weight)`` (Gemma's convention) on LLaMA weights:
                       forward, the first norm;
* ``rope-interleaved`` rotary applied to interleaved pairs (2i, 2i+1) as in Meta's complex-number
                       code, on weights converted for rotate-half: forward, the first attention;
* ``rope-theta``       rope theta 500000 (LLaMA-3's) instead of 10000: forward, the first
                       attention;
* ``gqa-repeat``       key/value heads repeated as a block (``tile``) instead of each head
                       repeated in place (``repeat_interleave``): query head 1 reads key head 1
                       instead of 0: forward, the first attention;
* ``adamw-eps``        AdamW eps 1e-6 (MindSpore's ``nn.AdamWeightDecay`` default) instead of
                       1e-8: the update phase, at the first parameter (the embedding, whose
                       gradients are the smallest).

Options: bug, steps (3); the data, learning rates and sizes are ``llama_spec``'s.
"""

from __future__ import annotations

from typing import Any

BUGS = ("rms-eps", "norm-plus-one", "rope-interleaved", "rope-theta", "gqa-repeat",
        "adamw-eps")

#: where a correct diagnosis names each bug: (phase, place, step) in the reference's names
FOUND_AT = {
    "rms-eps": ("forward", "model.layers.0.input_layernorm", 0),
    "norm-plus-one": ("forward", "model.layers.0.input_layernorm", 0),
    "rope-interleaved": ("forward", "model.layers.0.self_attn", 0),
    "rope-theta": ("forward", "model.layers.0.self_attn", 0),
    "gqa-repeat": ("forward", "model.layers.0.self_attn", 0),
    # a setting that changes each parameter's update by its own amount (no ratio shared by
    # every parameter, as a learning rate gives): named by optimizer replay at the first
    # parameter whose update differs
    "adamw-eps": ("update", "model.embed_tokens", 0),
}


def _cells(bug: str | None) -> Any:
    import mindspore as ms
    import numpy as np
    from mindspore import nn, ops
    from tests.corpus import llama_spec as cfg

    HIDDEN, INTER, HEADS, KV_HEADS = cfg.HIDDEN, cfg.INTER, cfg.HEADS, cfg.KV_HEADS
    head_dim = HIDDEN // HEADS

    class RMSNorm(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.eps = 1e-6 if bug == "rms-eps" else cfg.RMS_EPS
            self.weight = ms.Parameter(ms.Tensor(np.ones(HIDDEN, np.float32)), name="weight")

        def construct(self, x: ms.Tensor) -> ms.Tensor:
            h = x.astype(ms.float32)
            h = h * ops.rsqrt(ops.mean(h * h, -1, keep_dims=True) + self.eps)
            scale = 1 + self.weight if bug == "norm-plus-one" else self.weight
            return scale * h.astype(x.dtype)

    def rotary_tables() -> tuple[ms.Tensor, ms.Tensor]:
        theta = 500000.0 if bug == "rope-theta" else cfg.ROPE_THETA
        inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32)
                              / head_dim)
        freqs = np.outer(np.arange(cfg.SEQ, dtype=np.float32), inv).astype(np.float32)
        if bug == "rope-interleaved":
            emb = np.repeat(freqs, 2, axis=-1)  # frequency i on dims 2i and 2i+1
        else:
            emb = np.concatenate([freqs, freqs], axis=-1)  # frequency i on dims i and i+d/2
        return ms.Tensor(np.cos(emb).astype(np.float32)), ms.Tensor(np.sin(emb).astype(np.float32))

    def rotate(x: ms.Tensor) -> ms.Tensor:
        if bug == "rope-interleaved":  # (x0, x1, x2, x3...) -> (-x1, x0, -x3, x2...)
            pairs = ops.stack((-x[..., 1::2], x[..., 0::2]), -1)
            return pairs.reshape(x.shape)
        half = x.shape[-1] // 2
        return ops.concat((-x[..., half:], x[..., :half]), -1)

    class Attention(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.wq = nn.Dense(HIDDEN, HEADS * head_dim, has_bias=False)
            self.wk = nn.Dense(HIDDEN, KV_HEADS * head_dim, has_bias=False)
            self.wv = nn.Dense(HIDDEN, KV_HEADS * head_dim, has_bias=False)
            self.wo = nn.Dense(HEADS * head_dim, HIDDEN, has_bias=False)
            self.cos, self.sin = rotary_tables()
            mask = np.triu(np.ones((cfg.SEQ, cfg.SEQ), np.float32), 1) * np.finfo(np.float32).min
            self.mask = ms.Tensor(mask.astype(np.float32))

        def construct(self, x: ms.Tensor) -> ms.Tensor:
            b, s, _ = x.shape
            q = self.wq(x).reshape(b, s, HEADS, head_dim).transpose(0, 2, 1, 3)
            k = self.wk(x).reshape(b, s, KV_HEADS, head_dim).transpose(0, 2, 1, 3)
            v = self.wv(x).reshape(b, s, KV_HEADS, head_dim).transpose(0, 2, 1, 3)
            cos, sin = self.cos[:s], self.sin[:s]
            q = q * cos + rotate(q) * sin
            k = k * cos + rotate(k) * sin
            if bug == "gqa-repeat":
                k = ops.tile(k, (1, HEADS // KV_HEADS, 1, 1))
                v = ops.tile(v, (1, HEADS // KV_HEADS, 1, 1))
            else:
                k = ops.repeat_interleave(k, HEADS // KV_HEADS, 1)
                v = ops.repeat_interleave(v, HEADS // KV_HEADS, 1)
            scores = ops.matmul(q, k.swapaxes(-2, -1)) * head_dim ** -0.5 + self.mask[:s, :s]
            probs = ops.softmax(scores.astype(ms.float32), -1).astype(q.dtype)
            out = ops.matmul(probs, v).transpose(0, 2, 1, 3).reshape(b, s, HEADS * head_dim)
            return self.wo(out)

    class FeedForward(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.w1 = nn.Dense(HIDDEN, INTER, has_bias=False)  # gate
            self.w2 = nn.Dense(INTER, HIDDEN, has_bias=False)  # down
            self.w3 = nn.Dense(HIDDEN, INTER, has_bias=False)  # up

        def construct(self, x: ms.Tensor) -> ms.Tensor:
            return self.w2(ops.silu(self.w1(x)) * self.w3(x))

    class TransformerBlock(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.attention, self.feed_forward = Attention(), FeedForward()
            self.attention_norm, self.ffn_norm = RMSNorm(), RMSNorm()

        def construct(self, x: ms.Tensor) -> ms.Tensor:
            h = x + self.attention(self.attention_norm(x))
            return h + self.feed_forward(self.ffn_norm(h))

    class Transformer(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.tok_embeddings = nn.Embedding(cfg.VOCAB, HIDDEN)
            self.layers = nn.CellList([TransformerBlock() for _ in range(cfg.LAYERS)])
            self.norm = RMSNorm()
            self.output = nn.Dense(HIDDEN, cfg.VOCAB, has_bias=False)

        def construct(self, ids: ms.Tensor) -> ms.Tensor:
            h = self.tok_embeddings(ids)
            for layer in self.layers:
                h = layer(h)
            return self.output(self.norm(h)).astype(ms.float32)

    return Transformer()


def build(**options: Any) -> dict[str, Any]:
    """Build the MindSpore LLaMA, its data, AdamW and the one-step callable."""
    import mindspore as ms
    import numpy as np
    from mindspore import ops
    from mindspore.experimental import optim
    from tests.corpus import llama_spec

    bug = options.get("bug")
    if bug not in (None, *BUGS):
        raise ValueError(f"unknown bug {bug!r}; choose from {', '.join(BUGS)}")
    steps = int(options.get("steps", 3))
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_seed(0)
    model = _cells(bug)
    lrs = llama_spec.learning_rates(steps)
    params = model.trainable_params()
    decay = [p for p in params if p.ndim >= 2]
    flat = [p for p in params if p.ndim < 2]
    optimizer = optim.AdamW([{"params": decay, "weight_decay": llama_spec.WEIGHT_DECAY},
                             {"params": flat, "weight_decay": 0.0}], lr=llama_spec.LR,
                            eps=1e-6 if bug == "adamw-eps" else 1e-8)
    # The warmup through a scheduler: setting ``param_groups[i]["lr"]`` by hand is not seen by
    # the optimizer's compiled update, which keeps the first step's learning rate (netparity
    # named that in the later-steps phase: "every parameter's update is 0.5x the reference's").
    scheduler = optim.lr_scheduler.LambdaLR(
        optimizer, lambda k: lrs[min(int(k), steps - 1)] / llama_spec.LR)
    vocab = llama_spec.VOCAB

    def forward(ids: ms.Tensor) -> ms.Tensor:
        logits = model(ids)
        return ops.cross_entropy(logits[:, :-1].reshape(-1, vocab), ids[:, 1:].reshape(-1))

    ordered = decay + flat  # the optimizer's order: gradients are handed over in it
    grad_fn = ms.value_and_grad(forward, None, ordered)

    class Step:
        def __init__(self) -> None:
            self.k = 0

        def __call__(self, ids: Any, _labels: Any) -> float:
            model.set_train(True)
            loss, grads = grad_fn(ms.Tensor(np.asarray(ids, np.int32)))
            grads = ops.clip_by_global_norm(ms.mutable(grads), llama_spec.CLIP)
            optimizer(ms.mutable(grads))  # mutable: compiled code takes the tensors as variables
            scheduler.step()
            self.k += 1
            return float(loss.asnumpy())

    return {"framework": "mindspore", "model": model,
            "batches": llama_spec.make_batches(steps), "optimizer": optimizer,
            "lr_schedule": lrs, "train_step": Step(),
            "description": f"MindSpore LLaMA port (Meta's names), experimental AdamW + clipping "
                           f"+ warmup, bug {bug}"}
