"""torchvision's DenseNet against ``mindcv``'s, neither written here, in a small configuration
(growth rate 8, two dense blocks of two layers, 16 initial features; 32 px, batch 2).

The two libraries organise the network differently: torchvision applies the final ReLU
functionally in ``DenseNet.forward``, *after* its ``features`` container (whose output is the
last BatchNorm's), while mindcv keeps it inside as ``features.relu5``; mindcv names the dense
layers ``denseblockN.cell_list.K`` (torchvision ``denseblockN.denselayerK+1``), nests each
transition's layers one level deeper (``transitionN.features.norm``) and pads before its stem
max-pool in a cell of its own. The weights go from the torch model to the zoo model through
netparity's own checkpoint mapping (:func:`netparity.ckpt.mapping.map_names`).

Mistakes (``bug=``) made in the zoo model after it is built:

* ``bn-eps``     the second dense layer of the first block with BatchNorm epsilon 1e-3 in its
                 first norm (``norm1``);
* ``extra-relu`` a ReLU applied to the first dense block's output that the reference never
                 applies (the look of the faithful pair's moved ReLU, but the consumer -- the
                 transition's BatchNorm -- then sees other values).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from tests.corpus import zoo_pair

BUGS = ("bn-eps", "extra-relu")
#: where a correct diagnosis names each bug: (reference module, candidate module)
FOUND_AT = {"bn-eps": ("features.denseblock1.denselayer2.norm1",
                       "features.denseblock1.cell_list.1.norm1"),
            "extra-relu": ("features.denseblock1", "features.denseblock1")}
CLASSES, SIZE, BATCH = 10, 32, 2
CONFIG = {"growth_rate": 8, "block_config": (2, 2), "num_init_features": 16, "bn_size": 2}


def torch_model() -> Any:
    """torchvision's ``DenseNet`` (seed 0), eval, its BatchNorms given random affine parameters
    and running statistics (fresh ones are the identity in eval mode)."""
    import torch
    from tests.corpus.models import torchvision_models

    torch.manual_seed(0)
    return zoo_pair.randomise_batchnorms(torchvision_models().DenseNet(num_classes=CLASSES,
                                                                       **CONFIG))


def zoo_model(bug: str | None = None) -> Any:
    """``mindcv``'s ``DenseNet`` with the same configuration (weights random until
    :func:`load_weights`), eval."""
    import mindspore as ms
    from mindcv.models.densenet import DenseNet
    from mindspore import nn

    if bug not in (None, *BUGS):
        raise ValueError(f"unknown bug {bug!r}; choose from {', '.join(BUGS)}")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    model = DenseNet(num_classes=CLASSES, **CONFIG)
    if bug == "bn-eps":
        layer = model.features.denseblock1.cell_list[1]
        layer.norm1 = nn.BatchNorm2d(layer.norm1.num_features, eps=1e-3)
    elif bug == "extra-relu":
        block = model.features.denseblock1
        plain = block.construct
        block.construct = lambda x: ms.ops.relu(plain(x))
    model.set_train(False)
    return model


load_weights = zoo_pair.load_weights


def inputs() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((BATCH, 3, SIZE, SIZE)).astype(np.float32)


def capture_torch(model: Any, path: Path, level: str = "module") -> None:
    zoo_pair.capture_torch(model, path, level, inputs())


def capture_zoo(model: Any, path: Path, level: str = "module") -> None:
    zoo_pair.capture_zoo(model, path, level, inputs())
