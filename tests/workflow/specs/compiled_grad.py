"""The compiled pair's tiny PyTorch spec whose compiled run differs only in backward
(``bug="compiled-grad"``).

Compiled, its ``Scale`` module passes its input through a function whose backward multiplies
the incoming gradient by 1.5: forward agrees, the first Linear's parameter gradients do not. A
compiled candidate is captured only at its boundary, so those gradients cannot be replayed:
the float64 golden floor judges them (:mod:`netparity.analyzers.golden`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def build(steps: int = 2, bug: str = "", **options: Any) -> dict[str, Any]:
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "compiled" / "specs"))
    import tiny_torch

    class Louder(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x * 1.0

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            return g * 1.5

    class Scale(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if bug == "compiled-grad" and torch.compiler.is_compiling():
                return Louder.apply(x)
            return x * 1.0

    d = tiny_torch.build(steps=steps)
    d["model"][2] = Scale()  # (no parameters: the optimizer is unchanged)
    return d
