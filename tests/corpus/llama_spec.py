"""A spec for ``netparity step``: Hugging Face transformers' LLaMA (``LlamaForCausalLM``, nobody
here wrote it) as a small causal language model -- RMSNorm, rotary position embeddings
(rotate-half), grouped-query attention (4 query heads sharing 2 key/value heads), a SiLU-gated
MLP -- trained as LLM users train it: AdamW with weight decay on the matrices only, gradient
clipping to norm 1 and a linear warmup. The reference side of the LLaMA corpus pair; the
candidate is the independent MindSpore port in ``ms_llama_spec``.

Faithful candidates of this spec against itself: ``dtype=float64`` or another thread count
(``threads=``).

Options: dtype, threads, steps (3).
"""

from __future__ import annotations

from typing import Any

VOCAB, SEQ, BATCH = 256, 16, 2
HIDDEN, INTER, LAYERS, HEADS, KV_HEADS = 64, 128, 2, 4, 2
RMS_EPS, ROPE_THETA, LR, WEIGHT_DECAY, CLIP = 1e-5, 10000.0, 1e-3, 0.1, 1.0


def learning_rates(steps: int) -> list[float]:
    """A linear warmup over two steps, then constant: the schedule both sides use."""
    return [LR * min(1.0, (k + 1) / 2) for k in range(steps)]


def make_batches(steps: int) -> list[tuple[Any, Any]]:
    """Deterministic token batches (ids, unused labels: the labels are the ids, shifted)."""
    import numpy as np

    rng = np.random.default_rng(1)
    return [(rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int64), np.zeros(BATCH, np.int64))
            for _ in range(steps)]


def build(**options: Any) -> dict[str, Any]:
    """Build LLaMA, its token batches, AdamW and the one-step callable (module docstring)."""
    import torch
    from tests.corpus.gpt2_spec import causal_lm_step, transformers_module
    from tests.corpus.vit_spec import common_options

    dtype, _ = common_options({**options, "bug": None}, ())  # the bugs are the port's
    steps = int(options.get("steps", 3))
    transformers = transformers_module()
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER,
        num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
        max_position_embeddings=64, rms_norm_eps=RMS_EPS, rope_theta=ROPE_THETA,
        hidden_act="silu", tie_word_embeddings=False, attention_bias=False,
        attn_implementation="eager")
    model = transformers.LlamaForCausalLM(cfg).to(dtype)
    lrs = learning_rates(steps)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    flat = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                                   {"params": flat, "weight_decay": 0.0}], lr=lrs[0])

    return {"framework": "torch", "model": model, "batches": make_batches(steps),
            "optimizer": optimizer, "lr_schedule": lrs,
            "train_step": causal_lm_step(model, optimizer, lrs, VOCAB, clip=CLIP),
            "description": f"transformers LLaMA (2 layers, 64 wide, GQA 4/2), AdamW + clipping "
                           f"+ warmup, {dtype}"}
