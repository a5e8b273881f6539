"""Many ranks compared in parallel: ``compare --workers 1`` against ``--workers 2`` (and a Dask
local cluster), on a synthetic pair of multi-rank traces.

Writes a reference and a candidate of R ranks x N module calls per side (statistics-only
records, written with the trace writer, compacted as a capture does) in a temporary
directory, times ``netparity.analyzers.ranks.compare_ranks`` with each engine, prints the wall
times and the speed-up over one worker, and deletes the traces.

    PYTHONPATH=src python benchmarks/compare_ranks.py                    # 64 ranks x 10k ops
    PYTHONPATH=src python benchmarks/compare_ranks.py --ranks 8 --ops 200 --dask

:func:`make` is also what the tests use (small sizes).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

_STATS = ("min", "max", "mean", "std", "norm", "abs_sum")


def _stats(n: int, mean: float, std: float) -> dict[str, float | int]:
    return {"min": mean - 3 * std, "max": mean + 3 * std, "mean": mean, "std": std,
            "norm": math.sqrt(n * (std * std + mean * mean)), "abs_sum": n * (abs(mean) + std),
            "nan": 0, "posinf": 0, "neginf": 0, "zeros": 0, "fp16_overflow": 0}


def write_side(path: Path, ranks: int, ops: int, *, bad: tuple[int, int] | None = None,
               framework: str = "torch") -> None:
    """One side: ``ranks`` ranks of ``ops`` module calls (a chain ``layers.i``, forward, step
    0, statistics only). ``bad=(rank, i)``: that rank's call ``i`` and every later one have
    outputs 1.5x too large (introduced at ``layers.i``, propagated after it)."""
    from netparity.trace.claim import RUN_ID_ENV
    from netparity.trace.columnar import compact

    shape = (4, 16)
    n = math.prod(shape)
    # the ranks of one run, written one after another (netparity.trace.claim)
    old = os.environ.get(RUN_ID_ENV)
    os.environ[RUN_ID_ENV] = uuid.uuid4().hex
    try:
        for r in range(ranks):
            _write_rank(path, r, ops, shape, n, bad, framework)
    finally:
        if old is None:
            os.environ.pop(RUN_ID_ENV, None)
        else:
            os.environ[RUN_ID_ENV] = old
    compact(path)


def _write_rank(path: Path, r: int, ops: int, shape: tuple[int, ...], n: int,
                bad: tuple[int, int] | None, framework: str) -> None:
    from netparity.trace import TraceWriter
    from netparity.trace.schema import Record

    with TraceWriter(path, rank=r, manifest={"framework": framework}) as w:
        mean, std = 0.1 * (r + 1), 1.0
        for i in range(ops):
            base = {"kind": "module", "module": f"layers.{i}", "op": "linear",
                    "native": "Linear", "call": 0, "step": 0, "rank": r, "dtype": "float32",
                    "shape": shape}
            ev = w.next_event()
            w.add(Record(event=ev, role="input", stats=_stats(n, mean, std), **base))
            mean = mean * 0.9 + 0.01 * ((i % 7) - 3)
            std = std * 0.99 + 0.01
            f = 1.5 if bad is not None and r == bad[0] and i >= bad[1] else 1.0
            st = _stats(n, mean, std)
            if f != 1.0:
                st = {k: (v * f if k in _STATS else v) for k, v in st.items()}
            w.add(Record(event=ev, role="output", stats=st, **base))
            if f != 1.0:
                mean, std = mean * f, std * f


def make(root: Path, ranks: int, ops: int, *, bad: tuple[int, int] | None = None
         ) -> tuple[str, str]:
    """``root/ref`` and ``root/cand`` (the candidate with ``bad``, see :func:`write_side`)."""
    write_side(root / "ref", ranks, ops)
    write_side(root / "cand", ranks, ops, bad=bad)
    return str(root / "ref"), str(root / "cand")


def _cpu() -> float:
    """CPU seconds of this process and of its children reaped so far (a pool's workers)."""
    import resource

    return sum(resource.getrusage(w).ru_utime + resource.getrusage(w).ru_stime
               for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


def _time(label: str, fn: object) -> tuple[float, object]:
    t0, c0 = time.perf_counter(), _cpu()
    got = fn()  # type: ignore[operator]
    dt = time.perf_counter() - t0
    # CPU: the work done; wall/CPU shows how much of the cores a run got (the load)
    print(f"{label:24} {dt:8.2f} s wall {_cpu() - c0:8.2f} s CPU", flush=True)
    return dt, got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--ops", type=int, default=10_000)
    ap.add_argument("--workers", default="1,2", help="worker counts to time (1,2)")
    ap.add_argument("--dask", action="store_true",
                    help="also a dask.distributed LocalCluster of 2 worker processes")
    ap.add_argument("--keep", metavar="DIR", help="write the traces here and keep them")
    ap.add_argument("--traces", metavar="DIR",
                    help="compare the traces a --keep run left in DIR (write nothing)")
    a = ap.parse_args()
    from netparity.analyzers.ranks import compare_ranks

    root = Path(a.traces or a.keep or tempfile.mkdtemp(prefix="compare_ranks."))
    try:
        if a.traces:
            ref, cand = str(root / "ref"), str(root / "cand")
        else:
            t0 = time.perf_counter()
            ref, cand = make(root, a.ranks, a.ops, bad=(a.ranks - 1, a.ops // 2))
            print(f"wrote {a.ranks} ranks x {a.ops} ops per side in "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)
        print(f"cpus: {os.cpu_count()}, load average: "
              + " ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)
        times: dict[str, float] = {}
        verdicts = set()
        for n in (int(x) for x in a.workers.split(",")):
            dt, res = _time(f"workers={n}", lambda n=n: compare_ranks(ref, cand, workers=n))
            times[f"workers={n}"] = dt
            fd = res.first_divergence  # type: ignore[attr-defined]
            verdicts.add((res.status, fd.rank if fd else None, fd.module if fd else None))  # type: ignore[attr-defined]
        if a.dask:
            from distributed import Client, LocalCluster

            with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                              dashboard_address=None) as cl, Client(cl) as client:
                dt, res = _time("dask LocalCluster(2)",
                                lambda: compare_ranks(ref, cand, scheduler=client))
            times["dask"] = dt
            fd = res.first_divergence  # type: ignore[attr-defined]
            verdicts.add((res.status, fd.rank if fd else None, fd.module if fd else None))  # type: ignore[attr-defined]
        one = times.get("workers=1")
        if one:
            for k, v in times.items():
                print(f"speed-up {k:22} {one / v:5.2f}x")
        print("verdicts:", sorted(verdicts, key=str))
        if len(verdicts) != 1:
            sys.exit("the engines disagree")
    finally:
        if not (a.keep or a.traces):
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
