"""MindSpore capture overhead on a ResNet-50 training step (PyNative, CPU), as ratios in one run.

No budget in DESIGN.md names MindSpore; this script shows what the candidate side of a
migration costs to capture (module level, statistics), and what each part of the host path
saves, every ratio against the uninstrumented step of the same run:

* ``one-pass``: the default: ``asnumpy()`` of each recorded tensor, then one pass of the C
  kernel (``netparity.hoststats``);
* ``reference``: the same with the NumPy reference statistics
  (``netparity.stats.compute_stats``): the previous host path;
* ``one-pass, launch_blocking``: ``capture(..., launch_blocking=True)`` (what the parity
  workflow uses on CPU): operators run synchronously, so a read no longer waits for PyNative's
  asynchronous executor. MindSpore cannot switch that off again, so these configurations run
  last, after a second uninstrumented baseline taken in blocking mode.

The model, loss, optimizer and step are the reference migration's own
(``netparity.examples.resnet``): ``value_and_grad`` plus Momentum, loss scale 1.

Usage:
    PYTHONPATH=src python benchmarks/capture_overhead_mindspore.py [--batch 4] [--size 64]
        [--steps 3] [--level module]

MindSpore's CPU kernels are slow at 224x224 (a batch-8 step takes ~50 s here), so the default
is the demo's shape, batch 4 at 64x64.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3, help="timed steps per configuration")
    ap.add_argument("--level", default="module", choices=["module", "op", "both"])
    args = ap.parse_args()

    import mindspore as ms

    from netparity.examples.resnet.ms_resnet import resnet50
    from netparity.examples.resnet.ms_train import CrossEntropySmooth, TrainStep, make_optimizer
    from netparity.frameworks.mindspore import adapter as mindspore_adapter
    from netparity.frameworks.mindspore.capture import capture
    from netparity.hoststats import host_stats
    from netparity.stats import compute_stats

    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    ms.set_seed(0)
    net = resnet50(num_classes=10)
    opt = make_optimizer(net, [0.01])
    step = TrainStep(net, CrossEntropySmooth(smooth_factor=0.1, num_classes=10), opt,
                     keep_grads=False)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, 3, args.size, args.size)).astype(np.float32)
    y = (np.arange(args.batch) % 10).astype(np.int32)
    print(f"MindSpore {ms.__version__} ResNet-50 training step, PyNative CPU, batch {args.batch}, "
          f"{args.size}x{args.size}, level {args.level}")

    def timed(n: int, cap: Any = None) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            step(x, y)
            if cap is not None:
                cap.step()
                cap.resolve()  # statistics are part of the step's cost
            out.append(time.perf_counter() - t0)
        return out

    timed(1)
    out = Path(tempfile.mkdtemp(prefix="netparity-bench-ms-"))
    base: dict[str, list[float]] = {"asynchronous": [], "blocking": []}
    results: dict[str, tuple[str, float]] = {}
    try:
        for name, mode, fn in (("one-pass", "asynchronous", host_stats),
                               ("reference", "asynchronous", compute_stats),
                               ("one-pass, launch_blocking", "blocking", host_stats)):
            if mode == "blocking" and not base["blocking"]:
                ms.runtime.launch_blocking()
                timed(1)
            base[mode] += timed(args.steps)  # interleaved baseline: machines drift
            mindspore_adapter.host_stats = fn  # type: ignore[assignment]
            try:
                with capture(net, out / "t", level=args.level, optimizer=opt, overwrite=True,
                             launch_blocking=mode == "blocking") as cap:
                    timed(1, cap)
                    results[name] = (mode, statistics.median(timed(args.steps, cap)))
            finally:
                mindspore_adapter.host_stats = host_stats  # type: ignore[assignment]
            shutil.rmtree(out / "t", ignore_errors=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    b0 = statistics.median(base["asynchronous"])
    b1 = statistics.median(base["blocking"])
    print(f"{'uninstrumented':28s} {b0 * 1e3:9.0f} ms/step   1.00x")
    print(f"{'uninstrumented, blocking':28s} {b1 * 1e3:9.0f} ms/step   {b1 / b0:.2f}x")
    for name, (mode, v) in results.items():
        own = f" ({v / b1:.2f}x the blocking baseline)" if mode == "blocking" else ""
        print(f"{name:28s} {v * 1e3:9.0f} ms/step   {v / b0:.2f}x{own}")

if __name__ == "__main__":
    main()
