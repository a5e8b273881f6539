"""``seed_everything``: one call that makes a run repeatable in every framework present.

Frameworks are seeded when they are already imported, or when named in ``frameworks`` (then
they are imported); netparity never imports a framework just to find out whether it is there.
Each framework's seeding lives in its adapter (``FrameworkAdapter.seed``), found through
:mod:`netparity.frameworks.registry`.
Captures started afterwards record what was set in their manifest (``seeds``).

Example:
    >>> import random
    >>> done = seed_everything(7)
    >>> done["seed"], done["python"], done["numpy"]
    (7, True, True)
    >>> a = random.random(); _ = seed_everything(7); a == random.random()
    True
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable
from typing import Any

import numpy as np

from netparity.capture.seeds import last_seeds, record_seeds

__all__ = ["last_seeds", "seed_everything"]


def seed_everything(
    seed: int,
    *,
    deterministic: bool = True,
    frameworks: Iterable[str] | None = None,
) -> dict[str, Any]:
    """Seed Python, NumPy and the frameworks (PyTorch CPU and CUDA, MindSpore).

    Args:
        seed: the seed.
        deterministic: also ask for deterministic algorithms (PyTorch
            ``use_deterministic_algorithms(warn_only=True)``, cuDNN deterministic and no benchmark,
            ``CUBLAS_WORKSPACE_CONFIG``; MindSpore ``deterministic="ON"``).
        frameworks: names to import and seed even if not imported yet (``torch``,
            ``mindspore``); by default only those already imported are seeded.

    Returns:
        What was set, e.g. ``{"seed": 0, "python": True, "numpy": True, "torch": {...}}`` (each
        framework's entry is what its adapter's ``seed`` set).

    Raises:
        FrameworkError: a framework named in ``frameworks`` is unknown or not installed.
    """
    from netparity.frameworks.registry import seed_frameworks

    done: dict[str, Any] = {"seed": int(seed), "deterministic": deterministic}
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)  # affects child processes (data-loader workers)
    done["python"] = True
    np.random.seed(seed % (2**32))
    done["numpy"] = True
    # every imported framework (and those named) seeds itself through its adapter
    done.update(seed_frameworks(seed, deterministic=deterministic,
                                frameworks=tuple(frameworks or ())))
    record_seeds(done)
    return done
