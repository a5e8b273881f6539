"""Memory of a statistics comparison by stage, as the ``netparity compare -q`` CLI runs it.

Prints the process's resident memory (``VmRSS``) and its peak so far (``VmHWM``) after each
stage: opening the traces, ``check_rows``, ``engine.compare`` (alignment, pairing, judging),
localisation and the ``-q`` summary. ``--trace N`` also runs ``tracemalloc`` (slow: ~3x) and
prints the N source lines holding most memory once the comparison has returned (what the
result keeps) and the traced peak.

``--align STEP`` (a step number, or ``all``) measures instead what the alignment of that step
(``align_traces(level=op, step=STEP)`` and its two column scans, what the engine's row mode
pairs from) adds after ``check_rows``: the share of a multi-step comparison's peak that aligning
one step at a time would leave out.

``--stages`` also prints RSS after each stage inside ``engine.compare`` (alignment, the row
sides, the call results, the tolerances, the statistics batch ...), with the heap set as the CLI
sets it (:mod:`netparity.heap`).

Run:  PYTHONPATH=src python benchmarks/compare_memory.py REF CAND [--trace 15 | --align all |
      --stages]
(e.g. on a pair ``benchmarks/compare_scale.py --make N DIR [--steps S] --make-only`` writes.)
"""

from __future__ import annotations

import argparse
import sys
import tracemalloc

from netparity.analyzers.divergence import localise
from netparity.compare import engine
from netparity.report.sections.compare import summary_lines
from netparity.trace import open_trace


def vm() -> str:
    got = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                k, v = line.split(":")
                got[k] = int(v.split()[0]) / 1024
    return f"rss {got['VmRSS']:8.0f} MB  peak {got['VmHWM']:8.0f} MB"


def _watch_stages() -> None:
    """Print RSS / peak after each inner stage of the engine (its functions wrapped)."""
    import netparity.align as align_pkg
    from netparity.compare import rowpairs

    def wrap(mod: object, name: str) -> None:
        f = getattr(mod, name)

        def g(*args: object, **kw: object) -> object:
            out = f(*args, **kw)
            print(f"{'  ' + name:>24} {vm()}", flush=True)
            return out
        setattr(mod, name, g)

    wrap(align_pkg, "align_traces")
    for name in ("sides_of", "fast_calls", "GroupRows"):
        wrap(rowpairs, name)
    for name in ("_fast_results", "_scale_tolerances", "_batch_stats_pairs",
                 "_treat_rounding_noise", "settle_moved_ops"):
        wrap(engine, name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ref")
    ap.add_argument("cand")
    ap.add_argument("--level", default="op", choices=("module", "op"))
    ap.add_argument("--trace", type=int, default=0, metavar="N")
    ap.add_argument("--align", metavar="STEP", help="measure align_traces of STEP (or all)")
    ap.add_argument("--stages", action="store_true",
                    help="also RSS after each stage inside engine.compare (as the CLI runs it)")
    a = ap.parse_args()
    if a.stages:
        from netparity.heap import return_large_blocks

        return_large_blocks()  # as the CLI's compare does
        _watch_stages()
    if a.trace:
        tracemalloc.start(1)
    print(f"{'start':>16} {vm()}", flush=True)
    tr, tc = open_trace(a.ref), open_trace(a.cand)
    tr.check_rows()
    tc.check_rows()
    print(f"{'check_rows':>16} {vm()}", flush=True)
    if a.align is not None:
        from netparity.align import align_traces
        from netparity.compare import rowpairs

        step = None if a.align == "all" else int(a.align)
        al = align_traces(tr, tc, level=a.level, step=step)
        sides = rowpairs.sides_of(al)
        rows = len(sides[0].rows) if sides is not None else 0
        print(f"{'align ' + a.align:>16} {vm()}  matches {len(al.matches)}  ref scan rows {rows}",
              flush=True)
        return 0
    result = engine.compare(tr, tc, level=a.level)
    print(f"{'engine.compare':>16} {vm()}  pairs {len(result.table) if result.table else 0}",
          flush=True)
    if a.trace:
        snap = tracemalloc.take_snapshot()
        cur, peak = tracemalloc.get_traced_memory()
        print(f"traced now {cur / 2**20:.0f} MB, traced peak {peak / 2**20:.0f} MB")
        for st in snap.statistics("lineno")[:a.trace]:
            print(f"  {st.size / 2**20:8.1f} MB {st.count:9d} blocks  {st.traceback[0]}")
    localise(result)
    print(f"{'localise':>16} {vm()}", flush=True)
    summary_lines(result)
    print(f"{'summary':>16} {vm()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
