"""A spec for ``netparity bisect`` / ``step``: a small pre-norm transformer classifier (77
modules: 6 blocks of LayerNorm, attention with its own softmax, LayerNorm, GELU MLP), float32,
with dropout in its attention and MLP (pinned by bisect).

Candidate options that lose precision in one place or everywhere:

* ``lowp_norm=PATH``     the LayerNorm at PATH computed in float16 (``blocks.4.norm2``);
* ``lowp_softmax=PATH``  the softmax of the attention at PATH in float16 (``blocks.2.attn``):
                         an operation of the attention itself, in no child module;
* ``autocast=bfloat16``  the whole step under ``torch.autocast("cpu", bfloat16)``;
* ``eps_norm=PATH``      the LayerNorm at PATH with eps 1e-1 (a port bug, not a dtype).

Options: seed (0), batch_size (8), dim (32), depth (6), dropout (0.1), steps, gain (1: the\nclassifier head's initial weights scaled by it).
"""

from __future__ import annotations

from typing import Any


def build(**options: Any) -> dict[str, Any]:
    import numpy as np
    import torch
    from torch import nn

    seed, batch = int(options.get("seed", 0)), int(options.get("batch_size", 8))
    dim, depth, drop = int(options.get("dim", 32)), int(options.get("depth", 6)), \
        float(options.get("dropout", 0.1))
    steps = int(options.get("steps", 1))
    lowp_norm, lowp_softmax = options.get("lowp_norm"), options.get("lowp_softmax")
    autocast = options.get("autocast")
    classes, tokens, feat = 10, 16, 24

    class Norm(nn.LayerNorm):
        compute_dtype: Any = None

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.compute_dtype is None:
                return super().forward(x)
            d = self.compute_dtype
            return nn.functional.layer_norm(x.to(d), self.normalized_shape, self.weight.to(d),
                                            self.bias.to(d), self.eps).to(x.dtype)

    class Attention(nn.Module):
        softmax_dtype: Any = None

        def __init__(self) -> None:
            super().__init__()
            self.heads = 4
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.drop = nn.Dropout(drop)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, n, c = x.shape
            q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads) \
                .permute(2, 0, 3, 1, 4)
            logits = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5
            if self.softmax_dtype is not None:
                a = logits.to(self.softmax_dtype).softmax(-1).to(logits.dtype)
            else:
                a = logits.softmax(-1)
            return self.proj((self.drop(a) @ v).transpose(1, 2).reshape(b, n, c))

    class Mlp(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.act, self.fc2 = nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim,
                                                                                        dim)
            self.drop = nn.Dropout(drop)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.drop(self.fc2(self.act(self.fc1(x))))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.attn, self.norm2, self.mlp = Norm(dim), Attention(), Norm(dim), Mlp()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Linear(feat, dim)
            self.blocks = nn.Sequential(*[Block() for _ in range(depth)])
            self.norm, self.head = Norm(dim), nn.Linear(dim, classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.norm(self.blocks(self.embed(x))).mean(1))

    torch.manual_seed(seed)
    model = Net()
    with torch.no_grad():  # a confident classifier: the loss feels its logits' precision
        model.head.weight.mul_(float(options.get("gain", 1.0)))
    if lowp_norm:
        model.get_submodule(lowp_norm).compute_dtype = torch.float16
    if lowp_softmax:
        model.get_submodule(lowp_softmax).softmax_dtype = torch.float16
    if options.get("eps_norm"):
        model.get_submodule(options["eps_norm"]).eps = 0.1
    rng = np.random.default_rng(seed + 1)
    batches = [(rng.standard_normal((batch, tokens, feat)).astype(np.float32),
                rng.integers(0, classes, batch).astype(np.int64)) for _ in range(steps)]
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def loss_fn(out: torch.Tensor, labels: Any) -> torch.Tensor:
        return nn.functional.cross_entropy(out.float(), torch.as_tensor(labels).long())

    def train_step(x: Any, y: Any) -> float:
        model.train()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast == "bfloat16"):
            loss = loss_fn(model(torch.as_tensor(x)), y)
        loss.backward()
        opt.step()
        return float(loss.detach())

    return {"framework": "torch", "model": model, "batches": batches, "loss_fn": loss_fn,
            "optimizer": opt, "train_step": train_step,
            "description": f"tiny transformer, {depth} blocks, dim {dim}"}
