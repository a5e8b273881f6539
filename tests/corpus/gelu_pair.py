"""A transformer MLP block whose tanh-approximated GELU is one library call on one side and
written out as its formula on the other: PyTorch ``F.gelu(x, approximate="tanh")`` (one
``gelu`` op) against a MindSpore port computing ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715
* x**3)))`` with Tensor operators (eight ops, among them two ``add``\\ s of the hidden width, next
to the ``Dense`` layers' bias adds of other widths).

The block: ``LayerNorm -> fc1 (Dense) -> GELU -> fc2 (Dense) -> + residual``, hidden 8, inner
32, batch 2, 4 tokens. Mistakes (``bug=``) in the port:

* ``gelu-coef`` the cubic coefficient 0.44715 instead of 0.044715 (a decimal slip).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

HIDDEN, INNER, BATCH, TOKENS = 8, 32, 2, 4
BUGS = ("gelu-coef",)
#: where a correct diagnosis names each bug (reference module, candidate module)
FOUND_AT = {"gelu-coef": ("act", "act")}


def inputs() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((BATCH, TOKENS, HIDDEN)).astype(np.float32)


def torch_model() -> Any:
    import torch
    from torch import nn

    class Act(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.functional.gelu(x, approximate="tanh")

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(HIDDEN)
            self.fc1 = nn.Linear(HIDDEN, INNER)
            self.act = Act()
            self.fc2 = nn.Linear(INNER, HIDDEN)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.fc2(self.act(self.fc1(self.norm(x))))

    torch.manual_seed(0)
    return Block().eval()


def ms_model(bug: str | None = None) -> Any:
    import mindspore as ms
    from mindspore import nn

    if bug not in (None, *BUGS):
        raise ValueError(f"unknown bug {bug!r}; choose from {', '.join(BUGS)}")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    coef = 0.44715 if bug == "gelu-coef" else 0.044715

    class Act(nn.Cell):
        def construct(self, x: Any) -> Any:
            return 0.5 * x * (1.0 + ms.ops.tanh(0.7978845608028654 * (x + coef * x * x * x)))

    class Block(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm((HIDDEN,), epsilon=1e-5)
            self.fc1 = nn.Dense(HIDDEN, INNER)
            self.act = Act()
            self.fc2 = nn.Dense(INNER, HIDDEN)

        def construct(self, x: Any) -> Any:
            return x + self.fc2(self.act(self.fc1(self.norm(x))))

    model = Block()
    model.set_train(False)
    return model


def load_weights(ref: Any, cand: Any) -> int:
    from tests.corpus import zoo_pair

    return zoo_pair.load_weights(ref, cand)


def capture_torch(model: Any, path: Path, level: str = "both") -> None:
    from tests.corpus import zoo_pair

    zoo_pair.capture_torch(model, path, level, inputs())


def capture_ms(model: Any, path: Path, level: str = "both") -> None:
    from tests.corpus import zoo_pair

    zoo_pair.capture_zoo(model, path, level, inputs())
