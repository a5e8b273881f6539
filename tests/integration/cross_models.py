"""Small twin networks, written once for PyTorch and once for MindSpore, computing the same thing.

Used by ``test_cross_framework.py`` (not called ``models.py``: pytest puts each test directory
on ``sys.path``, and a generic name could clash). Module/Cell attribute names are the same on
both sides, so module paths are equal and only parameter leaves differ the framework's way
(BatchNorm ``weight/bias/running_mean/running_var`` vs ``gamma/beta/moving_mean/moving_variance``, LayerNorm
``gamma/beta``, Embedding ``embedding_table``). What is *not* in the weights is set explicitly on
the MindSpore side because its defaults differ from PyTorch's: ``nn.Conv2d`` pads with
``pad_mode="same"`` and has no bias by default, BatchNorm ``momentum`` is ``1 - torch momentum``,
LayerNorm ``epsilon`` defaults to 1e-7 (PyTorch 1e-5), GELU defaults to the tanh approximation.

The frameworks are imported inside the factories so that importing this module needs neither.
"""

from __future__ import annotations

import math
from typing import Any

# Sizes: small enough for a CPU test in a few seconds, large enough that every layer does work.
CNN_IN = (2, 3, 16, 16)  # even spatial size: padding=1 and pad_mode="same" differ at stride 2
CNN_CLASSES = 5
VOCAB, SEQ, DIM, HEADS, HIDDEN, TOK_CLASSES = 23, 6, 16, 2, 32, 4
LN_EPS = 1e-5


def torch_cnn() -> Any:
    """conv-bn-relu-pool, conv(stride 2, bias)-relu-pool, flatten, linear (PyTorch)."""
    from torch import nn

    class CNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # a bias before a training-mode batch norm: its gradient is zero in exact
            # arithmetic and each framework returns independent rounding noise (~1e-8), which
            # compare must recognise instead of reporting a divergence
            self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=True)
            self.bn1 = nn.BatchNorm2d(8)
            self.relu1 = nn.ReLU()
            self.pool1 = nn.MaxPool2d(2, 2)
            self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
            self.relu2 = nn.ReLU()
            self.pool2 = nn.MaxPool2d(2, 2)
            self.flatten = nn.Flatten()
            self.fc = nn.Linear(16 * 2 * 2, CNN_CLASSES)

        def forward(self, x: Any) -> Any:
            x = self.pool1(self.relu1(self.bn1(self.conv1(x))))
            x = self.pool2(self.relu2(self.conv2(x)))
            return self.fc(self.flatten(x))

    return CNN()


def ms_cnn(bug: str | None = None) -> Any:
    """The same CNN in MindSpore; ``bug="same-pad"`` seeds the classic port error in ``conv2``.

    ``pad_mode="same"`` at stride 2 on an even input pads 0 before and 1 after (TensorFlow
    convention) where PyTorch's ``padding=1`` pads 1 on both sides: same output shape, shifted
    windows, different numbers.
    """
    from mindspore import nn

    class CNN(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 8, 3, pad_mode="pad", padding=1, has_bias=True)
            self.bn1 = nn.BatchNorm2d(8, momentum=0.9)
            self.relu1 = nn.ReLU()
            self.pool1 = nn.MaxPool2d(kernel_size=2, stride=2)
            if bug == "same-pad":
                self.conv2 = nn.Conv2d(8, 16, 3, stride=2, pad_mode="same", has_bias=True)
            else:
                self.conv2 = nn.Conv2d(8, 16, 3, stride=2, pad_mode="pad", padding=1,
                                       has_bias=True)
            self.relu2 = nn.ReLU()
            self.pool2 = nn.MaxPool2d(kernel_size=2, stride=2)
            self.flatten = nn.Flatten()
            self.fc = nn.Dense(16 * 2 * 2, CNN_CLASSES)

        def construct(self, x: Any) -> Any:
            x = self.pool1(self.relu1(self.bn1(self.conv1(x))))
            x = self.pool2(self.relu2(self.conv2(x)))
            return self.fc(self.flatten(x))

    return CNN()


def torch_block() -> Any:
    """Embedding, pre-norm attention (explicit q/k/v), pre-norm GELU MLP, mean-pool head."""
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q = nn.Linear(DIM, DIM)
            # no key bias: it adds q.b_k to every score of a query row, which softmax cancels,
            # so its gradient is rounding noise (the CNN's conv1 bias covers that case); the
            # op-level tests below rely on attn.k running as aten.mm
            self.k = nn.Linear(DIM, DIM, bias=False)
            self.v = nn.Linear(DIM, DIM)
            self.softmax = nn.Softmax(dim=-1)
            self.proj = nn.Linear(DIM, DIM)

        def forward(self, x: Any) -> Any:
            b, t, _ = x.shape
            dh = DIM // HEADS
            q = torch.transpose(torch.reshape(self.q(x), (b, t, HEADS, dh)), 1, 2)
            k = torch.transpose(torch.reshape(self.k(x), (b, t, HEADS, dh)), 1, 2)
            v = torch.transpose(torch.reshape(self.v(x), (b, t, HEADS, dh)), 1, 2)
            att = self.softmax(torch.matmul(q, torch.transpose(k, 2, 3)) / math.sqrt(dh))
            o = torch.reshape(torch.transpose(torch.matmul(att, v), 1, 2), (b, t, DIM))
            return self.proj(o)

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Linear(DIM, HIDDEN)
            self.act = nn.GELU()  # exact erf form
            self.fc2 = nn.Linear(HIDDEN, DIM)

        def forward(self, x: Any) -> Any:
            return self.fc2(self.act(self.fc1(x)))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(VOCAB, DIM)
            self.ln1 = nn.LayerNorm(DIM, eps=LN_EPS)
            self.attn = Attention()
            self.ln2 = nn.LayerNorm(DIM, eps=LN_EPS)
            self.mlp = MLP()
            self.head = nn.Linear(DIM, TOK_CLASSES)

        def forward(self, ids: Any) -> Any:
            h = self.emb(ids)
            h = h + self.attn(self.ln1(h))
            h = h + self.mlp(self.ln2(h))
            return self.head(torch.mean(h, dim=1))

    return Block()


def ms_block() -> Any:
    """The same transformer block in MindSpore, with functional ``ops`` for the glue."""
    from mindspore import nn, ops

    class Attention(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.q = nn.Dense(DIM, DIM)
            self.k = nn.Dense(DIM, DIM, has_bias=False)
            self.v = nn.Dense(DIM, DIM)
            self.softmax = nn.Softmax(axis=-1)
            self.proj = nn.Dense(DIM, DIM)

        def construct(self, x: Any) -> Any:
            b, t, _ = x.shape
            dh = DIM // HEADS
            q = ops.transpose(ops.reshape(self.q(x), (b, t, HEADS, dh)), (0, 2, 1, 3))
            k = ops.transpose(ops.reshape(self.k(x), (b, t, HEADS, dh)), (0, 2, 1, 3))
            v = ops.transpose(ops.reshape(self.v(x), (b, t, HEADS, dh)), (0, 2, 1, 3))
            att = self.softmax(ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) / math.sqrt(dh))
            o = ops.reshape(ops.transpose(ops.matmul(att, v), (0, 2, 1, 3)), (b, t, DIM))
            return self.proj(o)

    class MLP(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Dense(DIM, HIDDEN)
            self.act = nn.GELU(approximate=False)  # MindSpore's default is the tanh form
            self.fc2 = nn.Dense(HIDDEN, DIM)

        def construct(self, x: Any) -> Any:
            return self.fc2(self.act(self.fc1(x)))

    class Block(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(VOCAB, DIM)
            self.ln1 = nn.LayerNorm((DIM,), epsilon=LN_EPS)
            self.attn = Attention()
            self.ln2 = nn.LayerNorm((DIM,), epsilon=LN_EPS)
            self.mlp = MLP()
            self.head = nn.Dense(DIM, TOK_CLASSES)

        def construct(self, ids: Any) -> Any:
            h = self.emb(ids)
            h = h + self.attn(self.ln1(h))
            h = h + self.mlp(self.ln2(h))
            return self.head(ops.mean(h, axis=1))

    return Block()
