"""MindSpore port of ResNet, following the reference migration example (PyNative-friendly).

The structure and cell names are the reference document's, *not* torchvision's, on purpose: the
demo shows netparity pairing renamed layers. Differences from :mod:`torch_resnet`:

============================  =====================================  =========================
torchvision (PyTorch)          this port (MindSpore)                  why
============================  =====================================  =========================
``layerN.i.downsample.0/1``    ``layerN.i.down_sample_layer.0/1``     document's name
``fc``                         ``end_point``                          document's name
``layerN.i.bn1``/``bn2``       ``layerN.i.bn1d``/``bn2d``             document's BasicBlock only
                               (ResNet-18/34)
``avgpool``                    ``mean`` (ReduceMean) + ``flatten``    no AdaptiveAvgPool needed
BN ``weight``/``bias``         ``gamma``/``beta``                     MindSpore naming
BN ``running_mean/var``        ``moving_mean``/``moving_variance``    MindSpore naming
BN ``num_batches_tracked``     (none)                                 not used by MindSpore
``momentum=0.1``               ``momentum=0.9``                       MindSpore = 1 - PyTorch
============================  =====================================  =========================

Where the document's code would compute different numbers from torchvision the port follows
torchvision, because a migration must reproduce the reference: convolutions use
``pad_mode="pad"`` with symmetric padding (the document's ``pad_mode="same"`` pads
asymmetrically at stride 2 — that is the ``same-pad`` bug), the stem max-pool pads 1 on each
side, and BatchNorm uses PyTorch's epsilon 1e-5.

Initialisation follows the document: convolutions get ``kaiming_normal(mode="fan_out",
nonlinearity="relu")`` drawn with numpy, BatchNorm gamma 1 / beta 0, the classifier weight
``N(0, 0.01)`` (the document's ``_weight_variable``) and bias 0. ``seed`` makes it reproducible.

Example:
    >>> import numpy as np, mindspore as ms
    >>> from netparity.examples.resnet.ms_resnet import resnet18
    >>> net = resnet18(num_classes=10)
    >>> _ = net.set_train(False)
    >>> net(ms.Tensor(np.zeros((1, 3, 32, 32), np.float32))).shape
    (1, 10)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from netparity.examples.resnet.bugs import BUGS, MODEL_BUGS, TRAIN_BUGS, check_bug

__all__ = [
    "BUGS",
    "MODEL_BUGS",
    "TRAIN_BUGS",
    "BasicBlock",
    "BottleNeck",
    "ResNet",
    "ResidualBlock",
    "ResidualBlockBase",
    "kaiming_normal",
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
]

#: PyTorch's BatchNorm defaults, converted: MindSpore momentum is the weight of the old value.
BN_EPS = 1e-5
BN_MOMENTUM = 0.9


class _Config:
    """Per-network build settings threaded through the helpers (bug switches, RNG)."""

    def __init__(self, bug: str | None, seed: int | None) -> None:
        self.bug = check_bug(bug)
        self.rng = np.random.default_rng(seed)
        # "same-pad" hits exactly one convolution: the first stride-2 3x3 one built.
        self.same_pad_pending = self.bug == "same-pad"
        self.same_pad_location: str | None = None
        # "relu-approx" hits the first residual block's activation only.
        self.relu_approx_pending = self.bug == "relu-approx"

    def activation(self) -> nn.Cell:
        """The blocks' ReLU; the "relu-approx" bug makes the first one a close approximation
        (LeakyReLU with slope 1e-3: outputs shift by ~1e-3 relative)."""
        if self.relu_approx_pending:
            self.relu_approx_pending = False
            return nn.LeakyReLU(alpha=1e-3)
        return nn.ReLU()


def kaiming_normal(
    shape: tuple[int, ...],
    rng: np.random.Generator,
    mode: str = "fan_out",
    nonlinearity: str = "relu",
) -> np.ndarray:
    """He-normal weights drawn with numpy, as the document's ``kaiming_normal``.

    Example:
        >>> w = kaiming_normal((64, 3, 7, 7), np.random.default_rng(0))
        >>> round(float(w.std()), 2) == round(math.sqrt(2 / (64 * 49)), 2)
        True
    """
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    fan = (shape[0] if mode == "fan_out" else shape[1]) * receptive
    gain = math.sqrt(2.0) if nonlinearity == "relu" else 1.0
    std = gain / math.sqrt(fan)
    return rng.normal(0.0, std, size=shape).astype(np.float32)


def _bn(channel: int, cfg: _Config, last: bool = False, zero_init: bool = False) -> nn.BatchNorm2d:
    eps = 1e-3 if cfg.bug == "bn-eps" else BN_EPS
    # The bug copies PyTorch's momentum literally instead of converting it (1 - 0.1).
    momentum = 0.1 if cfg.bug == "bn-momentum" else BN_MOMENTUM
    gamma = "zeros" if (last and zero_init) else "ones"
    return nn.BatchNorm2d(
        channel,
        eps=eps,
        momentum=momentum,
        gamma_init=gamma,
        beta_init="zeros",
        moving_mean_init="zeros",
        moving_var_init="ones",
    )


def _conv(
    in_channel: int, out_channel: int, kernel: int, stride: int, padding: int, cfg: _Config
) -> nn.Conv2d:
    # Unlike PyTorch, the weight initialisation is given when the layer is defined.
    weight = ms.Tensor(kaiming_normal((out_channel, in_channel, kernel, kernel), cfg.rng))
    if padding == 0:
        # A 1x1 kernel needs no padding; "valid" says so explicitly.
        return nn.Conv2d(
            in_channel, out_channel, kernel, stride=stride, pad_mode="valid", weight_init=weight
        )
    return nn.Conv2d(
        in_channel,
        out_channel,
        kernel,
        stride=stride,
        pad_mode="pad",
        padding=padding,
        weight_init=weight,
    )


def _conv3x3(in_channel: int, out_channel: int, cfg: _Config, stride: int = 1) -> nn.Conv2d:
    if stride == 2 and cfg.same_pad_pending:
        cfg.same_pad_pending = False
        weight = ms.Tensor(kaiming_normal((out_channel, in_channel, 3, 3), cfg.rng))
        # The bug: MindSpore's default pad_mode="same" pads (0, 1) at stride 2 on an even input
        # where PyTorch's padding=1 pads (1, 1).
        conv = nn.Conv2d(
            in_channel, out_channel, 3, stride=stride, pad_mode="same", weight_init=weight
        )
        conv.netparity_bug = "same-pad"  # found by the builder to report the location
        return conv
    return _conv(in_channel, out_channel, 3, stride, 1, cfg)


def _conv1x1(in_channel: int, out_channel: int, cfg: _Config, stride: int = 1) -> nn.Conv2d:
    return _conv(in_channel, out_channel, 1, stride, 0, cfg)


def _conv7x7(in_channel: int, out_channel: int, cfg: _Config, stride: int = 1) -> nn.Conv2d:
    return _conv(in_channel, out_channel, 7, stride, 3, cfg)


def _fc(in_channel: int, out_channel: int, cfg: _Config) -> nn.Dense:
    weight = ms.Tensor(
        (cfg.rng.standard_normal((out_channel, in_channel)) * 0.01).astype(np.float32)
    )
    return nn.Dense(in_channel, out_channel, has_bias=True, weight_init=weight, bias_init="zeros")


class BasicBlock(nn.Cell):
    """ResNet-18/34 block (document names: ``conv1, bn1d, conv2, bn2d, down_sample_layer``).

    ``out_channel`` is the block's output width (expansion 1).
    """

    expansion = 1

    def __init__(
        self,
        in_channel: int,
        out_channel: int,
        stride: int = 1,
        cfg: _Config | None = None,
        zero_init_residual: bool = False,
    ) -> None:
        super().__init__()
        cfg = cfg or _Config(None, 0)
        self.conv1 = _conv3x3(in_channel, out_channel, cfg, stride=stride)
        self.bn1d = _bn(out_channel, cfg)
        self.conv2 = _conv3x3(out_channel, out_channel, cfg, stride=1)
        self.bn2d = _bn(out_channel, cfg, last=True, zero_init=zero_init_residual)
        self.relu = cfg.activation()
        self.down_sample = stride != 1 or in_channel != out_channel
        self.down_sample_layer: nn.SequentialCell | None = None
        if self.down_sample:
            self.down_sample_layer = nn.SequentialCell(
                [_conv1x1(in_channel, out_channel, cfg, stride), _bn(out_channel, cfg)]
            )

    def construct(self, x: ms.Tensor) -> ms.Tensor:
        identity = x
        out = self.relu(self.bn1d(self.conv1(x)))
        out = self.bn2d(self.conv2(out))
        if self.down_sample:
            identity = self.down_sample_layer(identity)  # type: ignore[misc]
        return self.relu(out + identity)


class ResidualBlock(nn.Cell):
    """Bottleneck block of ResNet-50/101/152 (the document's ``BottleNeck``/``ResidualBlock``).

    ``out_channel`` is the expanded output width; the inner width is ``out_channel // 4``. The
    stride sits on the 3x3 convolution, as in torchvision (ResNet v1.5).
    """

    expansion = 4

    def __init__(
        self,
        in_channel: int,
        out_channel: int,
        stride: int = 1,
        cfg: _Config | None = None,
        zero_init_residual: bool = False,
    ) -> None:
        super().__init__()
        cfg = cfg or _Config(None, 0)
        self.stride = stride
        channel = out_channel // self.expansion
        self.conv1 = _conv1x1(in_channel, channel, cfg, stride=1)
        self.bn1 = _bn(channel, cfg)
        self.conv2 = _conv3x3(channel, channel, cfg, stride=stride)
        self.bn2 = _bn(channel, cfg)
        self.conv3 = _conv1x1(channel, out_channel, cfg, stride=1)
        self.bn3 = _bn(out_channel, cfg, last=True, zero_init=zero_init_residual)
        self.relu = cfg.activation()
        self.down_sample = stride != 1 or in_channel != out_channel
        self.down_sample_layer: nn.SequentialCell | None = None
        if self.down_sample:
            self.down_sample_layer = nn.SequentialCell(
                [_conv1x1(in_channel, out_channel, cfg, stride), _bn(out_channel, cfg)]
            )

    def construct(self, x: ms.Tensor) -> ms.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.down_sample:
            identity = self.down_sample_layer(identity)  # type: ignore[misc]
        return self.relu(out + identity)


# The document's alternative names for the same blocks.
BottleNeck = ResidualBlock
ResidualBlockBase = BasicBlock

Block = type[BasicBlock] | type[ResidualBlock]


class ResNet(nn.Cell):
    """ResNet backbone + ``end_point`` classifier, built from per-stage channel lists.

    Args:
        block: ``BasicBlock`` or ``ResidualBlock``.
        layer_nums: blocks per stage (4 values).
        in_channels: input width of each stage.
        out_channels: output width of each stage.
        strides: stride of each stage's first block.
        num_classes: classifier outputs.
        bug: a name from :data:`BUGS` or ``None``.
        seed: seed of the numpy generator used for the initial weights.
        zero_init_residual: zero gamma of each block's last BN (the document's ``_bn_last``).

    Attributes:
        bug: the bug injected (``None`` if none).
        bug_location: cell name the bug affects when it hits a single place ("same-pad").

    Example:
        >>> net = ResNet(BasicBlock, [1, 1, 1, 1], [64, 64, 128, 256], [64, 128, 256, 512],
        ...              [1, 2, 2, 2], num_classes=3)
        >>> net.end_point.weight.shape
        (3, 512)
    """

    def __init__(
        self,
        block: Block,
        layer_nums: list[int],
        in_channels: list[int],
        out_channels: list[int],
        strides: list[int],
        num_classes: int = 1000,
        bug: str | None = None,
        seed: int | None = 0,
        zero_init_residual: bool = False,
    ) -> None:
        super().__init__()
        if not len(layer_nums) == len(in_channels) == len(out_channels) == len(strides) == 4:
            raise ValueError("layer_nums, in_channels, out_channels and strides need 4 values each")
        cfg = _Config(bug, seed)
        self.bug = cfg.bug
        self.conv1 = _conv7x7(3, 64, cfg, stride=2)
        self.bn1 = _bn(64, cfg)
        self.relu = ops.ReLU()
        # torchvision pads 1 on each side; the document's pad_mode="same" would pad (0, 1).
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, pad_mode="pad", padding=1)
        stages = []
        for i in range(4):
            stages.append(
                self._make_layer(
                    block,
                    layer_nums[i],
                    in_channels[i],
                    out_channels[i],
                    strides[i],
                    cfg,
                    zero_init_residual,
                )
            )
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.mean = ops.ReduceMean(keep_dims=True)
        self.flatten = nn.Flatten()
        self.end_point = _fc(out_channels[3], num_classes, cfg)
        self.bug_location: str | None = None
        for name, cell in self.cells_and_names():
            if getattr(cell, "netparity_bug", None) == "same-pad":
                self.bug_location = name

    @staticmethod
    def _make_layer(
        block: Block,
        layer_num: int,
        in_channel: int,
        out_channel: int,
        stride: int,
        cfg: _Config,
        zero_init_residual: bool,
    ) -> nn.SequentialCell:
        layers: list[nn.Cell] = [
            block(
                in_channel,
                out_channel,
                stride=stride,
                cfg=cfg,
                zero_init_residual=zero_init_residual,
            )
        ]
        for _ in range(1, layer_num):
            layers.append(
                block(
                    out_channel,
                    out_channel,
                    stride=1,
                    cfg=cfg,
                    zero_init_residual=zero_init_residual,
                )
            )
        return nn.SequentialCell(layers)

    def construct(self, x: ms.Tensor) -> ms.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        c1 = self.maxpool(x)
        c2 = self.layer1(c1)
        c3 = self.layer2(c2)
        c4 = self.layer3(c3)
        c5 = self.layer4(c4)
        out = self.mean(c5, (2, 3))
        out = self.flatten(out)
        return self.end_point(out)


_BASIC_IN = [64, 64, 128, 256]
_BASIC_OUT = [64, 128, 256, 512]
_BOTTLE_IN = [64, 256, 512, 1024]
_BOTTLE_OUT = [256, 512, 1024, 2048]
_STRIDES = [1, 2, 2, 2]


def _build(block: Block, layers: list[int], num_classes: int, kwargs: dict[str, Any]) -> ResNet:
    basic = block is BasicBlock
    return ResNet(
        block,
        layers,
        _BASIC_IN if basic else _BOTTLE_IN,
        _BASIC_OUT if basic else _BOTTLE_OUT,
        _STRIDES,
        num_classes=num_classes,
        **kwargs,
    )


def resnet18(num_classes: int = 1000, bug: str | None = None, **kwargs: Any) -> ResNet:
    """ResNet-18 (``seed=``, ``zero_init_residual=`` also accepted).

    Example:
        >>> sum(p.size for p in resnet18().trainable_params())
        11689512
    """
    return _build(BasicBlock, [2, 2, 2, 2], num_classes, {"bug": bug, **kwargs})


def resnet34(num_classes: int = 1000, bug: str | None = None, **kwargs: Any) -> ResNet:
    """ResNet-34.

    Example:
        >>> resnet34(num_classes=10).end_point.weight.shape
        (10, 512)
    """
    return _build(BasicBlock, [3, 4, 6, 3], num_classes, {"bug": bug, **kwargs})


def resnet50(num_classes: int = 1000, bug: str | None = None, **kwargs: Any) -> ResNet:
    """ResNet-50 as the reference document builds it.

    Example:
        >>> resnet50(bug="same-pad").bug_location
        'layer2.0.conv2'
    """
    return _build(ResidualBlock, [3, 4, 6, 3], num_classes, {"bug": bug, **kwargs})


def resnet101(num_classes: int = 1000, bug: str | None = None, **kwargs: Any) -> ResNet:
    """ResNet-101.

    Example:
        >>> resnet101(num_classes=10).end_point.weight.shape
        (10, 2048)
    """
    return _build(ResidualBlock, [3, 4, 23, 3], num_classes, {"bug": bug, **kwargs})


def resnet152(num_classes: int = 1000, bug: str | None = None, **kwargs: Any) -> ResNet:
    """ResNet-152.

    Example:
        >>> resnet152(num_classes=10).end_point.weight.shape
        (10, 2048)
    """
    return _build(ResidualBlock, [3, 8, 36, 3], num_classes, {"bug": bug, **kwargs})


FACTORIES: dict[int, Callable[..., ResNet]] = {
    18: resnet18,
    34: resnet34,
    50: resnet50,
    101: resnet101,
    152: resnet152,
}


def load_numpy_state(net: nn.Cell, state: dict[str, np.ndarray]) -> None:
    """Copy numpy arrays (keyed by this port's parameter names) into ``net``, strictly.

    Raises:
        MappingError: a name is missing on either side or a shape differs.

    Example:
        >>> from netparity.examples.resnet.weights import make_weights, torch_to_ms_state
        >>> net = resnet18(num_classes=10)
        >>> load_numpy_state(net, torch_to_ms_state(make_weights(18, 10, seed=1), depth=18))
    """
    from netparity.errors import MappingError

    params = {p.name: p for p in net.get_parameters()}
    missing = sorted(set(params) - set(state))
    extra = sorted(set(state) - set(params))
    if missing or extra:
        raise MappingError(
            f"state does not fit the network: missing {missing[:3]}, unexpected {extra[:3]}"
        )
    for name, param in params.items():
        value = np.asarray(state[name], dtype=np.float32)
        if tuple(value.shape) != tuple(param.shape):
            raise MappingError(f"{name}: shape {tuple(value.shape)} != {tuple(param.shape)}")
        param.set_data(ms.Tensor(value))


def numpy_state(net: nn.Cell) -> dict[str, np.ndarray]:
    """All parameters (moving statistics included) as numpy copies, by name.

    Example:
        >>> len(numpy_state(resnet18(num_classes=10)))
        102
    """
    return {p.name: p.asnumpy().copy() for p in net.get_parameters()}
