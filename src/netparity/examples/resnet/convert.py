"""The demo's first journey step: the reference's initial weights saved as a PyTorch ``.pth``,
mapped and converted to a MindSpore ``.ckpt`` with ``netparity.ckpt`` (no hand-written rules),
and loaded by the MindSpore network. Example code written in both frameworks, like a user's."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def convert_weights(out: Path, options: dict[str, Any], say: Any = print) -> dict[str, Any]:
    """Save the reference's initial weights as .pth, map and convert them to a MindSpore .ckpt
    with ``netparity.ckpt`` (no hand-written rules), and check the MindSpore network loads it."""
    import torch

    from netparity.ckpt import convert, load_checkpoint, map_names
    from netparity.examples.resnet import ms_resnet, torch_resnet, weights
    from netparity.outputs import atomic_output

    depth, classes = options["depth"], options.get("num_classes", 4)
    tm = torch_resnet.FACTORIES[depth](num_classes=classes)
    torch_resnet.load_numpy_state(tm, weights.make_weights(depth, classes, seed=0))
    pth = out / f"resnet{depth}-torch.pth"
    with atomic_output(pth, what="checkpoint") as tmp:
        torch.save(tm.state_dict(), tmp)
    mm = ms_resnet.FACTORIES[depth](num_classes=classes)
    nm = map_names(tm, mm)
    ckpt = out / f"resnet{depth}-mindspore.ckpt"
    report = convert(pth, ckpt, template=mm)
    import mindspore as ms

    missing = ms.load_param_into_net(mm, ms.load_checkpoint(str(ckpt)))
    not_loaded = [m for m in (missing[0] if isinstance(missing, tuple) else missing or [])]
    renamed = [(p.ref, p.cand) for p in nm.pairs if p.how == "structure"]
    info = {"pth": str(pth), "ckpt": str(ckpt), "pairs": len(nm.pairs), "by": nm.counts(),
            "renamed_examples": renamed[:4], "not_loaded": not_loaded,
            "dropped": len(nm.dropped_ref), "ok": bool(report) and not not_loaded,
            "tensors": len(load_checkpoint(ckpt))}
    say(f"  {len(nm.pairs)} parameters mapped ("
        + ", ".join(f"{k} {v}" for k, v in nm.counts().items()) + f"); {info['dropped']} "
        "num_batches_tracked dropped")
    for a, b in renamed[:3]:
        say(f"    {a}  ->  {b}")
    say(f"  wrote {ckpt.name}: MindSpore loads it with "
        + ("nothing missing" if not not_loaded else f"{len(not_loaded)} missing"))
    return info
