"""torchvision's MobileNetV2 against the same network from a MindSpore model zoo (``mindcv``),
neither written here: the zoo flattens torchvision's ``Conv2dNormActivation`` groups into the
parent sequence (every later block index shifted by two), names the inverted residual's layers
``layers.N`` instead of ``conv.0.0``..., and its checkpoints list each BatchNorm as
``moving_mean, moving_variance, gamma, beta`` (PyTorch: ``weight, bias, running_mean,
running_var``). The weights go from the torch model to the zoo model through netparity's own
checkpoint mapping (:func:`netparity.ckpt.mapping.map_names`), from names, shapes and order.

Mistakes (``bug=``) made in the zoo model after it is built, each a one-layer porting slip:

* ``bn-eps``   the stem BatchNorm with epsilon 1e-3 (Keras/TensorFlow MobileNets' value);
* ``padding``  the first block's depthwise conv without padding (``pad_mode="valid"``): a 3x3
               kernel then shrinks the map by two pixels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

BUGS = ("bn-eps", "padding")

#: where a correct diagnosis names each bug: (reference module, candidate module)
FOUND_AT = {
    "bn-eps": ("features.0.1", "features.1"),
    "padding": ("features.1.conv.0.0", "features.3.layers.0"),
}
CLASSES, SIZE = 10, 32


def torch_model() -> Any:
    """torchvision's ``mobilenet_v2`` (random init, seed 0) in eval mode, its BatchNorms given
    random affine parameters and running statistics (fresh ones are the identity in eval mode,
    which no BatchNorm mistake would show through)."""
    import torch
    from tests.corpus.models import torchvision_models

    torch.manual_seed(0)
    return randomise_batchnorms(torchvision_models().mobilenet_v2(num_classes=CLASSES))


def randomise_batchnorms(model: Any) -> Any:
    """``model`` in eval mode, its BatchNorms given random affine parameters and running
    statistics (seed 1)."""
    import torch

    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                n = m.num_features
                m.weight.copy_(1 + 0.2 * torch.randn(n, generator=g))
                m.bias.copy_(0.1 * torch.randn(n, generator=g))
                m.running_mean.copy_(0.1 * torch.randn(n, generator=g))
                m.running_var.copy_(0.02 + 0.3 * torch.rand(n, generator=g))
    return model.eval()


def zoo_model(bug: str | None = None) -> Any:
    """``mindcv``'s ``mobilenet_v2_100`` (weights random until :func:`load_weights`), eval."""
    import mindspore as ms
    from mindcv.models import mobilenet_v2_100
    from mindspore import nn

    if bug not in (None, *BUGS):
        raise ValueError(f"unknown bug {bug!r}; choose from {', '.join(BUGS)}")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    model = mobilenet_v2_100(num_classes=CLASSES)
    if bug == "bn-eps":
        model.features[1] = nn.BatchNorm2d(32, eps=1e-3)
    elif bug == "padding":
        model.features[3].layers[0] = nn.Conv2d(32, 32, 3, 1, pad_mode="valid", group=32,
                                                has_bias=False)
    model.set_train(False)
    return model


def load_weights(ref: Any, cand: Any) -> int:
    """Copy the torch model's weights into the zoo model through netparity's checkpoint
    mapping (from the models' parameter lists, names, shapes and order: no layer types, no
    user mapping); returns the number of tensors copied."""
    from netparity.ckpt.mapping import map_names, state_of
    from netparity.frameworks.models import set_weights

    rs = state_of(ref)
    nm = map_names(dict(rs), dict(state_of(cand)))
    assert nm, (nm.unmatched_ref[:5], nm.unmatched_cand[:5], list(nm.ambiguous)[:5])
    nm.check_shapes()
    arrays = {p.cand: np.asarray(rs[p.ref]).reshape(p.cand_shape) for p in nm.pairs}
    set_weights(cand, arrays, {k: "float32" for k in arrays})
    return len(arrays)


def inputs() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((2, 3, SIZE, SIZE)).astype(np.float32)


def capture_torch(model: Any, path: Path, level: str = "module",
                  x: np.ndarray | None = None) -> None:
    import torch

    import netparity

    x = inputs() if x is None else x
    with torch.no_grad(), netparity.capture(model, str(path), payload="tensors",
                                            level=level) as cap:
        model(torch.from_numpy(x))
        cap.step()


def capture_zoo(model: Any, path: Path, level: str = "module",
                x: np.ndarray | None = None) -> None:
    import mindspore as ms

    import netparity

    x = inputs() if x is None else x
    with netparity.capture(model, str(path), payload="tensors", level=level) as cap:
        model(ms.Tensor(x))
        cap.step()
