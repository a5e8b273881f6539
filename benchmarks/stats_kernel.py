"""Speed of the capture statistics on CPU: the one-pass C kernel against the NumPy passes.

Both compute the same 11 statistics (``netparity.hoststats.finite_vec``, which every CPU
capture path uses);
the figures are GB/s of float32 data, measured in one run, on data that is hot in cache (the
same 25 MB tensor again and again) and cold (a walk over 1.6 GB, as a training step's
activations are). ``2 POSIX threads`` splits each tensor between two threads started by the
kernel; ``2 on torch's team`` runs the same two parts on torch's OpenMP workers, which is what
capture does (POSIX threads fight those workers inside a training step; see
``share_openmp_pool`` in hoststats.py). ``+ ReLU sums`` is ``stats_relu`` (the pass over an
in-place ReLU's input that also yields its output's statistics). Last, ResNet-50's parameters
and buffers (267 arrays, 95 MB) one kernel call each against one ``stats_many`` call.

Run:  PYTHONPATH=src python benchmarks/stats_kernel.py [--cold-gb 1.6]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np
import torch

from netparity import hoststats
from netparity.frameworks.torch import adapter as torch_adapter


def rate(fn: Callable[[torch.Tensor], object], tensors: list[torch.Tensor], repeat: int) -> float:
    fn(tensors[0])
    nbytes = sum(t.numel() * 4 for t in tensors) * repeat
    t0 = time.perf_counter()
    for _ in range(repeat):
        for t in tensors:
            fn(t)
    return nbytes / (time.perf_counter() - t0) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cold-gb", type=float, default=1.6)
    args = ap.parse_args()
    kernel = hoststats._kernel
    if kernel is None:
        raise SystemExit("netparity._fastvec is not built (pip install -e . with a C compiler)")
    g = torch.Generator().manual_seed(0)
    chunk = 6_400_000  # 25.6 MB: one large ResNet-50 activation at batch 8
    hot = [torch.relu(torch.randn(chunk, generator=g))]
    big = torch.randn(int(args.cold_gb * 1e9 / 4) // chunk * chunk, generator=g)
    cold = list(big.split(chunk))

    def numpy_path(t: torch.Tensor) -> object:
        hoststats._kernel = None
        try:
            return torch_adapter._fast_cpu_vec(t)
        finally:
            hoststats._kernel = kernel

    def kernel_with(threads: int) -> Callable[[torch.Tensor], object]:
        return lambda t: kernel.stats(t.numpy(), threads)

    print(f"float32 statistics, GB/s (torch {torch.__version__}, numpy {np.__version__})")
    print(f"{'':26s} {'hot 25 MB':>10s} {'cold':>10s}")
    base = None
    for name, fn, team in [("NumPy passes", numpy_path, False),
                           ("kernel, 1 thread", kernel_with(1), False),
                           ("kernel, 2 POSIX threads", kernel_with(2), False),
                           ("kernel, 2 on torch's team", kernel_with(2), True),
                           ("+ ReLU sums, torch's team", lambda t: kernel.stats_relu(t.numpy(), 2),
                            True)]:
        if team and not hoststats.share_openmp_pool(os.path.dirname(torch.__file__)):  # as capture
            print(f"{name:26s} (no OpenMP runtime loaded)")
            continue
        if not team:
            kernel.unbind_openmp()
        h, c = rate(fn, hot, 20), rate(fn, cold, 1)
        base = base or (h, c)
        print(f"{name:26s} {h:10.1f} {c:10.1f}   ({h / base[0]:.1f}x, {c / base[1]:.1f}x)")
    from netparity.examples.resnet.torch_resnet import resnet50

    model = resnet50()
    arrays = [p.detach().numpy() for p in model.parameters()]
    arrays += [b.numpy() for b in model.buffers() if b.is_floating_point()]
    for label, run in [("one call each", lambda: [kernel.stats(a, 2) for a in arrays]),
                       ("one stats_many call", lambda: kernel.stats_many(arrays, 2))]:
        run()
        t0 = time.perf_counter()
        for _ in range(10):
            run()
        ms = (time.perf_counter() - t0) / 10 * 1e3
        print(f"ResNet-50 parameters and buffers ({len(arrays)} arrays), {label}: {ms:.1f} ms")


if __name__ == "__main__":
    main()
