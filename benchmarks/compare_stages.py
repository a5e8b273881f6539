"""CPU time per stage of a statistics comparison, as the ``netparity compare`` CLI runs it.

Stages (``time.process_time``, one process, no profiler): ``check_rows`` of both traces,
``align_traces`` at op level, making the matched calls' records, then the whole
``netparity.compare.engine.compare`` (which aligns and reads the records again, then pairs the
tensors of each matched call and judges them), localisation, and the ``-q`` summary lines.
Pairing + judging is the engine's time minus the alignment and records measured before it.

Run:  PYTHONPATH=src python benchmarks/compare_stages.py REF CAND
(e.g. on the 100k-op pair that ``benchmarks/align_speed.py`` writes; keep those traces by
writing them with its ``Gen`` class and ``netparity.trace.columnar.compact``.)
"""

from __future__ import annotations

import argparse
import sys
import time

from netparity.align import align_traces
from netparity.analyzers.divergence import localise
from netparity.compare import engine
from netparity.report.sections.compare import summary_lines
from netparity.trace import open_trace


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ref")
    ap.add_argument("cand")
    ap.add_argument("--level", default="op", choices=("module", "op"))
    args = ap.parse_args()
    clock = time.process_time
    t0 = clock()
    tr, tc = open_trace(args.ref), open_trace(args.cand)
    tr.check_rows()
    tc.check_rows()
    t1 = clock()
    al = align_traces(tr, tc, level=args.level)
    t2 = clock()
    for m in al.matches:  # the calls' records, read on first access
        _ = m.ref[0].inputs, m.cand[0].inputs
    t3 = clock()
    del al
    t4 = clock()
    result = engine.compare(tr, tc, level=args.level)
    t5 = clock()
    localise(result)
    t6 = clock()
    summary_lines(result)
    t7 = clock()
    rows = [("check_rows", t1 - t0), ("align_traces", t2 - t1), ("records", t3 - t2),
            ("engine.compare", t5 - t4),
            ("= pairing + judging", (t5 - t4) - (t2 - t1) - (t3 - t2)),
            ("localise", t6 - t5), ("summary", t7 - t6)]
    for name, s in rows:
        print(f"{name:>22} {s:8.2f} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
