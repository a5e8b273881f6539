"""A small PyTorch MLP trained with ``torch.optim.Adam`` (lr 0.01): the reference of the
hand-written MindSpore Adam row (``mlp_ms_hand_adam.py``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

COMPILED_SPECS = str(Path(__file__).resolve().parents[2] / "compiled" / "specs")


def batches_of(steps: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((8, 8)).astype(np.float32), rng.integers(0, 4, 8))
            for _ in range(steps)]


def build(steps: int = 3, **options: Any) -> dict[str, Any]:
    import torch

    sys.path.insert(0, COMPILED_SPECS)
    from tiny_torch import train_step_of

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    opt = torch.optim.Adam(model.parameters(), lr=0.01, eps=1e-8)
    return {"framework": "torch", "model": model, "batches": batches_of(steps),
            "train_step": train_step_of(model, opt), "optimizer": opt,
            "lr_schedule": [0.01] * steps, "description": "MLP, torch.optim.Adam"}
