"""Runtime coverage for ``netparity scan --run``: the aten ops one captured run really executes.

Static analysis cannot see ops behind library calls (a torchvision model, a loss from another
package). This runs the user's command under ``netparity run --level op`` in a subprocess (the
launcher is reused, not re-implemented), capturing step 0 only, then reads the trace with the
public API (``open_trace(path).records(kind="op")``; ``Record.native`` is ``aten.x.overload``)
and maps every executed op through the table's smaller aten -> MindSpore primitive section.

The command still runs to its end: the launcher limits what is captured, not how long the
script runs, so give it arguments for a short run (one epoch, a few batches).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from netparity.errors import NetparityError, UsageError
from netparity.scan.analyze import RuntimeOp, load_table, map_aten

NOTE = ("captured step 0 at op level with `netparity run --level op --steps 0`; the command "
        "itself ran to its end")


def executed_ops(trace_dir: str | Path) -> Counter[str]:
    """Native op names (``aten.x.overload``) in a trace, with how often each ran."""
    from netparity.trace import open_trace

    counts: Counter[str] = Counter()
    with open_trace(trace_dir) as tr:
        for rec in tr.records(kind="op"):
            if rec.native:
                counts[rec.native] += 1
    return counts


def run_coverage(cmd: Sequence[str], verify: bool = True) -> tuple[list[RuntimeOp], str]:
    """Run ``cmd`` captured (step 0, op level); the executed aten ops and a note on how."""
    cmd = list(cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("--run needs a command (use: netparity scan --run -- python train.py)")
    with tempfile.TemporaryDirectory(prefix="netparity-scan-") as tmp:
        out = Path(tmp) / "trace"
        argv = [sys.executable, "-m", "netparity", "run", "-o", str(out), "--level", "op",
                "--steps", "0", "--", *cmd]
        proc = subprocess.run(argv, check=False)
        if proc.returncode != 0:
            raise UsageError(f"the command under --run exited with status {proc.returncode}: "
                             f"{' '.join(cmd)}")
        try:
            counts = executed_ops(out)
        except NetparityError as e:
            raise UsageError(f"--run: no readable trace from {' '.join(cmd)} ({e})") from None
    table: dict[str, Any] = load_table()
    lacking: dict[str, list[str]] = {}
    if verify:
        from netparity.frameworks.mindspore.api import check_primitives

        names = {".".join(n.split(".")[:2]) for n in counts}
        lacking = check_primitives({k: v for k, v in table["aten"].items() if k in names}).problems
    return map_aten(counts, table, lacking), NOTE
