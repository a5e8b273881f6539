"""A run killed with SIGKILL at any moment leaves a trace readable up to the last commit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from netparity.trace import open_trace

WRITER = r"""
import sys, numpy as np
from netparity.trace import Record, TraceWriter
from netparity.stats import compute_stats
w = TraceWriter(sys.argv[1], batch_records=int(sys.argv[2]), commit_seconds=0.01,
                shard_bytes=1 << 16)
i = 0
while True:
    a = np.full((64 + i % 50,), float(i), dtype=np.float32)
    w.add(Record(kind="custom", op="x", call=i, dtype="float32", shape=a.shape,
                 stats=compute_stats(a)), payload=a)
    i += 1
    if i % 200 == 0:
        w.flush()
        print(i, flush=True)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")
@pytest.mark.parametrize("batch, delay", [(1, 0.3), (7, 0.55), (64, 0.8)])
def test_sigkill_leaves_readable_trace(tmp_path: Path, batch: int, delay: float) -> None:
    src = Path(__file__).resolve().parents[2] / "src"
    env = dict(os.environ, PYTHONPATH=str(src))
    out = tmp_path / "t"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(out), str(batch)], env=env,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    first = proc.stdout.readline()  # at least one flush happened
    assert first.strip(), "writer produced no output"
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    lines = [first] + proc.stdout.read().split()
    proc.wait()
    flushed = int(lines[-1])
    tr = open_trace(out)
    recs = tr.records()
    assert len(recs) >= flushed  # everything flushed before the kill is there
    for r in recs:  # and every committed row points at intact bytes
        a = tr.tensor(r)
        assert a.shape == (64 + r.call % 50,)
        assert np.all(a == float(r.call))
    assert [r.call for r in recs] == list(range(len(recs)))  # no gaps, no half rows
