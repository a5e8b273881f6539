"""A spec for ``netparity step``: timm CNNs (nobody here wrote them) trained with SGD or AdamW,
as the reference; the same code with one option changed as the candidate.

Models (``arch=``): ``convnext_atto`` (depthwise convs, LayerNorm2d, GELU, layer scale),
``efficientnet_b0`` (SiLU, squeeze-excitation, BatchNorm), ``regnetx_002`` (grouped convs).

Faithful candidates: the same run in float64 or bfloat16 (``dtype=``), or on another thread
count (``threads=``). Candidates with one classic mistake (``bug=``):

* ``bn-eps``  every BatchNorm eps 1e-3 (TensorFlow/Keras's default, copied from a TF
              EfficientNet) instead of 1e-5: forward, the stem's BatchNorm ``bn1``;
* ``ln-eps``  every LayerNorm eps 1e-5 (the ``nn.LayerNorm`` default) where ConvNeXt uses
              1e-6: forward, the stem's norm ``stem.1``.

Options: arch, dtype, threads, bug, opt (``sgd`` or ``adamw``), steps (3), batch_size (4),
image_size (64).
"""

from __future__ import annotations

from typing import Any

BUGS = ("bn-eps", "ln-eps")

#: where a correct diagnosis names each bug, for the model it is meant for
FOUND_AT = {
    "bn-eps": ("forward", "bn1", 0),     # efficientnet_b0
    "ln-eps": ("forward", "stem.1", 0),  # convnext_atto
}


def build(**options: Any) -> dict[str, Any]:
    """Build the timm model, its data, the optimizer and one-step callable."""
    import numpy as np
    import torch
    from tests.corpus.vit_spec import make_batches, timm_module

    dtype = {"float32": torch.float32, "float64": torch.float64,
             "bfloat16": torch.bfloat16}[options.get("dtype", "float32")]
    bug = options.get("bug")
    if bug not in (None, *BUGS):
        raise ValueError(f"unknown bug {bug!r}; choose from {', '.join(BUGS)}")
    if options.get("threads"):
        torch.set_num_threads(int(options["threads"]))
    arch = options.get("arch", "convnext_atto")
    steps, batch = int(options.get("steps", 3)), int(options.get("batch_size", 4))
    size, classes = int(options.get("image_size", 64)), 10

    timm = timm_module()
    torch.manual_seed(0)
    model = timm.create_model(arch, pretrained=False, num_classes=classes)
    for m in model.modules():
        if bug == "bn-eps" and isinstance(m, torch.nn.BatchNorm2d):
            m.eps = 1e-3
        if bug == "ln-eps" and isinstance(m, torch.nn.LayerNorm):
            m.eps = 1e-5
    model = model.to(dtype)
    batches = make_batches(0, steps, batch, size, classes)
    if options.get("opt", "sgd") == "adamw":
        optimizer: torch.optim.Optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3,
                                                             weight_decay=0.05)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9,
                                    weight_decay=1e-4)

    def loss_fn(output: torch.Tensor, labels: Any) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(output, torch.as_tensor(labels).long())

    class Step:
        def __init__(self) -> None:
            self.last_grads: dict[str, np.ndarray] = {}

        def __call__(self, images: Any, labels: Any) -> float:
            model.train()
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(torch.as_tensor(images).to(dtype)), labels)
            loss.backward()
            self.last_grads = {n: p.grad.detach().double().numpy()
                               for n, p in model.named_parameters() if p.grad is not None}
            optimizer.step()
            return float(loss.detach())

    return {
        "framework": "torch",
        "model": model,
        "batches": batches,
        "loss_fn": loss_fn,
        "optimizer": optimizer,
        "lr_schedule": [optimizer.param_groups[0]["lr"]] * steps,
        "train_step": Step(),
        "description": f"timm {arch}, {type(optimizer).__name__}, {dtype}, bug {bug}",
    }
