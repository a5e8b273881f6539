"""Peak memory of ``netparity step`` on large models, this revision side by side with another's.

Runs ``netparity step REF CAND --steps 2`` (PyTorch against PyTorch: the same spec on both
sides, ``benchmarks/step_memory_spec.py``) as a fresh child process per model and revision and
prints its peak resident memory (``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss``, one child
at a time), the model's weight size and their ratio: how many copies of the weights ``step``
held at its peak (the interpreter, torch and the activations included). ``--base DIR``: also
run another revision's ``src`` (e.g. a ``git worktree`` of the previous commit) in the same
run. A model of P parameters then needs about ``ratio x 4 P`` bytes (float32).

    PYTHONPATH=src python benchmarks/step_memory.py                      # resnet50 and vit_b32
    PYTHONPATH=src python benchmarks/step_memory.py --arch resnet50 --base /tmp/prev/src
    PYTHONPATH=src python benchmarks/step_memory.py --arch resnet50 --stages   # per stage
    PYTHONPATH=src python benchmarks/step_memory.py --arch vit_l16 --image-size 32 \
        --work /big/disk/dir        # ViT-L/16, 304M parameters: ~1.1 GiB of weights a copy

``--stages`` runs the workflow in the child itself (``run_step_parity``, what the command runs)
and prints, for each of its stages, the peak resident memory during that stage (Linux: the
child resets its ``VmHWM`` through ``/proc/self/clear_refs`` as each stage starts).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
SPEC = HERE / "step_memory_spec.py"


def weight_bytes(arch: str, image_size: int) -> int:
    """Bytes of the model's parameters and buffers (built here, in this process)."""
    sys.path.insert(0, str(HERE))
    from step_memory_spec import build

    model = build(arch=arch, image_size=image_size, steps=1)["model"]
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


def run(src: Path, arch: str, image_size: int, steps: int, work: Path,
        extra: list[str]) -> tuple[float, float, int, str]:
    """(peak RSS in bytes, wall seconds, exit status, last line) of one ``step`` child.

    Each child runs from a fresh grandparent (``python -c``) so that RUSAGE_CHILDREN holds this
    child's peak alone."""
    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(src), OMP_NUM_THREADS="1")
    argv = [sys.executable, "-m", "netparity", "step", str(SPEC), str(SPEC), "-o", str(out),
            "--steps", str(steps), "--opt", f"arch={arch}", "--opt",
            f"image_size={image_size}", "--opt", f"steps={steps}", "-q", *extra]
    probe = ("import resource,subprocess,sys;"
             "p=subprocess.run(sys.argv[1:],capture_output=True,text=True);"
             "r=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss;"
             "tail=(p.stdout+p.stderr).strip().splitlines()[-1:] or [''];"
             "print(f'@@ {r} {p.returncode} {tail[0]}')")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", probe, *argv], env=env, capture_output=True,
                       text=True)
    wall = time.perf_counter() - t0
    shutil.rmtree(out, ignore_errors=True)
    line = [x for x in p.stdout.splitlines() if x.startswith("@@ ")]
    if not line:
        return 0.0, wall, -1, (p.stderr.strip().splitlines() or ["?"])[-1]
    _, kb, rc, *tail = line[-1].split(" ")
    return int(kb) * 1024.0, wall, int(rc), " ".join(tail)[:90]


STAGES = r"""
import sys, pathlib
from netparity.report.progress import Progress
from netparity.workflow.step import run_step_parity

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0

import threading, time
anon = [0]

def sample():  # the kernel keeps no peak of anonymous memory: sampled every 10 ms
    while True:
        anon[0] = max(anon[0], status("RssAnon"))
        time.sleep(0.01)

threading.Thread(target=sample, daemon=True).start()

class P(Progress):
    name = "start"
    def _end(self):
        print(f"@@ {status('VmHWM')} {max(anon[0], status('RssAnon'))} {self.name}", flush=True)
        anon[0] = 0
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    def stage(self, name, total=None):
        self._end()
        self.name = name
    def done(self):
        self._end()

arch, size, steps, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
spec = sys.argv[5]
run_step_parity(spec, spec, out, steps=steps, progress=P(),
                options={"arch": arch, "image_size": size, "steps": steps})
"""


def stages(src: Path, arch: str, image_size: int, steps: int,
           work: Path) -> list[tuple[str, int, int]]:
    """(stage, peak RSS bytes during it, peak anonymous RSS during it: sampled) of one
    in-process workflow run in a child."""
    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(src), OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", STAGES, arch, str(image_size), str(steps),
                        str(out), str(SPEC)], env=env, capture_output=True, text=True)
    shutil.rmtree(out, ignore_errors=True)
    if p.returncode != 0:
        print((p.stderr.strip().splitlines() or ["?"])[-1], file=sys.stderr)
    rows = [x[3:].split(" ", 2) for x in p.stdout.splitlines() if x.startswith("@@ ")]
    return [(name, int(b), int(anon)) for b, anon, name in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", action="append", choices=["resnet50", "vit_b32", "vit_l16"],
                    help="model(s) to run (default: both)")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--base", type=Path, help="another revision's src directory, run as well")
    ap.add_argument("--extra", default="", help="more `netparity step` arguments, one string")
    ap.add_argument("--work", type=Path, default=None,
                    help="where the traces go (a temporary directory in it, removed after; "
                    "default: the system's temporary directory)")
    ap.add_argument("--stages", action="store_true",
                    help="the peak resident memory of each stage of the workflow instead")
    a = ap.parse_args()
    revs = [("this", SRC)] + ([("base", a.base)] if a.base else [])
    if a.stages:
        with tempfile.TemporaryDirectory(prefix="step_memory_", dir=a.work) as tmp:
            for arch in a.arch or ["resnet50", "vit_b32"]:
                w = weight_bytes(arch, a.image_size)
                for rev, src in revs:
                    print(f"{arch} {rev}: during each stage, peak RSS MB and copies of the "
                          f"{w / 2**20:.0f} MB of weights; peak anonymous RSS (sampled every "
                          "10 ms; the rest is trace pages mapped, which the kernel reclaims)")
                    for name, b, anon in stages(src, arch, a.image_size, a.steps, Path(tmp)):
                        print(f"  {b / 2**20:7.0f} {b / w:5.1f}  {anon / 2**20:7.0f} "
                              f"{anon / w:5.1f}  {name}", flush=True)
        return
    print(f"{'model':9} {'rev':5} {'weights MB':>10} {'peak RSS MB':>11} {'copies':>6} "
          f"{'wall s':>7} {'exit':>4}  last line")
    with tempfile.TemporaryDirectory(prefix="step_memory_", dir=a.work) as tmp:
        for arch in a.arch or ["resnet50", "vit_b32"]:
            w = weight_bytes(arch, a.image_size)
            for rev, src in revs:
                peak, wall, rc, tail = run(src, arch, a.image_size, a.steps, Path(tmp),
                                           a.extra.split())
                print(f"{arch:9} {rev:5} {w / 2**20:10.0f} {peak / 2**20:11.0f} "
                      f"{peak / w:6.1f} {wall:7.1f} {rc:4}  {tail}", flush=True)


if __name__ == "__main__":
    main()
