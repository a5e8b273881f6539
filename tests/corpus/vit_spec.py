"""A spec for ``netparity step``: timm's Vision Transformer (nobody here wrote it), trained with
AdamW, as the reference; the same code with one option changed as the candidate.

Faithful candidates: the same run in float64 or bfloat16 (``dtype=``) or on another thread
count (``threads=2``). Candidates with one classic transformer-migration mistake (``bug=``), each the
kind of default that differs between PyTorch and MindSpore or between libraries:

* ``gelu-tanh``   the MLP's GELU in its tanh approximation (MindSpore ``nn.GELU`` defaults to
                  ``approximate=True``; PyTorch's and timm's GELU are exact): forward, first
                  block's MLP activation;
* ``ln-eps``      LayerNorm epsilon 1e-5 (the ``nn.LayerNorm`` default) where timm's ViT uses
                  1e-6: forward, the first LayerNorm;
* ``attn-scale``  attention logits scaled by 1/sqrt(embed dim) instead of 1/sqrt(head dim):
                  forward, the first attention;
* ``adam-l2``     ``Adam(weight_decay=)`` (L2 added to the gradient) instead of ``AdamW``
                  (decoupled decay): the update of the first decayed weight;
* ``adam-beta2``  beta2 0.98 (a common transformer setting) instead of 0.999: invisible at step
                  0 (bias correction), the update of step 1 differs.

The key bias of every attention has a gradient that is zero in exact arithmetic (softmax is
invariant to a constant shift per query), so Adam sees noise-level gradients there: a faithful
candidate must not be failed on them.

Options: dtype, threads, bug, steps (3), batch_size (4), image_size (32), seed (0), lr (1e-3).
"""

from __future__ import annotations

from typing import Any

BUGS = ("gelu-tanh", "ln-eps", "attn-scale", "adam-l2", "adam-beta2")

#: where a correct diagnosis names each bug: (phase, place, step)
FOUND_AT = {
    "gelu-tanh": ("forward", "blocks.0.mlp.act", 0),
    "ln-eps": ("forward", "blocks.0.norm1", 0),
    "attn-scale": ("forward", "blocks.0.attn", 0),
    "adam-l2": ("update", "patch_embed.proj", 0),
    "adam-beta2": ("later-steps", "patch_embed.proj", 1),
}


def timm_module() -> Any:
    """timm, importable with the CPU torch (see tests/corpus/models.py for torchvision)."""
    from tests.corpus.models import torchvision_models

    torchvision_models()  # defines the missing torchvision operator schemas, then imports it
    import timm
    import timm.layers

    timm.layers.set_fused_attn(False)  # the explicit attention, whose scale a port writes out
    return timm


def make_batches(seed: int, steps: int, batch: int, size: int, classes: int) -> list[Any]:
    """Deterministic (images, labels) numpy batches, the same for every side."""
    import numpy as np

    rng = np.random.default_rng(seed + 1)
    return [(rng.standard_normal((batch, 3, size, size)).astype(np.float32),
             rng.integers(0, classes, batch).astype(np.int32)) for _ in range(steps)]


def common_options(options: dict[str, Any], bugs: tuple[str, ...]) -> tuple[Any, str | None]:
    """The options every torch corpus spec takes: ``dtype`` (returned as a torch dtype),
    ``bug`` (checked against ``bugs``) and ``threads`` (applied)."""
    import torch

    dtype = {"float32": torch.float32, "float64": torch.float64,
             "bfloat16": torch.bfloat16}[options.get("dtype", "float32")]
    bug = options.get("bug")
    if bug not in (None, *bugs):
        raise ValueError(f"unknown bug {bug!r}; choose from {', '.join(bugs)}")
    if options.get("threads"):
        torch.set_num_threads(int(options["threads"]))
    return dtype, bug


def classifier_spec(model: Any, batches: Any, optimizer: Any, dtype: Any, lr_schedule: list[float],
                    description: str, *, ignore_index: int = -100,
                    scheduler: Any = None) -> dict[str, Any]:
    """The spec of a PyTorch image classifier trained with cross-entropy (``ignore_index``
    labels left out): its ``loss_fn`` and one-step ``train_step`` (``train_step.last_grads``
    holds the parameter gradients of its last call) with the model, batches, optimizer and
    learning rates given; a ``scheduler`` is stepped after every update."""
    import numpy as np
    import torch

    def loss_fn(output: torch.Tensor, labels: Any) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(output, torch.as_tensor(labels).long(),
                                                 ignore_index=ignore_index)

    class Step:
        def __init__(self) -> None:
            self.last_grads: dict[str, np.ndarray] = {}

        def __call__(self, images: Any, labels: Any) -> float:
            model.train()
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(torch.as_tensor(images).to(dtype)), labels)
            loss.backward()
            self.last_grads = {n: p.grad.detach().double().numpy()
                               for n, p in model.named_parameters() if p.grad is not None}
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            return float(loss.detach())

    return {
        "framework": "torch",
        "model": model,
        "batches": batches,
        "loss_fn": loss_fn,
        "optimizer": optimizer,
        "lr_schedule": lr_schedule,
        "train_step": Step(),
        "description": description,
    }


def build(**options: Any) -> dict[str, Any]:
    """Build the ViT, its data, AdamW and one-step callable (see the module docstring)."""
    import torch

    dtype, bug = common_options(options, BUGS)
    steps, batch = int(options.get("steps", 3)), int(options.get("batch_size", 4))
    size, seed, lr = int(options.get("image_size", 32)), int(options.get("seed", 0)), \
        float(options.get("lr", 1e-3))
    classes = 10

    timm = timm_module()
    torch.manual_seed(seed)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=size,
                              patch_size=8, num_classes=classes, depth=4, drop_rate=0.0)
    if bug == "gelu-tanh":
        model.blocks[0].mlp.act = torch.nn.GELU(approximate="tanh")
    if bug == "ln-eps":
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.eps = 1e-5
    if bug == "attn-scale":
        for blk in model.blocks:
            blk.attn.scale = model.embed_dim ** -0.5
    model = model.to(dtype)

    batches = make_batches(seed, steps, batch, size, classes)

    decay = [p for n, p in model.named_parameters()
             if p.ndim >= 2 and n not in ("cls_token", "pos_embed")]
    rest = [p for n, p in model.named_parameters()
            if not (p.ndim >= 2 and n not in ("cls_token", "pos_embed"))]
    groups = [{"params": decay, "weight_decay": 0.05}, {"params": rest, "weight_decay": 0.0}]
    betas = (0.9, 0.98) if bug == "adam-beta2" else (0.9, 0.999)
    optimizer = (torch.optim.Adam if bug == "adam-l2" else torch.optim.AdamW)(
        groups, lr=lr, betas=betas)

    return classifier_spec(model, batches, optimizer, dtype, [lr] * steps,
                           f"timm ViT (4 blocks, {size}px, patch 8), AdamW, {dtype}, bug {bug}")
