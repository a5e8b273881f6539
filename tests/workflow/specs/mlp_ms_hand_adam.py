"""The MindSpore port of ``mlp_torch_adam.py`` with a hand-written Adam
(:mod:`tests.frameworks.ms_hand_adam`: its step counter a plain Python attribute); ``eps``
sets its epsilon (a wrong one is the row's mistake)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def build(steps: int = 3, eps: float = 1e-8, **options: Any) -> dict[str, Any]:
    import mindspore as ms
    from mindspore import nn

    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from mlp_torch_adam import COMPILED_SPECS, batches_of  # (the spec's folder is importable)
    from tests.frameworks.ms_hand_adam import ms_hand_adam

    sys.path.insert(0, COMPILED_SPECS)
    from tiny_ms import train_step_of

    ms.set_seed(0)
    model = nn.SequentialCell(nn.Dense(8, 16), nn.Tanh(), nn.Dense(16, 4))
    opt = ms_hand_adam(model.trainable_params(), lr=0.01, eps=float(eps))
    return {"framework": "mindspore", "model": model, "batches": batches_of(steps),
            "train_step": train_step_of(model, opt), "optimizer": opt,
            "lr_schedule": [0.01] * steps, "description": "MLP, hand-written MindSpore Adam"}
