"""A MindSpore port of timm's Vision Transformer (the configuration of ``vit_spec``), written
from timm's architecture, for ``netparity step`` against ``vit_spec``: the candidate side of a
cross-framework transformer pair.

The faithful port uses what matches PyTorch: exact GELU (``nn.GELU(approximate=False)``; the
MindSpore default is the tanh approximation), LayerNorm epsilon 1e-6 (MindSpore's default is
1e-7), and ``mindspore.experimental.optim.AdamW`` (bias-corrected, decoupled decay, eps 1e-8;
``mint.optim.AdamW`` has no CPU kernel). Mistakes (``bug=``),
each a MindSpore default or API a port picks up by accident:

* ``gelu-tanh``  ``nn.GELU()`` with its default tanh approximation in every block;
* ``ln-eps``     ``nn.LayerNorm`` with its default epsilon 1e-7;
* ``adamwd``     ``nn.AdamWeightDecay``: no bias correction (and eps 1e-6), so the first
                 update is ~3x PyTorch AdamW's;
* ``attn-scale`` the logits scaled by 1/sqrt(embed dim) instead of 1/sqrt(head dim).

Options: bug, steps (3), batch_size (4), image_size (32), seed (0), lr (1e-3); the data are
``vit_spec``'s.
"""

from __future__ import annotations

from typing import Any

BUGS = ("gelu-tanh", "ln-eps", "adamwd", "attn-scale")

#: where a correct diagnosis names each bug: (phase, place, step) in the reference's names
FOUND_AT = {
    "gelu-tanh": ("forward", "blocks.0.mlp.act", 0),
    "ln-eps": ("forward", "blocks.0.norm1", 0),
    "adamwd": ("update", "optimizer (update rule)", 0),
    "attn-scale": ("forward", "blocks.0.attn", 0),
}

EMBED, HEADS, DEPTH, PATCH, CLASSES = 192, 3, 4, 8, 10


def _cells(bug: str | None, size: int) -> Any:
    import mindspore as ms
    import numpy as np
    from mindspore import nn, ops

    eps = 1e-7 if bug == "ln-eps" else 1e-6

    def layer_norm() -> nn.Cell:
        return nn.LayerNorm((EMBED,), epsilon=eps)

    class Attention(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.head_dim = EMBED // HEADS
            self.scale = (EMBED if bug == "attn-scale" else self.head_dim) ** -0.5
            self.qkv = nn.Dense(EMBED, 3 * EMBED)
            self.proj = nn.Dense(EMBED, EMBED)

        def construct(self, x: ms.Tensor) -> ms.Tensor:
            b, n, c = x.shape
            qkv = self.qkv(x).reshape(b, n, 3, HEADS, self.head_dim).transpose(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            attn = ops.softmax(ops.matmul(q * self.scale, k.swapaxes(-2, -1)), -1)
            x = ops.matmul(attn, v).swapaxes(1, 2).reshape(b, n, c)
            return self.proj(x)

    class Mlp(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Dense(EMBED, 4 * EMBED)
            self.act = nn.GELU() if bug == "gelu-tanh" else nn.GELU(approximate=False)
            self.fc2 = nn.Dense(4 * EMBED, EMBED)

        def construct(self, x: ms.Tensor) -> ms.Tensor:
            return self.fc2(self.act(self.fc1(x)))

    class Block(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.attn = layer_norm(), Attention()
            self.norm2, self.mlp = layer_norm(), Mlp()

        def construct(self, x: ms.Tensor) -> ms.Tensor:
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    class PatchEmbed(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Conv2d(3, EMBED, PATCH, PATCH, pad_mode="valid", has_bias=True)

        def construct(self, x: ms.Tensor) -> ms.Tensor:
            x = self.proj(x)
            return x.reshape(x.shape[0], EMBED, -1).swapaxes(1, 2)

    class VisionTransformer(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            n = (size // PATCH) ** 2
            self.cls_token = ms.Parameter(ms.Tensor(np.zeros((1, 1, EMBED), np.float32)))
            self.pos_embed = ms.Parameter(ms.Tensor(np.zeros((1, n + 1, EMBED), np.float32)))
            self.patch_embed = PatchEmbed()
            self.blocks = nn.CellList([Block() for _ in range(DEPTH)])
            self.norm = layer_norm()
            self.head = nn.Dense(EMBED, CLASSES)

        def construct(self, x: ms.Tensor) -> ms.Tensor:
            x = self.patch_embed(x)
            cls = ops.broadcast_to(self.cls_token, (x.shape[0], 1, EMBED))
            x = ops.concat((cls, x), 1) + self.pos_embed
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.norm(x)[:, 0])

    return VisionTransformer()


def train_step(model: Any, grad_fn: Any, params: list[Any], optimizer: Any) -> Any:
    """A MindSpore image model's one-step callable: ``grad_fn(images, labels)`` (a
    ``value_and_grad`` over ``params``, in the optimizer's order), then the optimizer;
    ``.last_grads`` holds the parameter gradients of its last call."""
    import mindspore as ms
    import numpy as np

    class Step:
        def __init__(self) -> None:
            self.last_grads: dict[str, np.ndarray] = {}

        def __call__(self, images: Any, labels: Any) -> float:
            model.set_train(True)
            x = ms.Tensor(np.asarray(images, np.float32))
            loss, grads = grad_fn(x, ms.Tensor(np.asarray(labels, np.int32)))
            self.last_grads = {p.name: g.asnumpy() for p, g in zip(params, grads)}
            optimizer(grads)
            return float(loss.asnumpy())

    return Step()


def build(**options: Any) -> dict[str, Any]:
    """Build the MindSpore ViT, its data, optimizer and one-step callable."""
    import mindspore as ms
    import numpy as np
    from mindspore import nn, ops
    from mindspore.experimental import optim
    from tests.corpus import vit_spec

    bug = options.get("bug")
    if bug not in (None, *BUGS):
        raise ValueError(f"unknown bug {bug!r}; choose from {', '.join(BUGS)}")
    steps, batch = int(options.get("steps", 3)), int(options.get("batch_size", 4))
    size, seed, lr = int(options.get("image_size", 32)), int(options.get("seed", 0)), \
        float(options.get("lr", 1e-3))
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_seed(seed)
    model = _cells(bug, size)
    # the reference's data, exactly
    batches = vit_spec.make_batches(seed, steps, batch, size, CLASSES)

    params = model.trainable_params()
    decay = [p for p in params if p.ndim >= 2 and not p.name.endswith(("cls_token", "pos_embed"))]
    rest = [p for p in params if not (p.ndim >= 2
                                      and not p.name.endswith(("cls_token", "pos_embed")))]
    if bug == "adamwd":
        optimizer: Any = nn.AdamWeightDecay(
            [{"params": decay, "weight_decay": 0.05}, {"params": rest, "weight_decay": 0.0}],
            learning_rate=lr)
    else:
        optimizer = optim.AdamW(
            [{"params": decay, "weight_decay": 0.05}, {"params": rest, "weight_decay": 0.0}],
            lr=lr)

    def loss_fn(output: ms.Tensor, labels: Any) -> ms.Tensor:
        y = labels if isinstance(labels, ms.Tensor) else ms.Tensor(np.asarray(labels, np.int32))
        return ops.cross_entropy(output, y)

    def forward(x: ms.Tensor, y: ms.Tensor) -> ms.Tensor:
        return loss_fn(model(x), y)

    params = decay + rest  # the optimizer's order: gradients are handed over in it
    grad_fn = ms.value_and_grad(forward, None, params)

    ref_names = {p.name: p.name.replace(".gamma", ".weight").replace(".beta", ".bias")
                 for p in params}
    return {
        "framework": "mindspore",
        "model": model,
        "batches": batches,
        "loss_fn": loss_fn,
        "optimizer": optimizer,
        "lr_schedule": [lr] * steps,
        "train_step": train_step(model, grad_fn, params, optimizer),
        "description": f"MindSpore ViT port (4 blocks, {size}px, patch 8), "
        + ("AdamWeightDecay" if bug == "adamwd" else "experimental.optim.AdamW") + f", bug {bug}",
        "name_map": ref_names,
    }
