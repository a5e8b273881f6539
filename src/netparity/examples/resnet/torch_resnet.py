"""PyTorch ResNet with torchvision's structure, parameter names and initialisation.

torchvision is not a dependency of netparity, so the reference side of the ResNet demo is
written here. The module tree and ``state_dict`` keys are identical to
``torchvision.models.resnet`` (``conv1``, ``bn1``, ``relu``, ``maxpool``, ``layer1``..``layer4``
of ``BasicBlock``/``Bottleneck`` with ``conv1``/``bn1``/``conv2``/``bn2``/(``conv3``/``bn3``)/
``downsample.0``/``downsample.1``, ``avgpool``, ``fc``), so a torchvision checkpoint loads with
``load_state_dict`` unchanged, and parameter counts equal torchvision's (ResNet-18: 11,689,512;
ResNet-50: 25,557,032 with 1000 classes).

Example:
    >>> import torch
    >>> from netparity.examples.resnet.torch_resnet import resnet18
    >>> net = resnet18(num_classes=10).eval()
    >>> net(torch.zeros(1, 3, 32, 32)).shape
    torch.Size([1, 10])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

__all__ = [
    "BasicBlock",
    "Bottleneck",
    "ResNet",
    "conv1x1",
    "conv3x3",
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
]


def conv3x3(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    """3x3 convolution, symmetric padding 1, no bias (BatchNorm follows).

    Example:
        >>> conv3x3(3, 8, stride=2).padding
        (1, 1)
    """
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


def conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    """1x1 convolution without bias.

    Example:
        >>> conv1x1(8, 16).kernel_size
        (1, 1)
    """
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with an identity (or 1x1 projection) shortcut (ResNet-18/34)."""

    expansion: int = 1

    def __init__(
        self,
        inplanes: int,
        planes: int,
        stride: int = 1,
        downsample: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: Tensor) -> Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out = out + identity
        return self.relu(out)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3, 1x1 expand (x4) with shortcut (ResNet-50/101/152).

    The stride sits on the 3x3 convolution (torchvision's "ResNet v1.5"), as in the reference
    MindSpore port.
    """

    expansion: int = 4

    def __init__(
        self,
        inplanes: int,
        planes: int,
        stride: int = 1,
        downsample: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.conv1 = conv1x1(inplanes, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: Tensor) -> Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out = out + identity
        return self.relu(out)


Block = type[BasicBlock] | type[Bottleneck]


class ResNet(nn.Module):
    """ResNet backbone + classifier, torchvision layout.

    Args:
        block: ``BasicBlock`` or ``Bottleneck``.
        layers: number of blocks in each of the four stages.
        num_classes: classifier outputs.
        zero_init_residual: zero the last BN gamma of each residual branch (torchvision option).

    Example:
        >>> net = ResNet(BasicBlock, [1, 1, 1, 1], num_classes=3).eval()
        >>> net(torch.zeros(2, 3, 32, 32)).shape
        torch.Size([2, 3])
    """

    def __init__(
        self,
        block: Block,
        layers: list[int],
        num_classes: int = 1000,
        zero_init_residual: bool = False,
    ) -> None:
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)

        # torchvision's initialisation; nn.Linear keeps PyTorch's default (uniform) init.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, Bottleneck):
                    nn.init.constant_(m.bn3.weight, 0)
                elif isinstance(m, BasicBlock):
                    nn.init.constant_(m.bn2.weight, 0)

    def _make_layer(self, block: Block, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample: nn.Module | None = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers: list[nn.Module] = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def _resnet(block: Block, layers: list[int], num_classes: int, zero_init_residual: bool) -> ResNet:
    return ResNet(block, layers, num_classes=num_classes, zero_init_residual=zero_init_residual)


def resnet18(num_classes: int = 1000, zero_init_residual: bool = False) -> ResNet:
    """ResNet-18 (11,689,512 parameters with 1000 classes).

    Example:
        >>> sum(p.numel() for p in resnet18().parameters())
        11689512
    """
    return _resnet(BasicBlock, [2, 2, 2, 2], num_classes, zero_init_residual)


def resnet34(num_classes: int = 1000, zero_init_residual: bool = False) -> ResNet:
    """ResNet-34 (21,797,672 parameters with 1000 classes).

    Example:
        >>> resnet34(num_classes=10).fc.out_features
        10
    """
    return _resnet(BasicBlock, [3, 4, 6, 3], num_classes, zero_init_residual)


def resnet50(num_classes: int = 1000, zero_init_residual: bool = False) -> ResNet:
    """ResNet-50 v1.5 (25,557,032 parameters with 1000 classes).

    Example:
        >>> sum(p.numel() for p in resnet50().parameters())
        25557032
    """
    return _resnet(Bottleneck, [3, 4, 6, 3], num_classes, zero_init_residual)


def resnet101(num_classes: int = 1000, zero_init_residual: bool = False) -> ResNet:
    """ResNet-101 (44,549,160 parameters with 1000 classes).

    Example:
        >>> resnet101(num_classes=10).fc.in_features
        2048
    """
    return _resnet(Bottleneck, [3, 4, 23, 3], num_classes, zero_init_residual)


def resnet152(num_classes: int = 1000, zero_init_residual: bool = False) -> ResNet:
    """ResNet-152 (60,192,808 parameters with 1000 classes).

    Example:
        >>> resnet152(num_classes=10).fc.in_features
        2048
    """
    return _resnet(Bottleneck, [3, 8, 36, 3], num_classes, zero_init_residual)


FACTORIES: dict[int, Callable[..., ResNet]] = {
    18: resnet18,
    34: resnet34,
    50: resnet50,
    101: resnet101,
    152: resnet152,
}


def load_numpy_state(model: nn.Module, state: Mapping[str, Any]) -> None:
    """Copy numpy arrays keyed by torchvision names into ``model`` (strict, no pickle involved).

    ``num_batches_tracked`` may be absent from ``state``; it is then left as is.

    Raises:
        MappingError: a name is missing on either side or a shape differs.

    Example:
        >>> from netparity.examples.resnet.weights import make_weights
        >>> net = resnet18(num_classes=10)
        >>> load_numpy_state(net, make_weights(18, 10, seed=1))
    """
    import numpy as np

    from netparity.errors import MappingError

    own = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    missing = sorted(set(own) - set(state))
    extra = sorted(set(state) - set(own) - {k for k in state if k.endswith("num_batches_tracked")})
    if missing or extra:
        raise MappingError(
            f"state does not fit the model: missing {missing[:3]}, unexpected {extra[:3]}"
        )
    with torch.no_grad():
        for key, tensor in own.items():
            value = torch.from_numpy(np.ascontiguousarray(state[key], dtype=np.float32))
            if tuple(value.shape) != tuple(tensor.shape):
                raise MappingError(f"{key}: shape {tuple(value.shape)} != {tuple(tensor.shape)}")
            tensor.copy_(value)


def numpy_state(model: nn.Module) -> dict[str, object]:
    """``state_dict`` as numpy copies (``num_batches_tracked`` left out).

    Example:
        >>> len(numpy_state(resnet18(num_classes=10)))
        102
    """
    return {
        k: v.detach().cpu().numpy().copy()
        for k, v in model.state_dict().items()
        if not k.endswith("num_batches_tracked")
    }
