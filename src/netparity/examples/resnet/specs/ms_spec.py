"""Candidate side of the ResNet demo for the one-step workflow (MindSpore, PyNative).

Same contract as ``torch_spec.py`` (read its docstring for the keys). Differences worth copying
into your own spec:

- the initial weights are the reference's, renamed (``name_map`` gives the pairing);
- ``train_step`` is ``ms.value_and_grad`` + the optimizer (hooks see every call), with the loss
  scaled by 1024 and ``Momentum(loss_scale=1024)`` undoing it; ``last_grads`` is unscaled;
- ``bug`` injects one migration bug from ``netparity.examples.resnet.bugs.BUGS``.

Example:
    >>> spec = build(depth=18, image_size=32, steps=1, bug="bn-eps")  # doctest: +SKIP
    >>> spec["train_step"](*spec["batches"][0])  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any


def build(**options: Any) -> dict[str, Any]:
    """Build the MindSpore port, its data, loss, optimizer and step (see the module docstring)."""
    import mindspore as ms
    import numpy as np

    from netparity.examples.resnet import data, ms_resnet, ms_train, weights
    from netparity.examples.resnet.schedule import HParams
    from netparity.examples.resnet.specs.common import data_root, resolve_options

    opts = resolve_options(**options)
    hp = HParams()
    depth, classes, bug = opts["depth"], opts["num_classes"], opts["bug"]
    ms.set_context(mode=ms.PYNATIVE_MODE)

    # 1. Model (with the bug, if any) loaded with the reference's initial weights, renamed.
    model = ms_resnet.FACTORIES[depth](num_classes=classes, bug=bug, seed=opts["seed"])
    ref_state = weights.make_weights(depth, classes, seed=opts["seed"])
    ms_resnet.load_numpy_state(model, weights.torch_to_ms_state(ref_state, depth))
    name_map = {
        new: old for old in ref_state if (new := weights.torch_to_ms_name(old, depth)) is not None
    }

    # 2. Deterministic data through MindData (PIL decoder: same values as the reference).
    root = data_root(opts)
    batches = data.ms_batches(root, opts["image_size"], opts["batch_size"], opts["steps"])

    # 3. Loss, LR schedule, Momentum with the document's weight-decay groups and loss scale.
    loss_fn = ms_train.CrossEntropySmooth(smooth_factor=hp.label_smooth, num_classes=classes,
                                          bug=bug)
    lr = ms_train.lr_schedule(opts["steps"], opts["warmup_steps"], opts["lr_max"], bug=bug)
    optimizer = ms_train.make_optimizer(
        model, lr, hp.momentum, hp.weight_decay, hp.loss_scale, bug=bug
    )

    # 4. PyNative step: value_and_grad + optimizer; the optimizer walks ``lr`` by itself.
    step = ms_train.TrainStep(model, loss_fn, optimizer)

    def loss(output: ms.Tensor, labels: Any) -> ms.Tensor:
        y = labels if isinstance(labels, ms.Tensor) else ms.Tensor(np.asarray(labels, np.int32))
        return loss_fn(output, y)

    return {
        "framework": "mindspore",
        "model": model,
        "batches": batches,
        "loss_fn": loss,
        "optimizer": optimizer,
        "lr_schedule": lr,
        "train_step": step,
        "eval": lambda: ms_train.evaluate(model, batches, bug=bug),
        "description": f"MindSpore ResNet-{depth} port (reference-document names)"
        + (f", bug {bug}" if bug else "")
        + f", {classes} classes, {opts['image_size']}px, batch {opts['batch_size']}",
        "name_map": name_map,
        "options": opts,
    }
