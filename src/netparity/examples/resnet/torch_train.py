"""PyTorch side of the reference training recipe: loss, optimizer groups, loss scaling, loop, eval.

Mirrors :mod:`ms_train` step for step, so a difference between the two runs is a migration bug:

- label-smoothing cross-entropy with the document's smoothing (true class ``1 - s``, every other
  class ``s / (C - 1)``; note PyTorch's built-in ``label_smoothing`` spreads ``s / C`` over all
  classes instead, a different loss);
- SGD, momentum 0.875, weight decay 1/32768 on convolution and linear weights only;
- static loss scaling: the loss is multiplied by ``loss_scale`` before ``backward`` and the
  gradients divided by it before the update (MindSpore's ``FixedLossScaleManager(...,
  drop_overflow_update=False)`` + ``Momentum(loss_scale=...)``);
- per-step LR from :func:`schedule.cosine_lr`.

Example:
    >>> import torch
    >>> from netparity.examples.resnet.torch_resnet import resnet18
    >>> net = resnet18(num_classes=4)
    >>> opt = make_optimizer(net, lr=0.1)
    >>> [len(g["params"]) for g in opt.param_groups]
    [21, 41]
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from netparity.examples.resnet.schedule import HParams, TrainResult, eval_metrics

__all__ = [
    "CrossEntropySmooth",
    "TrainResult",
    "evaluate",
    "make_optimizer",
    "param_groups",
    "set_lr",
    "train",
    "train_step",
]


class CrossEntropySmooth(nn.Module):
    """Cross-entropy against smoothed one-hot targets (the document's ``CrossEntropySmooth``).

    Example:
        >>> loss = CrossEntropySmooth(smooth_factor=0.1, num_classes=4)
        >>> round(float(loss(torch.zeros(2, 4), torch.tensor([0, 3]))), 4)
        1.3863
    """

    def __init__(self, smooth_factor: float = 0.1, num_classes: int = 1000) -> None:
        super().__init__()
        self.on_value = 1.0 - smooth_factor
        self.off_value = smooth_factor / (num_classes - 1)

    def forward(self, logits: Tensor, labels: Tensor) -> Tensor:
        target = torch.full_like(logits, self.off_value)
        target.scatter_(1, labels.long().view(-1, 1), self.on_value)
        return torch.sum(-target * torch.log_softmax(logits, dim=1), dim=1).mean()


def param_groups(
    model: nn.Module, weight_decay: float = HParams.weight_decay
) -> list[dict[str, Any]]:
    """Two groups: conv/linear weights with weight decay; BN weights/biases and all biases without.

    Group order follows parameter order inside each group, as MindSpore's ``order_params`` does.

    Example:
        >>> from netparity.examples.resnet.torch_resnet import resnet50
        >>> groups = param_groups(resnet50(num_classes=4))
        >>> len(groups[0]["params"]), len(groups[1]["params"])
        (54, 107)
    """
    decayed, plain = [], []
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            if not param.requires_grad:
                continue
            if isinstance(module, (nn.Conv2d, nn.Linear)) and name == "weight":
                decayed.append(param)
            else:
                plain.append(param)
    return [
        {"params": decayed, "weight_decay": weight_decay},
        {"params": plain, "weight_decay": 0.0},
    ]


def make_optimizer(
    model: nn.Module,
    lr: float,
    momentum: float = HParams.momentum,
    weight_decay: float = HParams.weight_decay,
) -> torch.optim.SGD:
    """SGD with momentum over :func:`param_groups` (LR is set per step with :func:`set_lr`).

    Example:
        >>> from netparity.examples.resnet.torch_resnet import resnet18
        >>> make_optimizer(resnet18(num_classes=2), 0.1).defaults["momentum"]
        0.875
    """
    return torch.optim.SGD(param_groups(model, weight_decay), lr=lr, momentum=momentum)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the learning rate of every group (the per-step schedule).

    Example:
        >>> from netparity.examples.resnet.torch_resnet import resnet18
        >>> opt = make_optimizer(resnet18(num_classes=2), 0.1); set_lr(opt, 0.5)
        >>> opt.param_groups[1]["lr"]
        0.5
    """
    for group in optimizer.param_groups:
        group["lr"] = lr


def train_step(
    model: nn.Module,
    loss_fn: Callable[[Tensor, Tensor], Tensor],
    optimizer: torch.optim.Optimizer,
    images: Any,
    labels: Any,
    lr: float | None = None,
    loss_scale: float = HParams.loss_scale,
) -> tuple[float, dict[str, np.ndarray]]:
    """One forward + scaled backward + unscale + SGD update. Returns (loss, unscaled grads).

    ``images``/``labels`` may be numpy arrays or tensors.

    Example:
        >>> from netparity.examples.resnet.torch_resnet import resnet18
        >>> net = resnet18(num_classes=2); opt = make_optimizer(net, 0.01)
        >>> loss, grads = train_step(net, CrossEntropySmooth(0.1, 2), opt,
        ...                          np.zeros((2, 3, 32, 32), np.float32), np.array([0, 1]))
        >>> "fc.weight" in grads
        True
    """
    model.train()
    x = torch.as_tensor(images, dtype=torch.float32)
    y = torch.as_tensor(labels).long()
    if lr is not None:
        set_lr(optimizer, lr)
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    (loss * loss_scale).backward()
    grads: dict[str, np.ndarray] = {}
    for name, param in model.named_parameters():
        if param.grad is not None:
            param.grad.div_(loss_scale)  # unscale before weight decay, as MindSpore's optimizer
            grads[name] = param.grad.detach().numpy().copy()
    optimizer.step()
    return float(loss.detach()), grads


@torch.no_grad()
def evaluate(
    model: nn.Module, batches: Iterable[tuple[Any, Any]], train_mode: bool = False
) -> dict[str, float]:
    """Top-1 / top-5 accuracy (top-k capped at the class count) and mean plain cross-entropy.

    ``train_mode=True`` evaluates with batch statistics (the reference of the ``eval-mode`` bug).

    Example:
        >>> from netparity.examples.resnet.torch_resnet import resnet18
        >>> res = evaluate(resnet18(num_classes=3), [(np.zeros((2, 3, 32, 32), np.float32), np.array([0, 1]))])
        >>> sorted(res)
        ['count', 'loss', 'top_1_accuracy', 'top_5_accuracy']
    """
    model.train(train_mode)
    top1 = top5 = count = 0
    loss_sum = 0.0
    for images, labels in batches:
        x = torch.as_tensor(images, dtype=torch.float32)
        y = torch.as_tensor(labels).long()
        logits = model(x)
        k = min(5, logits.shape[1])
        top = logits.topk(k, dim=1).indices
        top1 += int((top[:, 0] == y).sum())
        top5 += int((top == y[:, None]).any(dim=1).sum())
        loss_sum += float(nn.functional.cross_entropy(logits, y, reduction="sum"))
        count += int(y.numel())
    model.train()
    return eval_metrics(top1, top5, loss_sum, count)


def train(
    model: nn.Module,
    batches: Callable[[int], Iterable[tuple[Any, Any]]] | Sequence[tuple[Any, Any]],
    lr_schedule: Sequence[float],
    num_classes: int,
    hp: HParams = HParams(),
    ckpt_dir: str | os.PathLike[str] | None = None,
    save_every: int = 0,
) -> TrainResult:
    """Train for ``len(lr_schedule)`` steps, cycling over ``batches`` (a list or epoch -> iterable).

    Checkpoints (``resnet-<step>.pt``, a ``state_dict`` readable with ``weights_only=True``) are
    written every ``save_every`` steps and at the end when ``ckpt_dir`` is given.

    Example:
        >>> import tempfile
        >>> from netparity.examples.resnet.torch_resnet import resnet18
        >>> b = [(np.random.rand(2, 3, 32, 32).astype(np.float32), np.array([0, 1]))]
        >>> res = train(resnet18(num_classes=2), b, [0.01, 0.01], 2, ckpt_dir=tempfile.mkdtemp())
        >>> len(res.losses), res.checkpoints[-1].name
        (2, 'resnet-2.pt')
    """
    loss_fn = CrossEntropySmooth(hp.label_smooth, num_classes)
    optimizer = make_optimizer(model, lr_schedule[0], hp.momentum, hp.weight_decay)
    result = TrainResult()
    out = Path(ckpt_dir) if ckpt_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    step, epoch = 0, 0
    total = len(lr_schedule)
    while step < total:
        source = batches(epoch) if callable(batches) else batches
        for images, labels in source:
            if step >= total:
                break
            loss, _ = train_step(
                model, loss_fn, optimizer, images, labels, lr_schedule[step], hp.loss_scale
            )
            result.losses.append(loss)
            step += 1
            if out is not None and ((save_every and step % save_every == 0) or step == total):
                path = out / f"resnet-{step}.pt"
                torch.save(model.state_dict(), path)
                result.checkpoints.append(path)
        epoch += 1
    return result
