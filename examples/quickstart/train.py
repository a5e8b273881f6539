"""A small PyTorch training script to try netparity on: synthetic images, a CNN, SGD, CPU,
a few seconds. Nothing in it knows about netparity.

    python examples/quickstart/train.py [--steps 6] [--eps 1e-5] [--nan-at STEP]
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, eps: float) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8, eps=eps)
        self.relu = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pool(self.relu(self.bn(self.conv(x)))).flatten(1)
        h = h / h.std(dim=0, keepdim=True)  # features scaled over the batch: 0/0 if all alike
        return self.head(self.norm(h))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--eps", type=float, default=1e-5, help="BatchNorm eps")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--nan-at", type=int, default=None,
                    help="feed a blank batch at this step (its features have std 0)")
    args = ap.parse_args()

    torch.manual_seed(0)
    images = torch.randn(args.steps * 4, 3, 16, 16)
    labels = torch.randint(0, 10, (args.steps * 4,))
    if args.nan_at is not None:
        images[args.nan_at * 4:(args.nan_at + 1) * 4] = 0.0
    loader = DataLoader(TensorDataset(images, labels), batch_size=4)
    model = Net(args.eps)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for step, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
