"""A tiny MindSpore spec for the PyNative <-> graph (``mindspore.jit``) pair test."""

from __future__ import annotations

from typing import Any

import numpy as np


def build(steps: int = 2, **options: Any) -> dict[str, Any]:
    import mindspore as ms
    from mindspore import nn

    ms.set_seed(0)
    model = nn.SequentialCell(nn.Dense(8, 16), nn.Tanh(), nn.Dense(16, 4))
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((4, 8)).astype(np.float32), rng.integers(0, 4, 4))
               for _ in range(steps)]
    opt = nn.SGD(model.trainable_params(), learning_rate=0.1)
    return {"framework": "mindspore", "model": model, "batches": batches,
            "train_step": train_step_of(model, opt), "optimizer": opt,
            "description": "tiny MindSpore MLP"}


def train_step_of(model: Any, opt: Any) -> Any:
    """One cross-entropy training step of ``model`` with ``opt`` per call."""
    import mindspore as ms
    from mindspore import nn

    loss_fn = nn.CrossEntropyLoss()

    def forward(x: Any, y: Any) -> Any:
        return loss_fn(model(x), y)

    grad_fn = ms.value_and_grad(forward, None, opt.parameters)

    def train_step(x: Any, y: Any) -> float:
        loss, grads = grad_fn(ms.Tensor(x), ms.Tensor(y.astype(np.int32)))
        opt(grads)
        return float(loss.asnumpy())

    return train_step
