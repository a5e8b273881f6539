"""A spec for ``netparity step``: Hugging Face transformers' GPT-2 (nobody here wrote it) as a
small causal language model, trained as its users train it -- AdamW with no weight decay on
biases and LayerNorm weights (the Trainer's grouping), gradient clipping to norm 1, a linear
warmup -- as the reference; the same code with one option changed as the candidate.

Faithful candidates: the same run in float64 (``dtype=``) or on another thread count
(``threads=``). Candidates with one classic mistake each (``bug=``):

* ``gelu-exact``        exact GELU where GPT-2 uses the tanh approximation (``gelu_new``):
                        forward, the first block's MLP activation;
* ``ln-eps``            LayerNorm epsilon 1e-6 (timm/ViT's) where GPT-2 uses 1e-5: forward, the
                        first LayerNorm;
* ``attn-layer-scale``  attention logits also scaled by 1/(layer index + 1) (the
                        ``scale_attn_by_inverse_layer_idx`` option of later GPT-2 variants): no
                        effect in block 0, forward at the second block's attention;
* ``no-shift``          the loss computed on unshifted logits and labels (each position
                        predicts itself instead of the next token): the loss phase, every
                        forward output agreeing;
* ``decay-all``         weight decay on every parameter, biases and LayerNorm weights included:
                        the update of the first LayerNorm weight.

GPT-2's causal mask fills the masked logits with ``finfo.min``: the noise run must not turn them
into -inf. Gradient clipping changes the gradients after they are captured: optimizer replay
reads the clipping factor off AdamW's first moment after the step.

``dropout=`` sets GPT-2's three dropout rates (0 by default; transformers' own default is 0.1):
the workflow seeds every side for each step, so a faithful pair draws the same masks.

Options: dtype, threads, bug, dropout (0), steps (3), hand_loss (the loss written out by hand:
an equivalent rewrite).
"""

from __future__ import annotations

from typing import Any

BUGS = ("gelu-exact", "ln-eps", "attn-layer-scale", "no-shift", "decay-all")

#: where a correct diagnosis names each bug: (phase, place, step)
FOUND_AT = {
    "gelu-exact": ("forward", "transformer.h.0.mlp.act", 0),
    "ln-eps": ("forward", "transformer.h.0.ln_1", 0),
    "attn-layer-scale": ("forward", "transformer.h.1.attn", 0),
    "no-shift": ("loss", "loss", 0),
    "decay-all": ("update", "transformer.h.0.ln_1", 0),
}

VOCAB, SEQ, BATCH = 256, 32, 4


def transformers_module() -> Any:
    """transformers, importable with the CPU torch (it imports torchvision when installed)."""
    from tests.corpus.models import torchvision_models

    torchvision_models()  # defines the missing torchvision operator schemas, then imports it
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def causal_lm_step(model: Any, optimizer: Any, lrs: list[float], vocab: int, *,
                   shift: bool = True, clip: float = 1.0, hand_loss: bool = False) -> Any:
    """The one-step callable of a causal LM trained as LLM users train one: the step's
    learning rate from ``lrs``, next-token cross-entropy on the float32 logits (``shift=False``:
    each position predicts itself, a mistake), backward, clipping to global norm ``clip``, the
    optimizer's step. Shared by the GPT-2 and LLaMA specs. ``hand_loss``: the same loss written
    out as ports often write it (log-softmax, gather, masked mean): an equivalent rewrite."""
    import torch

    class Step:
        def __init__(self) -> None:
            self.k = 0

        def __call__(self, ids: Any, _labels: Any) -> float:
            model.train()
            for g in optimizer.param_groups:
                g["lr"] = lrs[min(self.k, len(lrs) - 1)]
            optimizer.zero_grad(set_to_none=True)
            x = torch.as_tensor(ids)
            logits = model(x).logits.float()
            if shift and hand_loss:
                logp = torch.log_softmax(logits[:, :-1].reshape(-1, vocab), dim=-1)
                target = x[:, 1:].reshape(-1)
                mask = (target >= 0).to(logp.dtype)  # an ignore-index mask, all kept here
                picked = logp.gather(1, target.clamp(min=0)[:, None]).squeeze(1)
                loss = -(picked * mask).sum() / mask.sum()
            elif shift:
                loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, vocab),
                                                         x[:, 1:].reshape(-1))
            else:
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), x.reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            self.k += 1
            return float(loss.detach())

    return Step()


def build(**options: Any) -> dict[str, Any]:
    """Build GPT-2, its token batches, AdamW and the one-step callable (module docstring)."""
    import numpy as np
    import torch
    from tests.corpus.vit_spec import common_options

    dtype, bug = common_options(options, BUGS)
    steps = int(options.get("steps", 3))
    drop = float(options.get("dropout", 0.0))
    transformers = transformers_module()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4,
        resid_pdrop=drop, embd_pdrop=drop, attn_pdrop=drop, bos_token_id=0, eos_token_id=0,
        activation_function="gelu" if bug == "gelu-exact" else "gelu_new",
        layer_norm_epsilon=1e-6 if bug == "ln-eps" else 1e-5,
        scale_attn_by_inverse_layer_idx=bug == "attn-layer-scale",
        attn_implementation="eager")
    model = transformers.GPT2LMHeadModel(cfg).to(dtype)
    rng = np.random.default_rng(1)
    batches = [(rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int64),
                np.zeros(BATCH, np.int64)) for _ in range(steps)]  # labels: the ids, shifted
    lrs = [1e-3 * min(1.0, (k + 1) / 2) for k in range(steps)]
    flat = [p for p in model.parameters() if p.ndim < 2]
    decay = [p for p in model.parameters() if p.ndim >= 2]
    groups = ([{"params": decay + flat, "weight_decay": 0.01}] if bug == "decay-all" else
              [{"params": decay, "weight_decay": 0.01}, {"params": flat, "weight_decay": 0.0}])
    optimizer = torch.optim.AdamW(groups, lr=lrs[0])
    return {"framework": "torch", "model": model, "batches": batches, "optimizer": optimizer,
            "lr_schedule": lrs,
            "train_step": causal_lm_step(model, optimizer, lrs, VOCAB, shift=bug != "no-shift",
                                         hand_loss=bool(options.get("hand_loss"))),
            "description": f"transformers GPT-2 (2 blocks, 64 wide), AdamW + clipping, {dtype}"}
