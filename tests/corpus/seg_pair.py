"""A spec for ``netparity step``: a small U-Net-like segmentation net in PyTorch (the reference,
``framework="torch"``, the default) and an independently written MindSpore port
(``framework="mindspore"``), trained with SGD + momentum under a warm-up + cosine learning rate
stepped every iteration, and a pixel-wise cross-entropy that ignores label 255.

The net: two encoder stages (3x3 conv, BatchNorm, ReLU; 2x2 max pooling), a middle stage, a
``ConvTranspose2d(k=3, s=2, padding=1, output_padding=1)`` up-sampling concatenated with the
second stage's output, a bilinear ``nn.Upsample`` (``align_corners=False``) concatenated with the
first stage's output, and a 1x1 head. The port groups conv/BatchNorm/ReLU in cells with named
children (``enc1.conv``, ``enc1.bn``) where PyTorch's ``nn.Sequential`` numbers them
(``enc1.0``, ``enc1.1``). Its faithful transposed convolution is
``Conv2dTranspose(pad_mode="pad", padding=(1, 0, 1, 0))``: PyTorch's ``output_padding`` is the
extra bottom/right row of the full output, kept.

The schedule: the reference's ``LambdaLR`` stepped after every update; the port's
``nn.Momentum`` with the per-iteration list of rates (a dynamic learning rate), or with
``lr_cell=True`` a ``LearningRateSchedule`` cell computing it from the global step.

``rewrite=True``: the port written differently but computing the same -- the loss by hand
(log-softmax, the labels gathered, the mean over the pixels not ignored), the bilinear
up-sampling as ``ops.ResizeBilinearV2`` called in the parent (no cell), the second skip
concatenated in the other order (the next conv's weight kept in the reference's layout and its
input channels swapped in ``construct``), the transposed convolution emulated (zeros inserted,
asymmetric padding 1/2, a convolution with the flipped kernel) and the schedule as a
``LearningRateSchedule`` cell.

Mistakes (``bug=``) in the port, each named (phase, place, step) by :data:`FOUND_AT`:

* ``align-corners``  ``nn.Upsample(align_corners=True)``: forward at the up-sampling;
* ``no-ignore``      the ignored pixels (255) clamped to class 0 and counted: the loss;
* ``deconv-pad``     ``Conv2dTranspose(pad_mode="pad", padding=1, output_padding=1)``: MindSpore
                     fills the extra row and column with zeros instead of computing them
                     (PyTorch computes them): forward at the transposed convolution;
* ``lr-ahead``       the schedule one iteration ahead (the rate of step k+1 at step k): the
                     update, as a learning-rate difference.

Options: framework, bug, rewrite, lr_cell, steps (3), batch_size (2), image_size (16), seed (0),
lr (0.05).
"""

from __future__ import annotations

import math
from typing import Any

BUGS = ("align-corners", "no-ignore", "deconv-pad", "lr-ahead")

#: where a correct diagnosis names each bug: (phase, place, step) in the reference's names
FOUND_AT = {
    "align-corners": ("forward", "up2", 0),
    "no-ignore": ("loss", "loss", 0),
    "deconv-pad": ("forward", "up1", 0),
    "lr-ahead": ("update", "optimizer (learning rate)", 0),
}

CLASSES, IGNORE, WARMUP = 4, 255, 2


def learning_rates(steps: int, base: float, ahead: bool = False) -> list[float]:
    """Linear warm-up over :data:`WARMUP` iterations, then cosine decay to 0 one iteration past
    the last step; ``ahead`` gives each step the next iteration's rate."""
    total = steps + 1

    def at(k: int) -> float:
        if k < WARMUP:
            return base * (k + 1) / WARMUP
        return base * 0.5 * (1 + math.cos(math.pi * (k - WARMUP + 1) / (total - WARMUP + 1)))

    return [at(k + 1 if ahead else k) for k in range(steps)]


def make_batches(seed: int, steps: int, batch: int, size: int) -> list[Any]:
    """Deterministic (images, labels) numpy batches; about one label pixel in eight is 255."""
    import numpy as np

    rng = np.random.default_rng(seed + 3)
    out = []
    for _ in range(steps):
        x = rng.standard_normal((batch, 3, size, size)).astype(np.float32)
        y = rng.integers(0, CLASSES, (batch, size, size)).astype(np.int32)
        y[rng.random(y.shape) < 0.125] = IGNORE
        out.append((x, y))
    return out


def _torch_side(steps: int, batch: int, size: int, seed: int, lr: float) -> dict[str, Any]:
    import torch
    from tests.corpus import vit_spec

    nn = torch.nn

    def block(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                             nn.ReLU())

    class UNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc1, self.pool1 = block(3, 8), nn.MaxPool2d(2)
            self.enc2, self.pool2 = block(8, 16), nn.MaxPool2d(2)
            self.mid = block(16, 16)
            self.up1 = nn.ConvTranspose2d(16, 16, 3, stride=2, padding=1, output_padding=1)
            self.dec1 = block(32, 16)
            self.up2 = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
            self.dec2 = block(24, 8)
            self.head = nn.Conv2d(8, CLASSES, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            s1 = self.enc1(x)
            s2 = self.enc2(self.pool1(s1))
            m = self.mid(self.pool2(s2))
            d1 = self.dec1(torch.cat([self.up1(m), s2], 1))
            d2 = self.dec2(torch.cat([self.up2(d1), s1], 1))
            return self.head(d2)

    torch.manual_seed(seed)
    model = UNet()
    lrs = learning_rates(steps, lr)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda k: lrs[min(int(k), steps - 1)] / lr)

    return vit_spec.classifier_spec(
        model, make_batches(seed, steps, batch, size), optimizer, torch.float32, lrs,
        f"PyTorch U-Net ({size}px), SGD momentum + warm-up/cosine LambdaLR, cross-entropy "
        "ignoring 255", ignore_index=IGNORE, scheduler=scheduler)


def _ms_cells(bug: str | None, rewrite: bool, size: int) -> Any:
    import mindspore as ms
    import numpy as np
    from mindspore import nn, ops

    class ConvBNReLU(nn.Cell):
        def __init__(self, cin: int, cout: int, swap: int = 0) -> None:
            super().__init__()
            self.conv = SwappedConv(cin, cout, swap) if swap else nn.Conv2d(
                cin, cout, 3, pad_mode="pad", padding=1, has_bias=False)
            self.bn = nn.BatchNorm2d(cout, momentum=0.9, eps=1e-5)
            self.relu = nn.ReLU()

        def construct(self, x: ms.Tensor) -> ms.Tensor:
            return self.relu(self.bn(self.conv(x)))

    class SwappedConv(nn.Cell):
        """A 3x3 conv (no bias) whose input arrives with its last ``swap`` channels first: the
        weight stays in the reference's layout, its input channels are swapped here."""

        def __init__(self, cin: int, cout: int, swap: int) -> None:
            super().__init__()
            self.swap = cin - swap
            self.weight = ms.Parameter(ms.Tensor(np.zeros((cout, cin, 3, 3), np.float32)))

        def construct(self, x: ms.Tensor) -> ms.Tensor:
            w = ops.concat((self.weight[:, self.swap:], self.weight[:, :self.swap]), 1)
            return ops.conv2d(x, w, pad_mode="pad", padding=1)

    class EmulatedDeconv(nn.Cell):
        """ConvTranspose2d(k=3, s=2, padding=1, output_padding=1) as a convolution: zeros
        inserted between the inputs, padding k-1-p = 1 before and k-1-p+output_padding = 2
        after, the kernel flipped and its in/out channels exchanged."""

        def __init__(self, cin: int, cout: int) -> None:
            super().__init__()
            self.weight = ms.Parameter(ms.Tensor(np.zeros((cin, cout, 3, 3), np.float32)))
            self.bias = ms.Parameter(ms.Tensor(np.zeros((cout,), np.float32)))
            self.spread = ms.Tensor(np.array([[1, 0], [0, 0]], np.float32))

        def construct(self, x: ms.Tensor) -> ms.Tensor:
            b, c, h, w = x.shape
            z = (x[:, :, :, None, :, None] * self.spread[:, None, :]).reshape(b, c, 2 * h, 2 * w)
            z = ops.pad(z[:, :, :2 * h - 1, :2 * w - 1], (1, 2, 1, 2))
            k = ops.flip(self.weight, (2, 3)).transpose(1, 0, 2, 3)
            return ops.conv2d(z, k) + self.bias.reshape(1, -1, 1, 1)

    class UNet(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.enc1 = ConvBNReLU(3, 8)
            self.pool1 = nn.MaxPool2d(2, 2)
            self.enc2 = ConvBNReLU(8, 16)
            self.pool2 = nn.MaxPool2d(2, 2)
            self.mid = ConvBNReLU(16, 16)
            if rewrite:
                self.up1: nn.Cell = EmulatedDeconv(16, 16)
            elif bug == "deconv-pad":
                self.up1 = nn.Conv2dTranspose(16, 16, 3, stride=2, pad_mode="pad", padding=1,
                                              output_padding=1, has_bias=True)
            else:
                self.up1 = nn.Conv2dTranspose(16, 16, 3, stride=2, pad_mode="pad",
                                              padding=(1, 0, 1, 0), has_bias=True)
            self.dec1 = ConvBNReLU(32, 16)
            if rewrite:
                self.resize = ops.ResizeBilinearV2(align_corners=False, half_pixel_centers=True)
            else:
                self.up2 = nn.Upsample(size=(size, size), mode="bilinear",
                                       align_corners=bug == "align-corners")
            self.dec2 = ConvBNReLU(24, 8, swap=8 if rewrite else 0)
            self.head = nn.Conv2d(8, CLASSES, 1, has_bias=True)

        def construct(self, x: ms.Tensor) -> ms.Tensor:
            s1 = self.enc1(x)
            s2 = self.enc2(self.pool1(s1))
            m = self.mid(self.pool2(s2))
            d1 = self.dec1(ops.concat((self.up1(m), s2), 1))
            if rewrite:
                d2 = self.dec2(ops.concat((s1, self.resize(d1, (size, size))), 1))
            else:
                d2 = self.dec2(ops.concat((self.up2(d1), s1), 1))
            return self.head(d2)

    return UNet()


def _ms_side(bug: str | None, rewrite: bool, lr_cell: bool, steps: int, batch: int, size: int,
             seed: int, lr: float) -> dict[str, Any]:
    import mindspore as ms
    import numpy as np
    from mindspore import nn, ops
    from mindspore.nn.learning_rate_schedule import LearningRateSchedule
    from tests.corpus import ms_vit_spec

    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_seed(seed)
    model = _ms_cells(bug, rewrite, size)
    lrs = learning_rates(steps, lr, ahead=bug == "lr-ahead")
    if rewrite or lr_cell:
        class WarmupCosine(LearningRateSchedule):
            """The warm-up + cosine rate computed from the global step."""

            def construct(self, global_step: ms.Tensor) -> ms.Tensor:
                k = global_step.astype(ms.float32)
                warm = lr * (k + 1) / WARMUP
                total = steps + 1
                cos = lr * 0.5 * (1 + ops.cos(math.pi * (k - WARMUP + 1) / (total - WARMUP + 1)))
                return ops.select(k < WARMUP, warm, cos)

        rate: Any = WarmupCosine()
    else:
        rate = lrs
    params = model.trainable_params()
    optimizer = nn.Momentum(params, learning_rate=rate, momentum=0.9)

    def loss_fn(logits: ms.Tensor, labels: Any) -> ms.Tensor:
        y = labels if isinstance(labels, ms.Tensor) else ms.Tensor(np.asarray(labels, np.int32))
        if bug == "no-ignore":  # 255 is out of range for the kernel: clamped to class 0
            return ops.cross_entropy(logits, ops.select(y == IGNORE, ops.zeros_like(y), y))
        if not rewrite:
            return ops.cross_entropy(logits, y, ignore_index=IGNORE)
        keep = y != IGNORE
        safe = ops.select(keep, y, ops.zeros_like(y))
        logp = ops.log_softmax(logits, 1)
        picked = ops.gather_elements(logp, 1, safe[:, None]).squeeze(1)
        mask = keep.astype(logits.dtype)
        return -(picked * mask).sum() / mask.sum()

    def forward(x: ms.Tensor, y: ms.Tensor) -> ms.Tensor:
        return loss_fn(model(x), y)

    grad_fn = ms.value_and_grad(forward, None, params)

    return {"framework": "mindspore", "model": model,
            "batches": make_batches(seed, steps, batch, size), "loss_fn": loss_fn,
            "optimizer": optimizer, "lr_schedule": lrs,
            "train_step": ms_vit_spec.train_step(model, grad_fn, params, optimizer),
            "description": f"MindSpore U-Net port ({size}px), Momentum + warm-up/cosine "
                           f"({'schedule cell' if rewrite or lr_cell else 'dynamic LR list'}), "
                           f"rewrite {rewrite}, bug {bug}"}


def build(**options: Any) -> dict[str, Any]:
    """Build one side (see the module docstring)."""
    framework = options.get("framework", "torch")
    bug = options.get("bug")
    if bug not in (None, *BUGS):
        raise ValueError(f"unknown bug {bug!r}; choose from {', '.join(BUGS)}")
    steps, batch = int(options.get("steps", 3)), int(options.get("batch_size", 2))
    size, seed, lr = int(options.get("image_size", 16)), int(options.get("seed", 0)), \
        float(options.get("lr", 0.05))
    if framework == "torch":
        if bug or options.get("rewrite"):
            raise ValueError("bugs and rewrites are the MindSpore port's (framework='mindspore')")
        return _torch_side(steps, batch, size, seed, lr)
    if framework != "mindspore":
        raise ValueError(f"framework must be 'torch' or 'mindspore', not {framework!r}")
    return _ms_side(bug, bool(options.get("rewrite")), bool(options.get("lr_cell")), steps, batch,
                    size, seed, lr)
