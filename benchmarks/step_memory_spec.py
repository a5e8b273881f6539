"""A spec for ``benchmarks/step_memory.py``: a randomly initialised large vision model.

Options: ``arch`` (``resnet50``: torchvision's, SGD with momentum; ``vit_b32``: a ViT-B/32
shaped transformer from timm, AdamW; ``vit_l16``: ViT-L/16 from timm, 304M parameters, AdamW),
``image_size`` (default 64), ``batch_size`` (2), ``steps`` (2), ``seed``. Deterministic: the same weights and batches on every build.
"""

from __future__ import annotations

from typing import Any


def _torchvision_models() -> Any:
    """``torchvision.models`` with the CPU torch (see tests/corpus/models.py)."""
    import torch

    try:
        import torchvision  # noqa: F401
    except RuntimeError:
        lib = torch.library.Library("torchvision", "DEF")  # noqa: F841 - kept alive below
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _torchvision_models.lib = lib  # type: ignore[attr-defined]
        import torchvision  # noqa: F401
    import torchvision.models as tvm

    return tvm


TIMM = {"vit_b32": "vit_base_patch32_224",  # 88M parameters
        "vit_l16": "vit_large_patch16_224"}  # 304M parameters


def build(arch: str = "resnet50", image_size: int = 64, batch_size: int = 2, steps: int = 2,
          seed: int = 0, **_: Any) -> dict[str, Any]:
    import numpy as np
    import torch

    torch.manual_seed(int(seed))
    classes = 10
    if arch == "resnet50":
        model = _torchvision_models().resnet50(num_classes=classes)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    elif arch in TIMM:
        _torchvision_models()  # timm imports torchvision (the CUDA build: see above)
        import timm

        model = timm.create_model(TIMM[arch], pretrained=False, num_classes=classes,
                                  img_size=int(image_size))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    else:
        raise ValueError(f"unknown arch {arch!r}")
    rng = np.random.default_rng(int(seed))
    n, s = int(batch_size), int(image_size)
    batches = [(rng.standard_normal((n, 3, s, s)).astype(np.float32),
                rng.integers(0, classes, n).astype(np.int64)) for _ in range(int(steps))]
    loss_fn = torch.nn.CrossEntropyLoss()

    def train_step(x: Any, y: Any) -> float:
        model.train()
        opt.zero_grad()
        loss = loss_fn(model(torch.as_tensor(x)), torch.as_tensor(y))
        loss.backward()
        opt.step()
        return float(loss)

    def evaluate() -> dict[str, Any]:
        model.eval()
        with torch.no_grad():
            loss = sum(float(loss_fn(model(torch.as_tensor(x)), torch.as_tensor(y)))
                       for x, y in batches)
        return {"loss": loss / len(batches)}

    return {"framework": "torch", "model": model, "batches": batches, "optimizer": opt,
            "train_step": train_step, "eval": evaluate,
            "description": f"{arch}, random init, {s}px, batch {n}"}
