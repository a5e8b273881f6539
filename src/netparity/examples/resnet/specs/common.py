"""Options and data shared by the two ResNet demo specs (framework-free).

Example:
    >>> opts = resolve_options(depth=18, steps=2)
    >>> opts["batch_size"], opts["image_size"]
    (2, 56)
"""

from __future__ import annotations

import atexit
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

from netparity.errors import UsageError
from netparity.examples.resnet.bugs import check_bug

DEFAULTS: dict[str, Any] = {
    "depth": 18,  # 18 or 50 (34/101/152 work too)
    "num_classes": 4,  # also the number of generated class folders
    "image_size": 56,  # crop; the generated images are resize_for(image_size) pixels square
    "batch_size": 2,
    "steps": 3,  # batches prepared and LR schedule length
    "warmup_steps": 1,
    "lr_max": 0.01,  # small on purpose: at batch 2 a large LR amplifies float noise chaotically
    "seed": 0,  # initial weights and generated images
    "bug": None,  # one of netparity.examples.resnet.bugs.BUGS (MindSpore side only)
    "data_root": None,  # an existing ImageFolder tree; generated in a temp dir when None
}


def resolve_options(**options: Any) -> dict[str, Any]:
    """Defaults + ``options``, validated (unknown option or bug -> ``UsageError``)."""
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise UsageError(f"unknown spec option(s) {unknown}; known: {sorted(DEFAULTS)}")
    opts = {**DEFAULTS, **options}
    check_bug(opts["bug"])
    for key in ("depth", "num_classes", "image_size", "batch_size", "steps"):
        opts[key] = int(opts[key])
        if opts[key] < 1:
            raise UsageError(f"spec option {key} must be >= 1")
    if opts["num_classes"] < 2:
        raise UsageError("num_classes must be >= 2 (label smoothing divides by num_classes - 1)")
    return opts


def data_root(opts: dict[str, Any]) -> Path:
    """The dataset folder: ``data_root`` or a freshly generated one with enough images."""
    from netparity.examples.resnet.data import make_imagefolder, resize_for

    if opts["data_root"] is not None:
        return Path(opts["data_root"])
    need = opts["steps"] * opts["batch_size"]
    per_class = max(2, math.ceil(need / opts["num_classes"]))
    key = (opts["num_classes"], per_class, resize_for(opts["image_size"]), opts["seed"])
    if key not in _GENERATED:  # one folder per kind of data and process, removed at exit
        root = Path(tempfile.mkdtemp(prefix="netparity-resnet-data-"))
        atexit.register(shutil.rmtree, root, True)
        _GENERATED[key] = make_imagefolder(root, classes=key[0], per_class=key[1],
                                           size=key[2], seed=key[3])
    return _GENERATED[key]


#: generated dataset folders of this process, by (classes, images per class, size, seed)
_GENERATED: dict[tuple[Any, ...], Path] = {}
