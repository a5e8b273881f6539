"""Training hyper-parameters of the reference migration and its per-step cosine LR (numpy only).

Both training modules use this one schedule so the two runs see the same learning rates unless
the ``warmup`` bug is injected.

Example:
    >>> lr = cosine_lr(0.0, 0.0, 0.1, total_steps=10, warmup_steps=2)
    >>> [round(v, 4) for v in lr[:3]]
    [0.05, 0.1, 0.087]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from netparity.errors import UsageError

__all__ = ["HParams", "cosine_lr"]


@dataclass(frozen=True)
class HParams:
    """The reference ResNet-50 recipe (NVIDIA's, as quoted by the migration document).

    ``lr_max`` is 0.256 for batch 256; scale it linearly with the batch size.

    Example:
        >>> HParams().weight_decay == 1 / 32768
        True
    """

    momentum: float = 0.875
    weight_decay: float = 1.0 / 32768
    label_smooth: float = 0.1
    loss_scale: float = 1024.0
    lr_init: float = 0.0
    lr_end: float = 0.0
    lr_max: float = 0.256
    warmup_epochs: int = 5
    epochs: int = 90
    batch_size: int = 256


def cosine_lr(
    lr_init: float,
    lr_end: float,
    lr_max: float,
    total_steps: int,
    warmup_steps: int,
    bug: str | None = None,
) -> list[float]:
    """Per-step learning rates: linear warmup, then the document's damped cosine decay.

    Warmup step ``i`` (0-based) gets ``lr_init + (lr_max - lr_init) / warmup_steps * (i + 1)``;
    after it, ``lr_max * ((total - i) / decay * 0.5 * (1 + cos(2*pi*0.47*i / decay)) + 1e-5)``
    with ``decay = total - warmup``. ``lr_end`` is accepted for the document's signature and
    unused by its formula. ``bug="warmup"`` drops the ``+ 1`` (the first step then has
    ``lr_init``: the classic off-by-one).

    Raises:
        UsageError: negative or inconsistent step counts.

    Example:
        >>> cosine_lr(0.0, 0.0, 0.1, 4, 2, bug="warmup")[:2]
        [0.0, 0.05]
    """
    del lr_end
    if total_steps < 1 or warmup_steps < 0 or warmup_steps > total_steps:
        raise UsageError(
            f"need 0 <= warmup_steps <= total_steps, total_steps >= 1; got {warmup_steps}, {total_steps}"
        )
    offset = 0 if bug == "warmup" else 1
    # the "lr-decay" bug forgets that warmup steps are not part of the decay
    decay_steps = max(total_steps - (0 if bug == "lr-decay" else warmup_steps), 1)
    out: list[float] = []
    for i in range(total_steps):
        if i < warmup_steps:
            inc = (float(lr_max) - float(lr_init)) / float(warmup_steps)
            lr = float(lr_init) + inc * (i + offset)
        else:
            linear = (total_steps - i) / decay_steps
            cosine = 0.5 * (1 + math.cos(math.pi * 2 * 0.47 * i / decay_steps))
            lr = lr_max * (linear * cosine + 0.00001)
        out.append(lr)
    return out


@dataclass
class TrainResult:
    """Losses per step and the checkpoints written (both frameworks' training loops)."""

    losses: list[float] = field(default_factory=list)
    checkpoints: list[Path] = field(default_factory=list)


def eval_metrics(top1: int, top5: int, loss_sum: float, count: int) -> dict[str, float]:
    """The evaluation result both frameworks return: accuracies and mean loss over ``count``.

    Example:
        >>> eval_metrics(3, 4, 2.0, 4)["top_1_accuracy"]
        0.75
    """
    n = max(count, 1)
    return {
        "top_1_accuracy": top1 / n,
        "top_5_accuracy": top5 / n,
        "loss": loss_sum / n,
        "count": float(count),
    }
