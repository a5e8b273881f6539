"""What payload checksums cost a full-tensor comparison: the time spent hashing inside
``netparity.compare`` next to the comparison's own wall and CPU time, on two ResNet-50-shaped
traces (``compare_throughput.write``). Timing the hash itself, in the same run, gives a figure
that survives load from other jobs (an A/B of two whole comparisons does not, on a shared
machine).

    PYTHONPATH=src python benchmarks/checksum_cost.py --gb 0.4 --repeat 3
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare_throughput as ct  # noqa: E402

import netparity  # noqa: E402
from netparity.trace import checksum, payload  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=0.4, help="GB of tensors per trace")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="np_checksum_"))
    per_image = sum(int(ct.np.prod(s[1:])) * 4 for _, s in ct.shapes(1)) * 2
    batch = max(1, int(args.gb * 1e9 / per_image))
    n = ct.write(root / "ref", batch, 1, 0.0)
    ct.write(root / "cand", batch, 2, 1e-6)
    stat = {"bytes": 0, "t": 0.0}

    class Timed(checksum.Running):
        def update(self, buf: Any) -> None:
            t = time.perf_counter()
            super().update(buf)
            stat["t"] += time.perf_counter() - t
            stat["bytes"] += memoryview(buf).nbytes

    payload.Running = Timed  # type: ignore[misc]  # the streaming reader's hash, timed
    try:
        for _ in range(args.repeat):
            stat.update(bytes=0, t=0.0)
            t0, c0 = time.perf_counter(), time.process_time()
            netparity.compare(root / "ref", root / "cand", workers=2)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            print(f"{checksum.default_algorithm()}: compare {2 * n / 1e9:.2f} GB in {wall:.2f} s "
                  f"wall, {cpu:.2f} s CPU; hashing {stat['bytes'] / 1e9:.2f} GB took "
                  f"{stat['t']:.3f} s ({stat['bytes'] / 1e9 / max(stat['t'], 1e-9):.1f} GB/s, "
                  f"{100 * stat['t'] / cpu:.1f} % of the CPU time)")
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
