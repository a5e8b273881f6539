"""``step`` holds the states it keeps for later on disk: the arrays it allocates while training
and judging stay a bounded number of copies of the weights, independent of the step count
(issue 33 item 6). Counted with tracemalloc (NumPy reports its allocations to it): the peak of
what was allocated after both sides were built, in copies of the weights of a model whose one
4 MB matrix dwarfs everything else."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from netparity.report.progress import Progress
from netparity.workflow.step import run_step_parity

SPEC = str(Path(__file__).parent / "specs" / "wide_torch.py")
WEIGHTS = (512 * 2048 + 2048 + 2048 * 4 + 4) * 4
#: measured: 23.2 copies at 3 and at 6 steps; the revision before kept every step's states in
#: memory: 27.1 at 3 steps, 33.2 at 6
MAX_COPIES = 26


class _Baseline(Progress):
    """Takes tracemalloc's count when training starts (both sides built and loaded)."""

    at: int | None = None

    def stage(self, name: str, total: int | None = None) -> None:
        if name.startswith("train and capture: reference"):
            self.at = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()


@pytest.mark.slow
def test_step_keeps_a_bounded_number_of_weight_copies(tmp_path: Path) -> None:
    base = _Baseline()
    tracemalloc.start()
    try:
        r = run_step_parity(SPEC, SPEC, tmp_path / "out", steps=6, progress=base)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.first_phase is None  # the same spec on both sides agrees
    assert base.at is not None
    copies = (peak - base.at) / WEIGHTS
    assert copies <= MAX_COPIES, f"step held {copies:.1f} copies of the weights at its peak"
    # the kept states are removed with the run
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".states-")]
