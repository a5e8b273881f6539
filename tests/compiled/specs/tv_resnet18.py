"""torchvision's ResNet-18 (a model nobody here wrote), tiny: 32 px, batch 2, SGD with momentum.

The eager <-> compiled corpus row runs it as both sides, the candidate with ``compile=true``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np


def build(steps: int = 2, image_size: int = 32, batch_size: int = 2, **options: Any) -> dict[str, Any]:
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from tests.corpus.models import torchvision_models
    from tiny_torch import train_step_of  # (the spec's folder is importable)

    tvm = torchvision_models()
    torch.manual_seed(0)
    model = tvm.resnet18(num_classes=4)
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((batch_size, 3, image_size, image_size)).astype(np.float32), rng.integers(0, 4, batch_size))
               for _ in range(steps)]
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return {"framework": "torch", "model": model, "batches": batches,
            "train_step": train_step_of(model, opt), "optimizer": opt,
            "description": f"torchvision resnet18, {image_size} px"}
