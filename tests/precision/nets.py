"""Small training steps for the precision tests: a ResNet-ish CNN and a transformer block,
each with an optional injected low-precision operator."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812


class Block(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(y)))


class Head(nn.Module):
    """Pooling, a linear layer, and (``bad``) the matmul done in bfloat16."""

    def __init__(self, c: int, n: int, bad: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(c, n)
        self.bad = bad

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        if self.bad:  # a matmul accumulating in bfloat16
            return (x.bfloat16() @ self.fc.weight.t().bfloat16()).float() + self.fc.bias
        return self.fc(x)


class ResNetish(nn.Module):
    def __init__(self, bad: bool = False, c: int = 8) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c)
        self.layer1 = Block(c)
        self.pool = nn.MaxPool2d(2)
        self.layer2 = Block(c)
        self.head = Head(c, 10, bad)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.bn(self.stem(x))))
        return self.head(self.layer2(self.layer1(x)))


class Attention(nn.Module):
    def __init__(self, d: int, heads: int, bad: bool = False) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.heads, self.bad = heads, bad

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        s = q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5
        # the injected fault: softmax computed in float16
        a = torch.softmax(s.half(), -1).float() if self.bad else torch.softmax(s, -1)
        return self.proj((a @ v).transpose(1, 2).reshape(b, t, d))


class Transformer(nn.Module):
    def __init__(self, bad: bool = False, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads, bad)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.head = nn.Linear(d, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return self.head(x.mean(1))


def step_trace(kind: str, path: Path, bad: bool = False, payload: str = "tensors",
               seed: int = 0, loss_scale: float = 1.0) -> Path:
    """Capture one training step (forward, backward, SGD) of ``kind`` at op level."""
    import netparity

    torch.manual_seed(seed)
    model: nn.Module = ResNetish(bad) if kind == "resnet" else Transformer(bad)
    x = torch.randn(4, 3, 16, 16) if kind == "resnet" else torch.randn(4, 8, 32)
    y = torch.randint(0, 10, (4,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with netparity.capture(model, path, level="op", payload=payload, optimizer=opt) as cap:
        loss = F.cross_entropy(model(x), y) * loss_scale
        loss.backward()
        opt.step()
        cap.record_loss(loss)
        cap.step()
    return path
