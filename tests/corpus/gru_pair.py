"""A torch GRU (``nn.GRU``: every time step's input projected in one matmul) against the same
GRU written per time step (``nn.GRUCell`` in a loop, as MindSpore's runs): the same weights, the
same numbers, different operators. Used by tests/compare/test_oplevel_trust.py and the corpus."""

from __future__ import annotations

import torch

import netparity

nn = torch.nn


class _Ref(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(8, 16, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.rnn(x)[0][:, -1])


class _LoopGRU(nn.Module):
    """The same GRU, projecting each time step on its own (as MindSpore's does)."""

    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(8, 16)

    def forward(self, x):
        h = x.new_zeros(x.shape[0], 16)
        outs = []
        for t in range(x.shape[1]):
            h = self.cell(x[:, t], h)
            outs.append(h)
        return torch.stack(outs, 1), h[None]


class _Cand(_Ref):
    def __init__(self):
        super().__init__()
        self.rnn = _LoopGRU()


def gru_pair(root, bug, level="both"):
    """Capture both models (one SGD step) under ``root`` and compare them at ``level``; ``bug``:
    the candidate's hidden-to-hidden bias is off by 0.1 in one unit."""
    torch.manual_seed(0)
    ref, cand = _Ref(), _Cand()
    with torch.no_grad():
        for a in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(cand.rnn.cell, a).copy_(getattr(ref.rnn, a + "_l0"))
        cand.head.load_state_dict(ref.head.state_dict())
        if bug:
            cand.rnn.cell.bias_hh[3] += 0.1
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(2, 10, 8, generator=g), torch.randn(2, 4, generator=g)
    for m, name in ((ref, "ref"), (cand, "cand")):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        with netparity.capture(m, str(root / name), level=level, payload="tensors",
                               optimizer=opt) as cap:
            loss = nn.functional.mse_loss(m(x), y)
            loss.backward()
            opt.step()
            cap.record_loss(loss)
            cap.step()
    return netparity.compare(root / "ref", root / "cand", level=level)
