"""MindSpore side of the reference training recipe (PyNative first, ``Model.train`` optional).

As in the migration document: ``CrossEntropySmooth`` (label smoothing 0.1), ``nn.Momentum``
(0.875) with weight decay 1/32768 on every parameter except BatchNorm gamma/beta and biases
(``order_params`` keeps the network's order), a per-step cosine LR with warmup, static loss
scaling (``FixedLossScaleManager(1024, drop_overflow_update=False)`` with the same
``loss_scale`` given to ``Momentum``, which divides the gradients by it), checkpoints, and
top-1/top-5 evaluation after ``set_train(False)``.

The PyNative step is ``ms.value_and_grad`` + the optimizer, so cell hooks (netparity capture)
see every call. Training bugs (:data:`bugs.TRAIN_BUGS`) are injected here:

- ``bn-decay``: :func:`param_groups` puts BN parameters and biases in the decayed group;
- ``warmup``: :func:`lr_schedule` is off by one step in warmup;
- ``eval-mode``: :func:`evaluate` leaves the network in training mode.

Example:
    >>> from netparity.examples.resnet.ms_resnet import resnet18
    >>> net = resnet18(num_classes=4)
    >>> [len(g["params"]) for g in param_groups(net)[:2]]
    [21, 41]
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from netparity.examples.resnet.bugs import check_bug
from netparity.examples.resnet.schedule import HParams, TrainResult, cosine_lr, eval_metrics

__all__ = [
    "CrossEntropySmooth",
    "TrainResult",
    "TrainStep",
    "evaluate",
    "lr_schedule",
    "make_optimizer",
    "param_groups",
    "train",
    "train_with_model",
]


class CrossEntropySmooth(nn.LossBase):  # type: ignore[misc]
    """The document's label-smoothing loss: one-hot with ``1 - s`` / ``s / (C - 1)``.

    Example:
        >>> loss = CrossEntropySmooth(smooth_factor=0.1, num_classes=4)
        >>> x = ms.Tensor(np.zeros((2, 4), np.float32))
        >>> round(float(loss(x, ms.Tensor(np.array([0, 3], np.int32)))), 4)
        1.3863
    """

    def __init__(
        self,
        sparse: bool = True,
        reduction: str = "mean",
        smooth_factor: float = 0.0,
        num_classes: int = 1000,
        bug: str | None = None,
    ) -> None:
        super().__init__()
        self.onehot = ops.OneHot()
        self.sparse = sparse
        self.on_value = ms.Tensor(1.0 - smooth_factor, ms.float32)
        # the "label-smooth" bug spreads s over every class instead of the C - 1 wrong ones
        wrong = num_classes if check_bug(bug) == "label-smooth" else num_classes - 1
        self.off_value = ms.Tensor(1.0 * smooth_factor / wrong, ms.float32)
        self.ce = nn.SoftmaxCrossEntropyWithLogits(reduction=reduction)

    def construct(self, logit: ms.Tensor, label: ms.Tensor) -> ms.Tensor:
        if self.sparse:
            label = self.onehot(label, ops.shape(logit)[1], self.on_value, self.off_value)
        return self.ce(logit, label)


def lr_schedule(
    total_steps: int,
    warmup_steps: int,
    lr_max: float = HParams.lr_max,
    lr_init: float = HParams.lr_init,
    lr_end: float = HParams.lr_end,
    bug: str | None = None,
) -> list[float]:
    """The document's cosine LR with warmup; ``bug="warmup"`` shifts warmup by one step.

    Example:
        >>> lr_schedule(4, 2, lr_max=0.1)[0], lr_schedule(4, 2, lr_max=0.1, bug="warmup")[0]
        (0.05, 0.0)
    """
    return cosine_lr(lr_init, lr_end, lr_max, total_steps, warmup_steps, bug=check_bug(bug))


def param_groups(
    net: nn.Cell, weight_decay: float = HParams.weight_decay, bug: str | None = None
) -> list[dict[str, Any]]:
    """Decayed group (conv/dense weights), plain group (gamma, beta, bias), ``order_params``.

    The split is by name as in the document (``beta``, ``gamma``, ``bias`` stay undecayed).
    ``bug="bn-decay"`` decays everything (the migration forgot the exclusion).

    Example:
        >>> from netparity.examples.resnet.ms_resnet import resnet50
        >>> g = param_groups(resnet50(num_classes=4))
        >>> len(g[0]["params"]), len(g[1]["params"]), "order_params" in g[2]
        (54, 107, True)
    """
    decay_all = check_bug(bug) == "bn-decay"
    decayed, plain = [], []
    for param in net.trainable_params():
        leaf = param.name.rsplit(".", 1)[-1]
        if decay_all or leaf not in ("beta", "gamma", "bias"):
            decayed.append(param)
        else:
            plain.append(param)
    groups: list[dict[str, Any]] = [{"params": decayed, "weight_decay": weight_decay}]
    if plain:
        groups.append({"params": plain})
    groups.append({"order_params": net.trainable_params()})
    return groups


def make_optimizer(
    net: nn.Cell,
    lr: Sequence[float] | float,
    momentum: float = HParams.momentum,
    weight_decay: float = HParams.weight_decay,
    loss_scale: float = HParams.loss_scale,
    bug: str | None = None,
) -> nn.Momentum:
    """``nn.Momentum`` over :func:`param_groups` with a per-step LR list and ``loss_scale``.

    A list ``lr`` makes the optimizer step through it (its ``global_step`` counts updates).

    Example:
        >>> from netparity.examples.resnet.ms_resnet import resnet18
        >>> opt = make_optimizer(resnet18(num_classes=2), [0.1, 0.05])
        >>> opt.loss_scale
        1024.0
    """
    learning_rate: Any = lr
    if isinstance(lr, Sequence):
        # MindSpore wants a dynamic-LR tensor of 2+ elements; one step is a plain float.
        learning_rate = ms.Tensor(np.asarray(lr, np.float32)) if len(lr) > 1 else float(lr[0])
    return nn.Momentum(
        param_groups(net, weight_decay, bug),
        learning_rate,
        momentum,
        loss_scale=loss_scale,
    )


class TrainStep:
    """One PyNative training step: forward, loss × ``loss_scale``, ``value_and_grad``, update.

    Equivalent to ``Model(..., loss_scale_manager=FixedLossScaleManager(s,
    drop_overflow_update=False))`` with ``Momentum(loss_scale=s)``: the backward pass is seeded
    with ``s`` and the optimizer divides the gradients by ``s`` (and scales weight decay to
    match). After a call, :attr:`last_grads` holds the *unscaled* gradients by parameter name.

    Example:
        >>> from netparity.examples.resnet.ms_resnet import resnet18
        >>> net = resnet18(num_classes=2)
        >>> step = TrainStep(net, CrossEntropySmooth(smooth_factor=0.1, num_classes=2),
        ...                  make_optimizer(net, [0.01]))
        >>> loss = step(np.zeros((2, 3, 32, 32), np.float32), np.array([0, 1], np.int32))
        >>> "end_point.weight" in step.last_grads
        True
    """

    def __init__(
        self,
        net: nn.Cell,
        loss_fn: Callable[[ms.Tensor, ms.Tensor], ms.Tensor],
        optimizer: nn.Optimizer,
        loss_scale: float | None = None,
        keep_grads: bool = True,
    ) -> None:
        self.net = net
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.loss_scale = float(optimizer.loss_scale if loss_scale is None else loss_scale)
        self.keep_grads = keep_grads
        self.last_grads: dict[str, np.ndarray] = {}
        self._names = [p.name for p in optimizer.parameters]

        def forward(x: ms.Tensor, y: ms.Tensor) -> tuple[ms.Tensor, ms.Tensor]:
            loss = self.loss_fn(self.net(x), y)
            return loss * self.loss_scale, loss

        self._grad_fn = ms.value_and_grad(forward, None, optimizer.parameters, has_aux=True)

    def __call__(self, images: Any, labels: Any) -> float:
        self.net.set_train(True)
        x = images if isinstance(images, ms.Tensor) else ms.Tensor(np.asarray(images, np.float32))
        y = labels if isinstance(labels, ms.Tensor) else ms.Tensor(np.asarray(labels, np.int32))
        (_, loss), grads = self._grad_fn(x, y)
        if self.keep_grads:
            self.last_grads = {n: g.asnumpy() / self.loss_scale for n, g in zip(self._names, grads)}
        self.optimizer(grads)
        return float(loss.asnumpy())


def evaluate(
    net: nn.Cell, batches: Iterable[tuple[Any, Any]], bug: str | None = None
) -> dict[str, float]:
    """Top-1 / top-5 accuracy (k capped at the class count) and mean plain cross-entropy.

    ``bug="eval-mode"`` forgets ``net.set_train(False)``: BatchNorm then normalises with the
    batch's statistics and updates its moving averages during evaluation.

    Example:
        >>> from netparity.examples.resnet.ms_resnet import resnet18
        >>> b = [(np.zeros((2, 3, 32, 32), np.float32), np.array([0, 1], np.int32))]
        >>> sorted(evaluate(resnet18(num_classes=3), b))
        ['count', 'loss', 'top_1_accuracy', 'top_5_accuracy']
    """
    net.set_train(check_bug(bug) == "eval-mode")
    top1 = top5 = count = 0
    loss_sum = 0.0
    for images, labels in batches:
        x = images if isinstance(images, ms.Tensor) else ms.Tensor(np.asarray(images, np.float32))
        logits = net(x).asnumpy().astype(np.float64)
        y = np.asarray(labels.asnumpy() if isinstance(labels, ms.Tensor) else labels).astype(
            np.int64
        )
        k = min(5, logits.shape[1])
        top = np.argsort(-logits, axis=1, kind="stable")[:, :k]
        top1 += int((top[:, 0] == y).sum())
        top5 += int((top == y[:, None]).any(axis=1).sum())
        shifted = logits - logits.max(axis=1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        loss_sum += float(-logp[np.arange(len(y)), y].sum())
        count += len(y)
    net.set_train(True)
    return eval_metrics(top1, top5, loss_sum, count)


def train(
    net: nn.Cell,
    batches: Callable[[int], Iterable[tuple[Any, Any]]] | Sequence[tuple[Any, Any]],
    lr: Sequence[float],
    num_classes: int,
    hp: HParams = HParams(),
    ckpt_dir: str | os.PathLike[str] | None = None,
    save_every: int = 0,
    bug: str | None = None,
) -> TrainResult:
    """PyNative training for ``len(lr)`` steps, cycling over ``batches``.

    ``batches`` is a list of ``(images, labels)`` or a function ``epoch -> iterable`` (e.g.
    ``lambda e: ds.create_tuple_iterator(num_epochs=1)``). Checkpoints ``resnet-<step>.ckpt``
    (``mindspore.save_checkpoint``) are written every ``save_every`` steps and at the end.

    Example:
        >>> import tempfile
        >>> from netparity.examples.resnet.ms_resnet import resnet18
        >>> b = [(np.random.rand(2, 3, 32, 32).astype(np.float32), np.array([0, 1], np.int32))]
        >>> res = train(resnet18(num_classes=2), b, [0.01, 0.01], 2, ckpt_dir=tempfile.mkdtemp())
        >>> len(res.losses), res.checkpoints[-1].name
        (2, 'resnet-2.ckpt')
    """
    if not lr:
        return TrainResult()
    loss_fn = CrossEntropySmooth(smooth_factor=hp.label_smooth, num_classes=num_classes)
    opt = make_optimizer(net, list(lr), hp.momentum, hp.weight_decay, hp.loss_scale, bug)
    step_fn = TrainStep(net, loss_fn, opt, keep_grads=False)
    result = TrainResult()
    out = Path(ckpt_dir) if ckpt_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    step, epoch, total = 0, 0, len(lr)
    while step < total:
        seen = 0
        source = batches(epoch) if callable(batches) else batches
        for images, labels in source:
            if step >= total:
                break
            seen += 1
            result.losses.append(step_fn(images, labels))
            step += 1
            if out is not None and ((save_every and step % save_every == 0) or step == total):
                path = out / f"resnet-{step}.ckpt"
                ms.save_checkpoint(net, str(path))
                result.checkpoints.append(path)
        if not seen:
            break  # an empty source would loop forever
        epoch += 1
    return result


def train_with_model(
    net: nn.Cell,
    dataset: Any,
    epochs: int,
    lr: Sequence[float],
    num_classes: int,
    hp: HParams = HParams(),
    ckpt_dir: str | os.PathLike[str] | None = None,
    bug: str | None = None,
) -> Any:
    """The document's ``train.py``: ``Model.train`` with loss-scale manager and callbacks.

    Runs in whatever mode the context is in (the document uses ``GRAPH_MODE``; compiling the
    graph takes a while on CPU). ``dataset`` is a MindSpore dataset, e.g. :func:`data.ms_dataset`.
    Returns the ``Model``.
    """
    from mindspore.train import (
        CheckpointConfig,
        FixedLossScaleManager,
        LossMonitor,
        Model,
        ModelCheckpoint,
    )

    loss_fn = CrossEntropySmooth(
        sparse=True, reduction="mean", smooth_factor=hp.label_smooth, num_classes=num_classes
    )
    opt = make_optimizer(net, list(lr), hp.momentum, hp.weight_decay, hp.loss_scale, bug)
    manager = FixedLossScaleManager(hp.loss_scale, drop_overflow_update=False)
    model = Model(net, loss_fn=loss_fn, optimizer=opt, loss_scale_manager=manager, metrics={"acc"})
    callbacks: list[Any] = [LossMonitor()]
    if ckpt_dir is not None:
        steps = dataset.get_dataset_size()
        config = CheckpointConfig(save_checkpoint_steps=max(steps, 1), keep_checkpoint_max=5)
        callbacks.append(ModelCheckpoint(prefix="resnet", directory=str(ckpt_dir), config=config))
    model.train(epochs, dataset, callbacks=callbacks, dataset_sink_mode=False)
    return model
