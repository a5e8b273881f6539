"""``seed_everything``: one call that makes a run repeatable in every framework present.

Frameworks are seeded when they are already imported, or when named in ``frameworks`` (then
they are imported); netparity never imports a framework just to find out whether it is there.
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
import sys
from collections.abc import Iterable
from typing import Any

import numpy as np

_LAST: dict[str, Any] = {}


def seed_everything(
    seed: int,
    *,
    deterministic: bool = True,
    frameworks: Iterable[str] | None = None,
) -> dict[str, Any]:
    """Seed Python, NumPy, PyTorch (CPU and CUDA), MindSpore and JAX.

    Args:
        seed: the seed.
        deterministic: also ask for deterministic algorithms (PyTorch
            ``use_deterministic_algorithms(warn_only=True)``, cuDNN deterministic and no benchmark,
            ``CUBLAS_WORKSPACE_CONFIG``; MindSpore ``deterministic="ON"``).
        frameworks: names to import and seed even if not imported yet (``torch``, ``mindspore``,
            ``jax``); by default only those already imported are seeded.

    Returns:
        What was set, e.g. ``{"seed": 0, "python": True, "numpy": True, "torch": {...}}``. For JAX,
        which has no global generator, ``"jax"`` holds the ``PRNGKey`` to use.
    """
    want = set(frameworks or ())
    done: dict[str, Any] = {"seed": int(seed), "deterministic": deterministic}
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)  # affects child processes (data-loader workers)
    done["python"] = True
    np.random.seed(seed % (2**32))
    done["numpy"] = True

    if "torch" in sys.modules or "torch" in want:
        import torch

        torch.manual_seed(seed)
        info: dict[str, Any] = {"manual_seed": seed}
        if torch.cuda.is_available():
            torch.cuda.manual_seed_all(seed)
            info["cuda"] = True
        if deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True, warn_only=True)
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False
            info["deterministic_algorithms"] = True
        done["torch"] = info

    if "mindspore" in sys.modules or "mindspore" in want:
        import mindspore as ms

        ms.set_seed(seed)
        info = {"set_seed": seed}
        try:
            import mindspore.dataset as ds

            ds.config.set_seed(seed)
            info["dataset"] = True
        except Exception:  # dataset engine unavailable in some builds
            pass
        if deterministic:
            try:
                if hasattr(ms, "set_deterministic"):  # 2.5+; set_context(deterministic) is deprecated
                    ms.set_deterministic(True)
                else:
                    ms.set_context(deterministic="ON")
                info["deterministic"] = "ON"
            except Exception:  # older versions / unsupported on this target
                pass
        done["mindspore"] = info

    if "jax" in sys.modules or "jax" in want:
        import jax

        done["jax"] = jax.random.PRNGKey(seed)

    _LAST.clear()
    _LAST.update({k: (v if k != "jax" else f"PRNGKey({seed})") for k, v in done.items()})
    return done


def last_seeds() -> dict[str, Any]:
    """What the last :func:`seed_everything` call set (JSON-safe), for manifests."""
    return dict(_LAST)
