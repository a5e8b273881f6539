"""Capture overhead on a ResNet-50 training step (CPU), measured as ratios in one run.

Budgets (see DESIGN.md): module-level statistics <= 1.15x, op-level statistics <= 1.6x,
full-tensor capture >= 50 % of the disk's sequential write speed.

Usage:
    PYTHONPATH=src python benchmarks/capture_overhead.py [--quick] [--out DIR] [--steps N]
        [--rounds R] [--pairing steps|blocks] [--only "module stats,op stats"]

Each configuration runs ``--rounds`` rounds, each under a fresh capture (one untimed warm-up
step first: capture learns which producers feed in-place ReLUs on the first step).

``--pairing steps`` (the default) alternates within a round: the capture's hooks are removed
(``uninstall``) for one uninstrumented step, put back (``install``) for one captured step, and
so on ``--steps`` times; every captured step is timed up to its records committed to disk
(``record_loss``, ``step`` and ``flush``: the writer thread's work is charged to the step that
caused it, never to the next uninstrumented one). A pair's ratio is captured over
uninstrumented; the figure is the median of all pairs with their quartiles. Adjacent steps
share the machine's state, so the pairs cancel its drifts (on the shared 2-core machine the
uninstrumented step alone moves by +-20 ms: glibc returns and re-faults the large activation
buffers, and other tenants come and go).

``--pairing blocks`` (the method of earlier revisions): ``--steps`` uninstrumented steps, then
``--steps`` captured ones; a round's ratio is the median captured step over the median
uninstrumented step of that round, and the figure is the median of the rounds' ratios with
their range. Its rounds spread about three times wider than the step pairs.

``--quick`` uses batch 2 at 64x64 for a fast check. The disk speed is measured in the output
directory (about 1 GB written with 8 MiB blocks and fsync, then deleted).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from netparity.examples.resnet.torch_resnet import resnet50
from netparity.frameworks.torch.capture import capture


def disk_write_speed(directory: Path, total: int = 1 << 30, block: int = 8 << 20) -> float:
    """Sequential write speed in bytes/s (large blocks, fsync before stopping the clock)."""
    buf = os.urandom(block)
    path = directory / "disk-speed.bin"
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(total // block):
            f.write(buf)
        f.flush()
        os.fsync(f.fileno())
    dt = time.perf_counter() - t0
    path.unlink()
    return total / dt


def make_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor,
              y: torch.Tensor) -> Callable[[], torch.Tensor]:
    crit = nn.CrossEntropyLoss()

    def step() -> torch.Tensor:
        loss = crit(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def timed(step: Callable[[], torch.Tensor], n: int, cap=None) -> list[float]:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        loss = step()
        if cap is not None:
            cap.record_loss(loss)
            cap.step()
            cap.resolve()  # statistics are part of the step's cost
        times.append(time.perf_counter() - t0)
    return times


def paired(step: Callable[[], torch.Tensor], n: int, cap) -> tuple[list[float], list[float]]:  # type: ignore[no-untyped-def]
    """``n`` (uninstrumented, captured) step pairs under ``cap`` (installed on entry and on
    return); each captured step timed until its records are committed."""
    base: list[float] = []
    captured: list[float] = []
    for _ in range(n):
        cap.uninstall()
        base += timed(step, 1)
        cap.install()
        t0 = time.perf_counter()
        timed(step, 1, cap)
        cap.flush()
        captured.append(time.perf_counter() - t0)
    return base, captured


def quartiles(v: list[float]) -> list[float]:
    return statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="batch 2, 64x64")
    ap.add_argument("--steps", type=int, default=4, help="timed steps per round and configuration")
    ap.add_argument("--rounds", type=int, default=3,
                    help="baseline/capture rounds per configuration (ratios paired per round)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--pairing", choices=("steps", "blocks"), default="steps",
                    help="pair each captured step with the uninstrumented step just before it "
                         "(default), or blocks of --steps steps (earlier revisions)")
    ap.add_argument("--out", default=None, help="directory for traces and the disk test")
    ap.add_argument("--skip-disk", action="store_true")
    ap.add_argument("--only", default=None,
                    help="comma-separated configurations to run, e.g. 'module stats,op stats'")
    args = ap.parse_args()
    batch, size = (2, 64) if args.quick else (8, 224)
    out = Path(args.out or tempfile.mkdtemp(prefix="netparity-bench-"))
    out.mkdir(parents=True, exist_ok=True)

    torch.manual_seed(0)
    model = resnet50()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, size, size)
    y = torch.randint(0, 1000, (batch,))
    step = make_step(model, opt, x, y)
    print(f"ResNet-50 training step, CPU, batch {batch}, {size}x{size}, "
          f"threads {torch.get_num_threads()}, torch {torch.__version__}")

    timed(step, args.warmup)
    results: dict[str, float] = {}
    configs = [("module stats", dict(level="module")), ("op stats", dict(level="op")),
               ("both stats", dict(level="both")),
               ("module tensors", dict(level="module", payload="tensors")),
               ("op tensors", dict(level="op", payload="tensors"))]
    if args.only:
        wanted = {w.strip() for w in args.only.split(",")}
        unknown = wanted - {name for name, _ in configs}
        if unknown:
            raise SystemExit(f"unknown configuration(s): {', '.join(sorted(unknown))}")
        configs = [c for c in configs if c[0] in wanted]
    base_runs: list[float] = []
    ratios: dict[str, list[float]] = {}
    written: dict[str, tuple[int, float]] = {}
    for name, kw in configs:
        captured: list[float] = []
        for _ in range(max(1, args.rounds)):
            d = out / name.replace(" ", "-")
            shutil.rmtree(d, ignore_errors=True)
            if args.pairing == "steps":
                with capture(model, d, overwrite=True, **kw) as cap:  # type: ignore[arg-type]
                    timed(step, args.warmup, cap)
                    cap.flush()
                    b, t = paired(step, args.steps, cap)
                wall = sum(t)
                ratios.setdefault(name, []).extend(c / u for u, c in zip(b, t))
            else:
                b = timed(step, args.steps)  # the baseline of this round, just before capture
                with capture(model, d, overwrite=True, **kw) as cap:  # type: ignore[arg-type]
                    timed(step, args.warmup, cap)
                    t0 = time.perf_counter()
                    t = timed(step, args.steps, cap)
                    cap.flush()
                    wall = time.perf_counter() - t0
                ratios.setdefault(name, []).append(statistics.median(t) / statistics.median(b))
            base_runs += b
            captured += t
            if kw.get("payload") == "tensors":
                nbytes = sum(p.stat().st_size for p in d.glob("rank0/tensors-*.safetensors"))
                prev = written.get(name, (0, 0.0))
                written[name] = (prev[0] + nbytes, prev[1] + wall)
            shutil.rmtree(d, ignore_errors=True)
        results[name] = statistics.median(captured)
    base = statistics.median(base_runs)
    print(f"{'uninstrumented':16s} {base * 1e3:9.1f} ms/step   1.00x")
    for name, v in results.items():
        r = ratios[name]
        if args.pairing == "steps":
            q = quartiles(r)
            spread = f"{len(r)} step pairs, quartiles {q[0]:.3f}-{q[2]:.3f}"
        else:
            spread = f"rounds: {' '.join(f'{x:.2f}' for x in r)}"
        print(f"{name:16s} {v * 1e3:9.1f} ms/step   {statistics.median(r):.3f}x ({spread})")
    if not args.skip_disk:
        disk = disk_write_speed(out)
        print(f"disk sequential write (fsync, 8 MiB blocks, {out}): {disk / 1e6:.0f} MB/s")
        for name, (nbytes, wall) in written.items():
            rate = nbytes / wall
            print(f"{name}: {nbytes / 1e6:.0f} MB in {wall:.2f} s (steps + flush) = "
                  f"{rate / 1e6:.0f} MB/s = {rate / disk:.0%} of disk speed")
    if args.out is None:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
