"""CPU time per stage of a statistics comparison, as the ``netparity compare`` CLI runs it.

Stages (``time.process_time``, one process, no profiler): ``check_rows`` of both traces,
``align_traces`` at op level, then the whole ``netparity.compare.engine.compare`` (which
aligns again, then pairs the tensors of each matched call -- as rows of the traces' scans in
the common case, records only for N:M groups and odd calls -- and judges them), localisation,
and the ``-q`` summary lines. Pairing + judging is the engine's time minus the alignment
measured before it. ``--records`` also times making every matched call's records (what the
engine did before it paired rows; not part of the engine's time any more).

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
    ap.add_argument("--records", action="store_true",
                    help="also time making every matched call's records")
    args = ap.parse_args()
    clock = time.process_time
    t0 = clock()
    tr, tc = open_trace(args.ref), open_trace(args.cand)
    tr.check_rows()
    tc.check_rows()
    t1 = clock()
    al = align_traces(tr, tc, level=args.level)
    t2 = clock()
    if args.records:
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
    rows = [("check_rows", t1 - t0), ("align_traces", t2 - t1),
            *([("records", t3 - t2)] if args.records else []),
            ("engine.compare", t5 - t4),
            ("= pairing + judging", (t5 - t4) - (t2 - t1)),
            ("localise", t6 - t5), ("summary", t7 - t6)]
    for name, s in rows:
        print(f"{name:>22} {s:8.2f} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
