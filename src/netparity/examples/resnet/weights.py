"""Framework-neutral initial weights and the torchvision -> MindSpore-port name mapping.

Both specs of the demo must start from the *same* weights, and neither side should need the
other framework, so the initial weights are drawn here with numpy (torchvision's scheme:
He-normal ``fan_out`` convolutions, BN weight 1 / bias 0 / running mean 0 / var 1, and
PyTorch's default uniform ``fc``), keyed by torchvision names. :func:`torch_to_ms_name` renames
one key for the MindSpore port (see :mod:`ms_resnet` for the table). netparity's general
checkpoint mapper lives in ``netparity.ckpt``; this small, explicit version keeps the example
self-contained.

Example:
    >>> w = make_weights(18, num_classes=10, seed=0)
    >>> w["fc.weight"].shape
    (10, 512)
    >>> torch_to_ms_name("layer2.0.downsample.1.running_var", depth=50)
    'layer2.0.down_sample_layer.1.moving_variance'
    >>> torch_to_ms_name("layer1.0.bn2.weight", depth=18)
    'layer1.0.bn2d.gamma'
"""

from __future__ import annotations

import math
import re

import numpy as np

from netparity.errors import UsageError
from netparity.param_names import BN_TORCH_TO_MS

__all__ = ["LAYERS", "make_weights", "torch_to_ms_name", "torch_to_ms_state", "weight_names"]

#: Blocks per stage for each depth, and whether the block is the basic (2-conv) one.
LAYERS: dict[int, tuple[list[int], bool]] = {
    18: ([2, 2, 2, 2], True),
    34: ([3, 4, 6, 3], True),
    50: ([3, 4, 6, 3], False),
    101: ([3, 4, 23, 3], False),
    152: ([3, 8, 36, 3], False),
}


def _layers(depth: int) -> tuple[list[int], bool]:
    if depth not in LAYERS:
        raise UsageError(f"ResNet depth must be one of {sorted(LAYERS)}, got {depth}")
    return LAYERS[depth]


def _specs(depth: int, num_classes: int) -> list[tuple[str, str, tuple[int, ...]]]:
    """(torchvision module path, kind, weight shape) in torchvision's registration order."""
    layers, basic = _layers(depth)
    expansion = 1 if basic else 4
    out: list[tuple[str, str, tuple[int, ...]]] = [
        ("conv1", "conv", (64, 3, 7, 7)),
        ("bn1", "bn", (64,)),
    ]
    inplanes = 64
    for stage, (planes, blocks) in enumerate(zip([64, 128, 256, 512], layers)):
        for b in range(blocks):
            p = f"layer{stage + 1}.{b}"
            stride = 2 if stage > 0 and b == 0 else 1
            if basic:
                out += [
                    (f"{p}.conv1", "conv", (planes, inplanes, 3, 3)),
                    (f"{p}.bn1", "bn", (planes,)),
                    (f"{p}.conv2", "conv", (planes, planes, 3, 3)),
                    (f"{p}.bn2", "bn", (planes,)),
                ]
            else:
                out += [
                    (f"{p}.conv1", "conv", (planes, inplanes, 1, 1)),
                    (f"{p}.bn1", "bn", (planes,)),
                    (f"{p}.conv2", "conv", (planes, planes, 3, 3)),
                    (f"{p}.bn2", "bn", (planes,)),
                    (f"{p}.conv3", "conv", (planes * 4, planes, 1, 1)),
                    (f"{p}.bn3", "bn", (planes * 4,)),
                ]
            if b == 0 and (stride != 1 or inplanes != planes * expansion):
                out += [
                    (f"{p}.downsample.0", "conv", (planes * expansion, inplanes, 1, 1)),
                    (f"{p}.downsample.1", "bn", (planes * expansion,)),
                ]
            inplanes = planes * expansion
    out.append(("fc", "fc", (num_classes, 512 * expansion)))
    return out


def weight_names(depth: int, num_classes: int = 1000) -> list[str]:
    """torchvision ``state_dict`` keys (without ``num_batches_tracked``), in order.

    Example:
        >>> weight_names(50)[:3]
        ['conv1.weight', 'bn1.weight', 'bn1.bias']
    """
    return list(make_weights(depth, num_classes, seed=0, shapes_only=True))


def make_weights(
    depth: int, num_classes: int = 1000, seed: int = 0, shapes_only: bool = False
) -> dict[str, np.ndarray]:
    """Initial weights with torchvision's scheme, keyed by torchvision names (float32).

    Args:
        depth: 18, 34, 50, 101 or 152.
        num_classes: classifier outputs.
        seed: numpy seed; same seed, same weights.
        shapes_only: return zero arrays (cheap) when only names and shapes are needed.

    Example:
        >>> w = make_weights(50, num_classes=4)
        >>> sum(v.size for k, v in w.items() if "running" not in k)
        23516228
    """
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}

    def draw(shape: tuple[int, ...], std: float) -> np.ndarray:
        if shapes_only:
            return np.zeros(shape, np.float32)
        return rng.normal(0.0, std, size=shape).astype(np.float32)

    for path, kind, shape in _specs(depth, num_classes):
        if kind == "conv":
            fan_out = shape[0] * shape[2] * shape[3]
            out[f"{path}.weight"] = draw(shape, math.sqrt(2.0 / fan_out))
        elif kind == "bn":
            out[f"{path}.weight"] = np.ones(shape, np.float32)
            out[f"{path}.bias"] = np.zeros(shape, np.float32)
            out[f"{path}.running_mean"] = np.zeros(shape, np.float32)
            out[f"{path}.running_var"] = np.ones(shape, np.float32)
        else:
            # PyTorch's nn.Linear default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for both.
            bound = 1.0 / math.sqrt(shape[1])
            if shapes_only:
                out["fc.weight"] = np.zeros(shape, np.float32)
                out["fc.bias"] = np.zeros(shape[:1], np.float32)
            else:
                out["fc.weight"] = rng.uniform(-bound, bound, size=shape).astype(np.float32)
                out["fc.bias"] = rng.uniform(-bound, bound, size=shape[:1]).astype(np.float32)
    return out


_BASIC_BN = re.compile(r"^(layer\d+\.\d+)\.bn([12])$")


def torch_to_ms_name(name: str, depth: int) -> str | None:
    """MindSpore-port name of a torchvision key; ``None`` for keys MindSpore has no twin of.

    Example:
        >>> torch_to_ms_name("fc.bias", depth=50)
        'end_point.bias'
        >>> torch_to_ms_name("bn1.num_batches_tracked", depth=50) is None
        True
    """
    _, basic = _layers(depth)
    module, _, leaf = name.rpartition(".")
    if leaf == "num_batches_tracked":
        return None
    is_bn = leaf in ("running_mean", "running_var") or bool(
        re.search(r"(^|\.)bn\d$", module) or re.search(r"downsample\.1$", module)
    )
    if module == "fc":
        module = "end_point"
    module = module.replace(".downsample.", ".down_sample_layer.")
    if basic:
        m = _BASIC_BN.match(module)
        if m:
            module = f"{m.group(1)}.bn{m.group(2)}d"
    if is_bn:
        leaf = BN_TORCH_TO_MS[leaf]
    return f"{module}.{leaf}"


def torch_to_ms_state(state: dict[str, np.ndarray], depth: int) -> dict[str, np.ndarray]:
    """Rename a torchvision-keyed numpy state for the MindSpore port (drops batch counters).

    Example:
        >>> s = torch_to_ms_state(make_weights(18, 10), depth=18)
        >>> "end_point.weight" in s and "layer1.0.bn1d.moving_mean" in s
        True
    """
    out: dict[str, np.ndarray] = {}
    for key, value in state.items():
        new = torch_to_ms_name(key, depth)
        if new is not None:
            out[new] = np.asarray(value)
    return out
