"""CPU time of making and reading the alignment's call objects on one trace pair.

Aligns REF and CAND once at op level (as the comparison does), then times, each as the minimum
of a few repeats (``time.process_time``, collector paused): making the ``LazyCall`` of every
row of the reference's call table (``CallTable.make_calls``), the engine's ``rowpairs.sides_of``
(the sides' rows already read), ``rowpairs.fast_calls`` and ``engine._fast_results`` on the
alignment's matches.

Run:  PYTHONPATH=src python benchmarks/call_objects.py REF CAND
(e.g. on the 100k-op pair of ``benchmarks/align_speed.py --sizes 100000 --cli``).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from netparity.align import core
from netparity.align.table import Pools
from netparity.align.tableread import read_table
from netparity.compare import engine, rowpairs
from netparity.trace import open_trace


def best(fn: Callable[[], Any], repeat: int) -> float:
    """The smallest CPU time of ``repeat`` calls of ``fn``."""
    times = []
    for _ in range(repeat):
        t = time.process_time()
        out = fn()
        times.append(time.process_time() - t)
        del out
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ref")
    ap.add_argument("cand")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    gc.disable()
    ref, cand = open_trace(args.ref), open_trace(args.cand)
    al = core.align_traces(ref, cand, level="op")
    ms = al.matches
    table = read_table(ref, Pools())
    rows = np.arange(len(table))
    res = {f"make_calls ({len(table)} rows)": best(lambda: table.make_calls(rows), args.repeat)}
    sides = rowpairs.sides_of(al)
    if sides is None:
        print("not in row mode (calls of more than one scan per side)", file=sys.stderr)
        return 1
    few = max(1, args.repeat // 2)
    res["sides_of (rows read)"] = best(lambda: rowpairs.sides_of(al), few)
    aux = engine.AUX_OUTPUT_OPS
    res["fast_calls"] = best(lambda: rowpairs.fast_calls(sides, ms, False, aux), args.repeat)
    fast = rowpairs.fast_calls(sides, ms, False, aux)
    res["_fast_results"] = best(
        lambda: engine._fast_results(fast, "op", ms, 0, engine._RowAcc(), []), few)
    for name, t in res.items():
        print(f"{name:>28} {t:7.3f} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
