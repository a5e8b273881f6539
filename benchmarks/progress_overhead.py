"""Does the compare progress bar cost anything? Times ``netparity compare`` of two synthetic
statistics traces (PyTorch-vs-MindSpore op traces of ``benchmarks/align_speed.py``) with a rich
progress display drawing to a (fake) terminal and without one, alternately, and prints the ratio.

Statistics pairs are the worst case for a per-pair hook: each takes microseconds to judge.

    PYTHONPATH=src python benchmarks/progress_overhead.py --ops 10000 --repeat 3
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))

from align_speed import Gen  # noqa: E402

from netparity.analyzers.divergence import compare  # noqa: E402
from netparity.report.progress import RichProgress  # noqa: E402


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", type=int, default=10000, help="ops per trace (default 10000)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        ref, cand = Path(d) / "ref", Path(d) / "cand"
        Gen(ref, "torch", args.ops, False).run()
        Gen(cand, "mindspore", args.ops, False).run()
        compare(ref, cand, level="op")  # warm the page cache and imports
        plain, shown = [], []
        results = {}
        for i in range(2 * args.repeat):
            with_bar = (i % 4) in (1, 2)  # ABBA order: neither variant always runs second
            bar = RichProgress(Console(file=_Tty(), force_terminal=True, width=120))
            t0 = time.perf_counter()
            results[with_bar] = compare(ref, cand, level="op", progress=bar if with_bar else None)
            (shown if with_bar else plain).append(time.perf_counter() - t0)
        a, b = results[False], results[True]
        assert a.to_json() == b.to_json(), "progress changed the result"
        n = len(a.all_pairs())
    print(f"{args.ops} ops per side, {n} pairs; best of {args.repeat}: without progress "
          f"{min(plain):.3f} s, with progress {min(shown):.3f} s, ratio "
          f"{min(shown) / min(plain):.3f}; results identical")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
