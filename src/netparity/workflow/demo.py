"""``netparity demo``: the reference ResNet-50 PyTorch -> MindSpore migration, end to end.

The journey of the migration guide on a generated dataset: build both networks, convert the
reference weights into a MindSpore checkpoint (names mapped automatically, renamed layers
included), then the one-step parity workflow (data, forward, loss, backward, update, later steps,
evaluation) and a self-contained HTML report. ``bug=`` injects a classic migration mistake into
the MindSpore side; the report must name it.

Example:
    >>> from netparity.workflow.demo import run_demo          # doctest: +SKIP
    >>> r = run_demo("netparity-demo", bug="bn-eps")           # doctest: +SKIP
    >>> r.first_phase, r.where                                 # doctest: +SKIP
    ('forward', 'bn1')
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from netparity.report.progress import Progress
from netparity.workflow.step import StepResult, run_step_parity

REF_SPEC = "netparity.examples.resnet.specs.torch_spec"
CAND_SPEC = "netparity.examples.resnet.specs.ms_spec"
#: small inputs that keep the demo within a few minutes on a 2-core CPU
DEMO_OPTIONS: dict[str, Any] = {"depth": 50, "batch_size": 4, "image_size": 64,
                                "lr_max": 1e-3}


def convert_weights(out: Path, options: dict[str, Any], say: Any = print) -> dict[str, Any]:
    """Save the reference's initial weights as .pth, map and convert them to a MindSpore .ckpt
    with ``netparity.ckpt`` (no hand-written rules), and check the MindSpore network loads it."""
    import torch

    from netparity.ckpt import convert, load_checkpoint, map_names
    from netparity.examples.resnet import ms_resnet, torch_resnet, weights

    depth, classes = options["depth"], options.get("num_classes", 4)
    tm = torch_resnet.FACTORIES[depth](num_classes=classes)
    torch_resnet.load_numpy_state(tm, weights.make_weights(depth, classes, seed=0))
    pth = out / f"resnet{depth}-torch.pth"
    torch.save(tm.state_dict(), pth)
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


def run_demo(out_dir: str | Path = "netparity-demo", *, bug: str | None = None,
             steps: int = 3, options: dict[str, Any] | None = None,
             say: Any = print, progress: Progress | None = None) -> StepResult:
    """Run the demo; returns the one-step parity result (reports written to ``out_dir``).

    ``say`` prints the narration; ``progress`` shows the workflow's stages while they run.
    """
    from netparity.examples.resnet.bugs import BUGS, check_bug
    from netparity.report.step import write_reports

    check_bug(bug)
    opts = {**DEMO_OPTIONS, **(options or {}), "steps": steps}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    say(f"netparity demo: ResNet-{opts['depth']} PyTorch -> MindSpore "
        f"({opts['image_size']}px, batch {opts['batch_size']}, {steps} steps)"
        + (f", injected bug: {bug} -- {BUGS[bug]}" if bug else ""))
    say("1. weights: PyTorch state dict -> MindSpore checkpoint")
    if progress is not None:
        progress.stage("convert the weights")
    convert_weights(out, opts, say)
    say("2. one-step parity: setup, data, forward, loss, backward, update, later steps, eval")
    r = run_step_parity(REF_SPEC, CAND_SPEC, out, steps=steps, options=opts,
                        cand_options={"bug": bug}, progress=progress)
    paths = write_reports(r)
    r.notes.append(f"HTML report: {paths['html']}")
    return r
