"""Overhead of the light timing mode (``netparity.profile``) on a ResNet-50 training step.

Budget (issue 19): <= 1.05x an uninstrumented step measured in the same run.

Usage:
    PYTHONPATH=src python benchmarks/timing_overhead.py [--quick] [--steps N] [--no-modules]
        [--device cpu|cuda] [--clock wall|cpu] [--profiler] [--module-memory-steps N]
        [--no-module-backward]

``--profiler`` also times the profiler-backed mode in the same run: blocks of uninstrumented
steps alternate with blocks run inside one ``torch.profiler.profile`` session (CPU activity, and
CUDA on a GPU; ``record_shapes=True``, as ``netparity perf`` wants for its hot-op table), one
``prof.step()`` per step; the export is not timed. The figure is the median profiled step over
the median uninstrumented step.

Method (as ``capture_overhead.py``'s default pairing): one profile stays open; for each of
``--steps`` pairs its hooks are removed (``uninstall``) for one uninstrumented step, put back
(``install``) for one timed step, whose records are committed before its clock stops
(``flush``: the writer thread's work is charged to the step that caused it). A pair's ratio is
timed over uninstrumented; the figure is the median of the pairs with their quartiles. Adjacent
steps share the machine's state, so the pairs cancel its drifts. On CUDA each step ends with a
synchronisation (both sides alike), so the ratio compares whole steps.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable

import torch
from torch import nn

from netparity.examples.resnet.torch_resnet import resnet50
from netparity.frameworks.torch.timing import profile


def make_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
              sync: Callable[[], None]) -> Callable[[], None]:
    crit = nn.CrossEntropyLoss()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        crit(model(x), y).backward()
        opt.step()
        sync()

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="batch 2, 64x64")
    ap.add_argument("--steps", type=int, default=8, help="(uninstrumented, timed) step pairs")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--no-modules", action="store_true", help="phases only, no module hooks")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (1 steadies the figures on a shared machine)")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--size", type=int, default=None,
                    help="image side; --batch 1 --size 32 isolates the hooks' fixed cost per "
                         "step (same modules and parameters, little compute)")
    ap.add_argument("--module-memory-steps", type=int, default=10**9,
                    help="timed steps that read each module's memory peak (default: all, the "
                    "cost of the first steps of a run; 0: the steady state after them)")
    ap.add_argument("--no-module-backward", action="store_true",
                    help="no per-module backward times (no autograd-node hooks)")
    ap.add_argument("--profiler", action="store_true",
                    help="also the profiler-backed mode (torch.profiler, record_shapes)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: this process's CPU time (time.process_time: every thread, the "
                         "trace writer's included), which other jobs on a shared machine do "
                         "not inflate; wall: perf_counter")
    args = ap.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    batch, size = (2, 64) if args.quick else (8, 224)
    batch, size = args.batch or batch, args.size or size
    dev = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    torch.manual_seed(0)
    model = resnet50().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, size, size, device=dev)
    y = torch.randint(0, 1000, (batch,), device=dev)
    step = make_step(model, opt, x, y, sync)
    print(f"ResNet-50 training step, {dev}, batch {batch}, {size}x{size}, "
          f"threads {torch.get_num_threads()}, torch {torch.__version__}, "
          f"module hooks {'off' if args.no_modules else 'on'}, module memory read in "
          f"{min(args.module_memory_steps, args.steps)} of {args.steps} timed steps, module "
          f"backward {'off' if args.no_module_backward else 'on'}, "
          f"clock {args.clock}")
    for _ in range(args.warmup):
        step()

    base: list[float] = []
    timed: list[float] = []
    with tempfile.TemporaryDirectory(prefix="netparity-timing-") as d:
        prof = profile(model, d, optimizer=opt, modules=not args.no_modules, overwrite=True,
                       module_memory_steps=args.module_memory_steps,
                       module_backward=not args.no_module_backward)
        try:
            for _ in range(args.steps):
                prof.uninstall()
                t0 = clock()
                step()
                base.append(clock() - t0)
                prof.install()
                t0 = clock()
                step()
                prof.flush()
                timed.append(clock() - t0)
        finally:
            prof.close()
        steps = prof.steps
    ratios = [t / b for t, b in zip(timed, base)]
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    print(f"uninstrumented step: median {statistics.median(base) * 1e3:.1f} ms; timed: "
          f"{statistics.median(timed) * 1e3:.1f} ms ({steps} steps recorded)")
    print(f"difference of the medians: {(statistics.median(timed) - statistics.median(base)) * 1e3:+.1f} "
          f"ms per step")
    print(f"light timing overhead: {statistics.median(ratios):.3f}x "
          f"(quartiles {q[0]:.3f}-{q[2]:.3f}, {len(ratios)} pairs; budget <= 1.05x)")
    if args.profiler:
        plain, profiled = profiler_blocks(step, clock, args.steps, dev.type == "cuda")
        print(f"torch.profiler (Kineto, record_shapes) overhead: "
              f"{statistics.median(profiled) / statistics.median(plain):.3f}x (median of "
              f"{len(profiled)} profiled steps over {len(plain)} uninstrumented, alternating "
              "blocks of 2)")


def profiler_blocks(step: Callable[[], None], clock: Callable[[], float], steps: int,
                    cuda: bool) -> tuple[list[float], list[float]]:
    """Per-step times of uninstrumented blocks and of blocks inside one profiler session each
    (the session's first step, which starts the profiler, is not counted)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    plain: list[float] = []
    profiled: list[float] = []
    for _ in range(max(1, steps // 2)):
        for _ in range(2):
            t0 = clock()
            step()
            plain.append(clock() - t0)
        with torch_profile(activities=acts, record_shapes=True) as p:
            for i in range(3):
                t0 = clock()
                step()
                p.step()
                if i:
                    profiled.append(clock() - t0)
    return plain, profiled


if __name__ == "__main__":
    main()
