"""Reference side of the ResNet demo for the one-step workflow (PyTorch).

A spec is a Python file with ``build(**options) -> dict``. The keys (all required unless noted):

framework     "torch" or "mindspore"
model         the network, built with the initial weights
batches       list of (images, labels) numpy arrays, deterministic (same on every build)
loss_fn       callable(model_output, labels) -> scalar tensor of that framework
optimizer     built over the model's parameters (weight-decay groups included)
lr_schedule   list of per-step learning rates (len = steps)
train_step    callable(images, labels) -> float loss: forward + backward + update with the
              next LR; its ``last_grads`` attribute holds the unscaled gradients by name
eval          callable() -> {"top_1_accuracy", "top_5_accuracy", "loss", "count"} on ``batches``
description   one line for reports
(optional) name_map   {this side's parameter name: reference-side name}; absent on the reference

Options (see ``common.DEFAULTS``): depth, num_classes, image_size, batch_size, steps,
warmup_steps, lr_max, seed, bug, data_root. ``bug`` is ignored here: the reference has no bugs.

Example:
    >>> spec = build(depth=18, image_size=32, steps=1)  # doctest: +SKIP
    >>> spec["train_step"](*spec["batches"][0])  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any


def build(**options: Any) -> dict[str, Any]:
    """Build the PyTorch ResNet, its data, loss, optimizer and step (see the module docstring)."""
    import numpy as np
    import torch

    from netparity.examples.resnet import data, torch_resnet, torch_train, weights
    from netparity.examples.resnet.schedule import HParams, cosine_lr
    from netparity.examples.resnet.specs.common import data_root, resolve_options

    opts = resolve_options(**options)
    hp = HParams()
    depth, classes = opts["depth"], opts["num_classes"]

    # 1. Model with framework-neutral initial weights (the MindSpore spec loads the same ones).
    torch.manual_seed(opts["seed"])
    model = torch_resnet.FACTORIES[depth](num_classes=classes)
    torch_resnet.load_numpy_state(model, weights.make_weights(depth, classes, seed=opts["seed"]))

    # 2. Deterministic data: no shuffle, no augmentation.
    root = data_root(opts)
    batches = data.torch_batches(root, opts["image_size"], opts["batch_size"], opts["steps"])

    # 3. Loss, LR schedule, optimizer groups (decay on conv/linear weights only).
    loss_fn = torch_train.CrossEntropySmooth(hp.label_smooth, classes)
    lr = cosine_lr(hp.lr_init, hp.lr_end, opts["lr_max"], opts["steps"], opts["warmup_steps"])
    optimizer = torch_train.make_optimizer(model, lr[0], hp.momentum, hp.weight_decay)

    # 4. One training step per call, walking the LR schedule; keeps the last gradients.
    class Step:
        def __init__(self) -> None:
            self.step = 0
            self.last_grads: dict[str, np.ndarray] = {}

        def __call__(self, images: Any, labels: Any) -> float:
            rate = lr[min(self.step, len(lr) - 1)]
            loss, self.last_grads = torch_train.train_step(
                model, loss_fn, optimizer, images, labels, rate, hp.loss_scale
            )
            self.step += 1
            return loss

    def loss(output: torch.Tensor, labels: Any) -> torch.Tensor:
        return loss_fn(output, torch.as_tensor(labels).long())

    return {
        "framework": "torch",
        "model": model,
        "batches": batches,
        "loss_fn": loss,
        "optimizer": optimizer,
        "lr_schedule": lr,
        "train_step": Step(),
        "eval": lambda: torch_train.evaluate(model, batches),
        "description": f"PyTorch ResNet-{depth} (torchvision layout), {classes} classes, "
        f"{opts['image_size']}px, batch {opts['batch_size']}",
        "options": opts,
    }
