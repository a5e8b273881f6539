"""CPU time of ``align_traces``' parts on one trace pair, as the comparison runs it.

Opens both traces, runs ``check_rows`` (as the CLI does), then ``align_traces`` once with its
parts wrapped in ``time.process_time`` counters: the op pass (``passes.op_pass``), the module
pass, reading both call tables (``tableread.read_table``), making the result's ``Match`` /
``Call`` objects (``core._Results.finish``), the parameter order (``core._with_ownership``)
and the param records. "rest" is ``align_traces`` minus the op pass; "other" what no counter
covers (the bucket loop, feature subsets, module votes).

Run:  PYTHONPATH=src python benchmarks/align_parts.py REF CAND [--level op]
(e.g. on the 100k-op pair of ``benchmarks/align_speed.py --sizes 100000 --cli``).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from typing import Any

import netparity.align.core as core
from netparity.trace import open_trace

PARTS = ("op_pass", "module_pass", "read_table", "_with_ownership", "_param_records")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ref")
    ap.add_argument("cand")
    ap.add_argument("--level", default="op", choices=("module", "op", "both"))
    args = ap.parse_args()
    clock = time.process_time
    spent: dict[str, float] = {}

    def counted(owner: Any, name: str, label: str) -> None:
        fn = getattr(owner, name)

        @functools.wraps(fn)
        def run(*a: Any, **k: Any) -> Any:
            t = clock()
            try:
                return fn(*a, **k)
            finally:
                spent[label] = spent.get(label, 0.0) + clock() - t

        setattr(owner, name, run)

    for name in PARTS:
        counted(core, name, name)
    counted(core._Results, "finish", "_Results.finish")
    tr, tc = open_trace(args.ref), open_trace(args.cand)
    tr.check_rows()
    tc.check_rows()
    t0 = clock()
    core.align_traces(tr, tc, level=args.level)
    total = clock() - t0
    rest = total - spent.get("op_pass", 0.0)
    print(f"{'align_traces':>22} {total:8.2f} s CPU")
    print(f"{'rest (minus op_pass)':>22} {rest:8.2f} s CPU")
    for name, s in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"{name:>22} {s:8.2f} s CPU")
    print(f"{'other':>22} {total - sum(spent.values()):8.2f} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
