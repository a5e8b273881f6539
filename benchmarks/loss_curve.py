"""Speed of the loss-curve analysis of ``netparity numerics TRACE --loss FILE`` on long logs.

For 10k, 100k and 1M log lines (``step N loss: X``, a slowly decaying curve with noise, no
explosion, so every line is examined): the time to read the log
(:func:`netparity.analyzers.health.read_losses`) and to find the explosion window
(:func:`netparity.analyzers.health.find_explosion`), and the ratio of each time to the one of
ten times fewer lines (about 10 when linear; the median of every prefix used to make it ~100:
9 s at 10k lines, 117 s at 40k).

Run:  PYTHONPATH=src python benchmarks/loss_curve.py [--sizes 10000,100000,1000000]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time

from netparity.analyzers.health import find_explosion, read_losses


def write_log(path: str, n: int) -> None:
    rng = random.Random(0)
    decay = 0.1 ** (1 / n)
    with open(path, "w") as f:
        for i in range(n):
            f.write(f"step {i} loss: {2.0 * decay ** i + rng.random() * 0.01:.5f}\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    prev: tuple[float, float] | None = None
    print(f"{'lines':>9} {'read s':>8} {'find s':>8} {'x read':>7} {'x find':>7}")
    with tempfile.TemporaryDirectory() as d:
        for n in sizes:
            path = os.path.join(d, f"loss{n}.txt")
            write_log(path, n)
            t0 = time.perf_counter()
            curve = read_losses(path)
            t1 = time.perf_counter()
            step, kind = find_explosion(curve)
            t2 = time.perf_counter()
            os.unlink(path)
            assert len(curve) == n and step is None, (len(curve), step, kind)
            read, find = t1 - t0, t2 - t1
            ratio = (f"{read / prev[0]:7.1f} {find / prev[1]:7.1f}" if prev
                     else f"{'':>7} {'':>7}")
            print(f"{n:>9} {read:8.3f} {find:8.3f} {ratio}")
            prev = (read, find)


if __name__ == "__main__":
    main()
