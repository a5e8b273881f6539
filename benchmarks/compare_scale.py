"""Outputs of a large comparison, this revision side by side with another's source tree.

Runs ``netparity compare REF CAND --level op`` as a fresh process with ``-q``, ``--json FILE``
and ``--csv FILE`` for this tree's ``src`` and, with ``--baseline-src DIR``, for another
revision's ``src`` (e.g. a ``git worktree`` of the previous commit), rounds interleaved, and
prints wall time, CPU time (user + system) and peak RSS of each (``/usr/bin/time``), and the
size of what was written (the JSON, its pair table, the CSV); mode ``--by-step`` is ``-q`` a step
at a time (``--modes=-q,--by-step`` on a multi-step pair). The traces: any pair, e.g. the
100k-op pair ``benchmarks/align_speed.py --sizes 100000`` writes (or ``--make N DIR``: write
that pair here, N ops per side, compacted as a capture does).

    PYTHONPATH=src python benchmarks/compare_scale.py REF CAND --baseline-src /tmp/prev/src
    PYTHONPATH=src python benchmarks/compare_scale.py --make 100000 /tmp/t100k
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
MODES = {"-q": [], "--json": ["--json", "{out}/r.json"], "--csv": ["--csv", "{out}/r.csv"],
         # one step at a time (a multi-step pair: its peak against one step's)
         "--by-step": ["--by-step"]}


def run(src: Path, ref: str, cand: str, mode: str, out: Path) -> tuple[float, float, float, int]:
    """(wall s, cpu s, peak RSS MB, bytes written) of one CLI compare."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    argv = [a.format(out=out) for a in MODES[mode]]
    env = dict(os.environ, PYTHONPATH=str(src), OMP_NUM_THREADS="1")
    p = subprocess.run(["/usr/bin/time", "-f", "@@ %e %U %S %M", sys.executable, "-m",
                        "netparity", "compare", ref, cand, "--level", "op", "-q", *argv],
                       env=env, capture_output=True, text=True)
    line = [x for x in p.stderr.splitlines() if x.startswith("@@ ")][-1].split()
    wall, user, system, kb = float(line[1]), float(line[2]), float(line[3]), int(line[4])
    size = sum(f.stat().st_size for f in out.iterdir())
    shutil.rmtree(out, ignore_errors=True)
    return wall, user + system, kb / 1024, size


def make(n: int, where: Path, steps: int = 1) -> tuple[str, str]:
    sys.path.insert(0, str(Path(__file__).parent))
    from align_speed import Gen

    from netparity.trace.columnar import compact

    for name, fw in (("ref", "torch"), ("cand", "mindspore")):
        Gen(where / name, fw, n, False, steps=steps).run()
        compact(where / name)
    return str(where / "ref"), str(where / "cand")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ref", nargs="?")
    ap.add_argument("cand", nargs="?")
    ap.add_argument("--make", nargs=2, metavar=("N", "DIR"), help="write an N-op pair into DIR")
    ap.add_argument("--steps", type=int, default=1,
                    help="with --make: steps per trace (N ops each)")
    ap.add_argument("--baseline-src", default=None, metavar="DIR")
    ap.add_argument("--modes", default="-q,--json,--csv")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--make-only", action="store_true", help="with --make: write, do not run")
    a = ap.parse_args()
    if a.make and a.make_only:
        make(int(a.make[0]), Path(a.make[1]), a.steps)
        return
    if a.make:
        ref, cand = make(int(a.make[0]), Path(a.make[1]), a.steps)
    else:
        ref, cand = a.ref, a.cand
    trees = [("this", SRC)] + ([("baseline", Path(a.baseline_src))] if a.baseline_src else [])
    out = Path(tempfile.mkdtemp(prefix="compare_scale."))
    print(f"{'mode':8} {'tree':9} {'wall s':>8} {'cpu s':>8} {'peak MB':>8} {'written MB':>11}")
    try:
        for _ in range(a.repeat):
            for mode in a.modes.split(","):
                for name, src in trees:
                    w, c, m, size = run(src, ref, cand, mode, out)
                    print(f"{mode:8} {name:9} {w:8.1f} {c:8.1f} {m:8.0f} {size / 1e6:11.1f}",
                          flush=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
