"""MindSpore's own checkpoint writer (``mindspore.save_checkpoint``).

Reading ``.ckpt`` files needs no MindSpore (``netparity.ckpt.msproto`` decodes the protobuf);
writing through MindSpore produces exactly what MindSpore itself would write.
"""

from __future__ import annotations

from pathlib import Path

import mindspore as ms
import numpy as np

from netparity.dtypes import decode


def write(p: Path, items: list[tuple[str, str, np.ndarray]]) -> None:
    """``mindspore.save_checkpoint`` of ``(name, canonical dtype, storage array)`` items."""
    entries = []
    for name, dtype, arr in items:
        if dtype == "bfloat16":  # bf16 -> f32 is exact, so the cast back restores the same bits
            t = ms.Tensor(decode(arr, dtype), ms.bfloat16)
        else:
            t = ms.Tensor(np.asarray(arr, order="C"))
        entries.append({"name": name, "data": t})
    if p.exists():
        p.unlink()  # MindSpore leaves files read-only; replace, don't fail
    ms.save_checkpoint(entries, str(p))
