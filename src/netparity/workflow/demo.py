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

from netparity.examples.resnet.convert import convert_weights
from netparity.report.progress import Progress
from netparity.workflow.step import StepResult, run_step_parity

REF_SPEC = "netparity.examples.resnet.specs.torch_spec"
CAND_SPEC = "netparity.examples.resnet.specs.ms_spec"
#: small inputs that keep the demo within a few minutes on a 2-core CPU
DEMO_OPTIONS: dict[str, Any] = {"depth": 50, "batch_size": 4, "image_size": 64,
                                "lr_max": 1e-3}


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
