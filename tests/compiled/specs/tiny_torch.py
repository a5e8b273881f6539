"""A tiny PyTorch spec for the eager <-> compiled pair tests (``bug``: a compiled-only mistake,
in the forward (``compiled-eps``) or in the backward only (``compiled-grad``))."""

from __future__ import annotations

from typing import Any

import numpy as np


def build(steps: int = 2, bug: str = "", **options: Any) -> dict[str, Any]:
    import torch

    torch.manual_seed(0)

    class GradScale(torch.autograd.Function):
        """Identity forward; its backward scales the gradient by 1.05 (a compiled-only
        backward mistake: the forward agrees, only gradients before it differ)."""

        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x.clone()

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            return g * 1.05

    class Scale(torch.nn.Module):
        """Multiplies by 1; with ``bug="compiled-eps"`` its compiled path adds 1e-2 (a
        module whose compiled path differs from its eager one, as a custom graph pass would)."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if bug == "compiled-eps" and torch.compiler.is_compiling():
                return x * 1.0 + 1e-2
            if bug == "compiled-grad" and torch.compiler.is_compiling():
                return GradScale.apply(x) * 1.0
            return x * 1.0

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), Scale(),
                                torch.nn.Linear(16, 4))
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((4, 8)).astype(np.float32), rng.integers(0, 4, 4))
               for _ in range(steps)]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return {"framework": "torch", "model": model, "batches": batches,
            "train_step": train_step_of(model, opt), "optimizer": opt, "description": "tiny MLP"}


def train_step_of(model: Any, opt: Any) -> Any:
    """One cross-entropy training step of ``model`` with ``opt`` per call."""
    import torch

    loss_fn = torch.nn.CrossEntropyLoss()

    def train_step(x: Any, y: Any) -> float:
        opt.zero_grad()
        loss = loss_fn(model(torch.as_tensor(x)), torch.as_tensor(y).long())
        loss.backward()
        opt.step()
        return float(loss.detach())

    return train_step
