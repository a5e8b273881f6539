"""A hand-written MindSpore Adam counting its steps in a plain attribute (``self.t``, a Python
int, not a Parameter): the optimizer netparity does not know, on the MindSpore side (the
PyTorch one is :mod:`tests.frameworks.hand_adam`). Its update is ``torch.optim.Adam``'s."""

from __future__ import annotations

from typing import Any


def ms_hand_adam(params: Any, lr: float = 0.01, eps: float = 1e-8) -> Any:
    """An instance of the hand-written MindSpore Adam over ``params``."""
    from mindspore import nn, ops

    class HandAdam(nn.Optimizer):
        def __init__(self) -> None:
            super().__init__(lr, params)
            self.m = self.parameters.clone(prefix="hand_m", init="zeros")
            self.v = self.parameters.clone(prefix="hand_v", init="zeros")
            self.t = 0  # a Python int: not among the optimizer's Parameters

        def construct(self, grads: Any) -> bool:
            self.t += 1
            c1, c2 = 1.0 - 0.9**self.t, 1.0 - 0.999**self.t
            lr_t = self.get_lr()
            for p, g, m, v in zip(self.parameters, grads, self.m, self.v):
                ops.assign(m, m * 0.9 + g * 0.1)
                ops.assign(v, v * 0.999 + g * g * 0.001)
                ops.assign(p, p - lr_t * (m / c1) / (ops.sqrt(v / c2) + eps))
            return True

    return HandAdam()
