"""A PyTorch MLP whose weights (one 2048x512 matrix, 4 MB) dwarf everything else a step
holds (batch 4): ``test_step_memory.py`` counts how many copies of them ``step`` keeps."""

from __future__ import annotations

from typing import Any

import numpy as np


def build(steps: int = 3, **options: Any) -> dict[str, Any]:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.Tanh(),
                                torch.nn.Linear(2048, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((4, 512)).astype(np.float32), rng.integers(0, 4, 4))
               for _ in range(steps)]
    loss_fn = torch.nn.CrossEntropyLoss()

    def train_step(x: Any, y: Any) -> float:
        opt.zero_grad()
        loss = loss_fn(model(torch.as_tensor(x)), torch.as_tensor(y).long())
        loss.backward()
        opt.step()
        return float(loss.detach())

    return {"framework": "torch", "model": model, "batches": batches, "optimizer": opt,
            "train_step": train_step, "description": "wide MLP, SGD with momentum"}
