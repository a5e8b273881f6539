"""CPU time of the alignment's two passes (module pass, op pass) on two traces, and a digest of
the alignment they make.

``align_traces(level="op")`` runs once in this process with ``netparity.align.core``'s
``module_pass`` and ``op_pass`` timed (``time.process_time``, summed over the (step, direction)
buckets). The digest covers every match (reference and candidate call positions, method,
confidence, note), the unmatched calls and the module map: run the script in two checkouts on the
same traces and equal digests mean the same alignment.

Run:  PYTHONPATH=src python benchmarks/align_passes.py REF CAND [--rounds 3]
(e.g. on the 100k-op pair ``benchmarks/align_speed.py`` writes.)
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from collections.abc import Callable
from typing import Any

from netparity.align import core
from netparity.trace import open_trace


def _timed(fn: Callable[..., Any], into: dict[str, float], name: str) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        t = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            into[name] += time.process_time() - t
    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ref")
    ap.add_argument("cand")
    ap.add_argument("--rounds", type=int, default=1, help="align this many times")
    args = ap.parse_args()
    module_pass, op_pass = core.module_pass, core.op_pass
    for r in range(args.rounds):
        spent = {"module_pass": 0.0, "op_pass": 0.0}
        core.module_pass = _timed(module_pass, spent, "module_pass")
        core.op_pass = _timed(op_pass, spent, "op_pass")
        t = time.process_time()
        al = core.align_traces(open_trace(args.ref), open_trace(args.cand), level="op")
        total = time.process_time() - t
        h = hashlib.md5()
        for m in al.matches:
            h.update(repr(([c.seq for c in m.ref], [c.seq for c in m.cand], m.method,
                           m.confidence, m.note)).encode())
        h.update(repr(([c.seq for c in al.unmatched_ref], [c.seq for c in al.unmatched_cand],
                       sorted(al.module_map.items()))).encode())
        print(f"round {r + 1}: align_traces {total:.2f} s CPU  module_pass "
              f"{spent['module_pass']:.3f} s  op_pass {spent['op_pass']:.3f} s  "
              f"matches {len(al.matches)}  digest {h.hexdigest()}")
    core.module_pass, core.op_pass = module_pass, op_pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
