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
    import torch
    from tests.corpus.vit_spec import (
        classifier_spec,
        common_options,
        make_batches,
        timm_module,
    )

    dtype, bug = common_options(options, BUGS)
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

    return classifier_spec(model, batches, optimizer, dtype,
                           [optimizer.param_groups[0]["lr"]] * steps,
                           f"timm {arch}, {type(optimizer).__name__}, {dtype}, bug {bug}")
