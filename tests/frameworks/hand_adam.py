"""A hand-written PyTorch Adam counting its steps in a plain attribute (``self.t``, not in
``state_dict``): the optimizer netparity does not know, shared by the optimizer-watch test and
the replay spec."""

from __future__ import annotations

from typing import Any


def hand_adam(params: Any, lr: float = 0.1, eps: float = 1e-8) -> Any:
    """An instance of the hand-written Adam over ``params``."""
    import torch

    class HandAdam(torch.optim.Optimizer):
        def __init__(self) -> None:
            super().__init__(params, {"lr": lr})
            self.t = 0  # not in state_dict

        @torch.no_grad()
        def step(self, closure: Any = None) -> None:
            self.t += 1
            for group in self.param_groups:
                for q in group["params"]:
                    st = self.state[q]
                    if not st:
                        st["m"], st["v"] = torch.zeros_like(q), torch.zeros_like(q)
                    st["m"].mul_(0.9).add_(q.grad, alpha=0.1)
                    st["v"].mul_(0.999).addcmul_(q.grad, q.grad, value=0.001)
                    m_hat = st["m"] / (1 - 0.9**self.t)
                    v_hat = st["v"] / (1 - 0.999**self.t)
                    q.sub_(group["lr"] * m_hat / (v_hat.sqrt() + eps))

    return HandAdam()
