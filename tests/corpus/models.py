"""Model pairs for the verdict corpus: a model nobody here wrote (torchvision) against a port
written independently, organised differently.

torchvision from PyPI is a CUDA build: with the CPU torch its compiled part fails to load and
``import torchvision`` raises while registering ``torchvision::nms``. Its models are pure Python,
so :func:`torchvision_models` defines the two missing operator schemas first.
"""

from __future__ import annotations

from typing import Any


def torchvision_models() -> Any:
    """``torchvision.models``, importable with the CPU torch (skips the test when absent)."""
    import pytest
    import torch

    try:
        import torchvision  # noqa: F401
    except ModuleNotFoundError:
        pytest.skip("torchvision is not installed")
    except RuntimeError:
        lib = torch.library.Library("torchvision", "DEF")  # noqa: F841 - kept alive below
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        torchvision_models._lib = lib  # type: ignore[attr-defined]
        import torchvision  # noqa: F401
    import torchvision.models as tvm

    return tvm


def flat_mobilenet_v2(num_classes: int = 10, *, stem_bn_eps: float = 1e-5) -> Any:
    """MobileNetV2 written as a port would be: each conv + norm + activation group of
    torchvision's ``Conv2dNormActivation`` flattened into its parent sequence, so the stem takes
    ``features.0-2`` and every later block index is shifted by two; the inverted residual blocks
    name their layers (``expand``, ``dw``, ``project``) instead of ``conv.0.0``...

    ``stem_bn_eps`` other than 1e-5 injects a classic porting mistake: Keras/TensorFlow
    MobileNets use BatchNorm epsilon 1e-3, and a port copied from them keeps it.
    """
    import torch
    from torch import nn

    def cbr(cin: int, cout: int, k: int, s: int, groups: int = 1) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, k, s, (k - 1) // 2, groups=groups, bias=False),
                nn.BatchNorm2d(cout), nn.ReLU6(inplace=True)]

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, t: int) -> None:
            super().__init__()
            hidden = cin * t
            self.use_res = stride == 1 and cin == cout
            self.expand = nn.Sequential(*cbr(cin, hidden, 1, 1)) if t != 1 else None
            self.dw = nn.Sequential(*cbr(hidden, hidden, 3, stride, groups=hidden))
            self.project = nn.Conv2d(hidden, cout, 1, 1, 0, bias=False)
            self.project_bn = nn.BatchNorm2d(cout)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.expand(x) if self.expand is not None else x
            y = self.project_bn(self.project(self.dw(y)))
            return x + y if self.use_res else y

    class FlatMobileNetV2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layers: list[nn.Module] = cbr(3, 32, 3, 2)
            layers[1].eps = stem_bn_eps
            cin = 32
            for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                               (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
                for i in range(n):
                    layers.append(Block(cin, c, s if i == 0 else 1, t))
                    cin = c
            layers += cbr(cin, 1280, 1, 1)
            self.features = nn.Sequential(*layers)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.dropout = nn.Dropout(0.2)
            self.fc = nn.Linear(1280, num_classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.pool(self.features(x)).flatten(1)
            return self.fc(self.dropout(x))

    return FlatMobileNetV2()


def copy_weights_in_order(src: Any, dst: Any) -> None:
    """Copy every parameter and buffer of ``src`` into ``dst`` by position (the two
    MobileNetV2s create them in the same order), checking shapes."""
    import torch

    a, b = list(src.state_dict().values()), list(dst.state_dict().values())
    assert len(a) == len(b), (len(a), len(b))
    with torch.no_grad():
        for x, y in zip(a, b):
            assert x.shape == y.shape, (x.shape, y.shape)
            y.copy_(x)
