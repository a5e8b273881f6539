"""CPU time of the comparison engine's pairing and judging, measured inside one run.

``benchmarks/compare_stages.py`` reports pairing + judging as the engine's time minus an
alignment timed separately before it, a difference of two noisy figures on a loaded machine.
This runs ``netparity.compare.engine.compare`` once per round and times the
``align_traces`` call it makes itself (``time.process_time`` around it), so that the rest --
reading the scans for row mode, pairing the tensors of every matched call, making the
``CallResult``\\ s and keys, judging the statistics pairs as arrays -- comes out of the same
run. Each round runs in a fresh process (nothing cached between rounds).

Run:  PYTHONPATH=src python benchmarks/engine_pairing.py REF CAND [--rounds 3] [--level op]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def _one(ref: str, cand: str, level: str) -> dict[str, float]:
    import netparity.align as align
    from netparity.compare import engine
    from netparity.trace import open_trace

    clock = time.process_time
    inner = align.align_traces
    spent = [0.0]

    def timed(*a: object, **k: object) -> object:
        t = clock()
        try:
            return inner(*a, **k)  # type: ignore[arg-type]
        finally:
            spent[0] += clock() - t

    align.align_traces = timed  # type: ignore[assignment]  # the engine imports it per call
    tr, tc = open_trace(ref), open_trace(cand)
    tr.check_rows()
    tc.check_rows()
    t = clock()
    engine.compare(tr, tc, level=level)
    total = clock() - t
    return {"engine": total, "align": spent[0], "pairing_judging": total - spent[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ref")
    ap.add_argument("cand")
    ap.add_argument("--level", default="op", choices=("module", "op"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(_one(args.ref, args.cand, args.level)))
        return 0
    for _ in range(args.rounds):
        out = subprocess.run([sys.executable, __file__, args.ref, args.cand, "--level",
                              args.level, "--one"], check=True, capture_output=True, text=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        load = f"{os.getloadavg()[0]:.2f}"
        print(f"engine {r['engine']:6.2f} s CPU = align_traces {r['align']:6.2f} + pairing "
              f"and judging {r['pairing_judging']:6.2f}  (load {load})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
