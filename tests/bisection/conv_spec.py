"""A small conv + pool classifier spec for ``--emulate fp16-ops=...`` (``step``, ``bisect``):
two 3x3 convolutions with ReLU, a max pool and an average pool, a linear head; float32.

Options: seed (0), batch_size (8), steps (1), gain (1: the head's initial weights scaled by
it), convs (2; 1: the second convolution left out, its ReLU and pools kept).
"""

from __future__ import annotations

from typing import Any


def build(**options: Any) -> dict[str, Any]:
    import numpy as np
    import torch
    from torch import nn

    seed, batch = int(options.get("seed", 0)), int(options.get("batch_size", 8))
    steps = int(options.get("steps", 1))
    torch.manual_seed(seed)
    model = nn.Sequential()
    model.add_module("conv1", nn.Conv2d(3, 16, 3, padding=1))
    model.add_module("act1", nn.ReLU())
    model.add_module("pool1", nn.MaxPool2d(2))
    width = 16
    if int(options.get("convs", 2)) > 1:
        model.add_module("conv2", nn.Conv2d(16, 32, 3, padding=1))
        width = 32
    model.add_module("act2", nn.ReLU())
    model.add_module("pool2", nn.AdaptiveAvgPool2d(1))
    model.add_module("flat", nn.Flatten())
    model.add_module("head", nn.Linear(width, 10))
    with torch.no_grad():
        model.head.weight.mul_(float(options.get("gain", 1.0)))
    rng = np.random.default_rng(seed + 1)
    batches = [(rng.standard_normal((batch, 3, 16, 16)).astype(np.float32),
                rng.integers(0, 10, batch).astype(np.int64)) for _ in range(steps)]
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def loss_fn(out: torch.Tensor, labels: Any) -> torch.Tensor:
        return nn.functional.cross_entropy(out, torch.as_tensor(labels).long())

    def train_step(x: Any, y: Any) -> float:
        model.train()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(torch.as_tensor(x)), y)
        loss.backward()
        opt.step()
        return float(loss.detach())

    return {"framework": "torch", "model": model, "batches": batches, "loss_fn": loss_fn,
            "optimizer": opt, "train_step": train_step, "description": "conv + pool"}
