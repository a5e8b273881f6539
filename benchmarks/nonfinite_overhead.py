"""Cost of ``stop_on_nonfinite`` against PyTorch's anomaly mode, as ratios measured in one run.

Each configuration trains the same model on the same batch for ``--steps`` timed steps (after
one untimed warm-up step) per round; configurations take turns within a round, rounds repeat
``--rounds`` times, and each figure is the median over rounds of (configuration's median step /
the uninstrumented median step of the same round), with the rounds' range:

* ``plain``: no instrumentation;
* ``anomaly``: ``torch.autograd.detect_anomaly()`` (forward tracebacks on every autograd node,
  NaN check of every backward function's output) -- what PyTorch offers to find a NaN;
* ``stats``: netparity module-level statistics capture;
* ``stop``: ``stop_on_nonfinite=True`` with no ``level`` -- the light stop (the default): one
  reduction per module output and per gradient, nothing recorded but the loss;
* ``stats+stop``: the same with ``stop_on_nonfinite=True`` (one ``isfinite().all()`` per output
  of every aten op, forward, backward and update);
* ``op stats+stop``: op-level statistics capture with ``stop_on_nonfinite=True``.

Usage:
    PYTHONPATH=src python benchmarks/nonfinite_overhead.py [--model mlp|resnet50] [--quick]
        [--steps N] [--rounds R]

``--model resnet50`` is the ResNet-50 training step of ``capture_overhead.py`` (batch 8 at
112x112; ``--quick``: batch 2 at 64x64); ``mlp`` (default) a small 4-layer MLP, where per-op
overhead weighs most.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from netparity.frameworks.torch.capture import capture


def _model(name: str, quick: bool) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    if name == "resnet50":
        from netparity.examples.resnet.torch_resnet import resnet50

        b, hw = (2, 64) if quick else (8, 112)
        return resnet50(num_classes=10), torch.randn(b, 3, hw, hw), torch.randint(0, 10, (b,))
    m = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.GELU(),
                      nn.Linear(512, 256), nn.LayerNorm(256), nn.Linear(256, 10))
    return m, torch.randn(64, 256), torch.randint(0, 10, (64,))


def _step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
          cap: Any = None) -> None:
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    if cap is not None:
        cap.record_loss(loss)
    loss.backward()
    opt.step()
    if cap is not None:
        cap.step()
        cap.flush()  # the writer's work is charged to the step that caused it


@contextlib.contextmanager
def _config(name: str, model: nn.Module, opt: torch.optim.Optimizer, out: Path
            ) -> Iterator[Any]:
    if name == "plain":
        yield None
    elif name == "anomaly":
        with torch.autograd.detect_anomaly(check_nan=True):
            yield None
    else:
        level = None if name == "stop" else "op" if name.startswith("op") else "module"
        path = out / name.replace(" ", "_").replace("+", "_")
        shutil.rmtree(path, ignore_errors=True)
        with capture(model, path, level=level, optimizer=opt,
                     stop_on_nonfinite=name.endswith("stop")) as cap:
            yield cap


def measure(model_name: str, quick: bool, steps: int, rounds: int,
            configs: list[str], cpu: bool = True) -> dict[str, list[float]]:
    """Per configuration: its ratio to ``plain`` in each round (``cpu``: of this process's CPU
    time per step, which other jobs on a shared machine disturb far less than wall time; with
    one torch thread and no I/O wait the two agree on a quiet machine)."""
    clock = time.process_time if cpu else time.perf_counter
    model, x, y = _model(model_name, quick)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    out = Path(tempfile.mkdtemp(prefix="np-nonfinite-bench-"))
    ratios: dict[str, list[float]] = {c: [] for c in configs}
    times: dict[str, float] = {}
    try:
        for r in range(rounds):
            order = configs if r % 2 == 0 else configs[::-1]  # no configuration always first
            for name in order:
                with _config(name, model, opt, out) as cap:
                    _step(model, opt, x, y, cap)  # warm-up
                    ts = []
                    for _ in range(steps):
                        t0 = clock()
                        _step(model, opt, x, y, cap)
                        ts.append(clock() - t0)
                times[name] = statistics.median(ts)
            for name in configs:
                ratios[name].append(times[name] / times["plain"])
            print(f"round {r}: plain {times['plain'] * 1e3:.1f} ms/step; "
                  + ", ".join(f"{c} x{ratios[c][-1]:.2f}" for c in configs if c != "plain"),
                  flush=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return ratios


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("mlp", "resnet50"), default="mlp")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (default 1: steadier on a shared machine)")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="time each step by this process's CPU time (default) or wall time")
    ap.add_argument("--configs", default="plain,anomaly,stats,stop,stats+stop,op stats+stop")
    a = ap.parse_args(argv)
    configs = [c.strip() for c in a.configs.split(",") if c.strip()]
    if "plain" not in configs:
        configs.insert(0, "plain")
    torch.set_num_threads(a.threads)
    ratios = measure(a.model, a.quick, a.steps, a.rounds, configs, cpu=a.clock == "cpu")

    def fmt(v: list[float]) -> str:
        return f"x{statistics.median(v):.2f} (rounds {min(v):.2f}-{max(v):.2f})"

    print(f"\n{a.model}{' (quick)' if a.quick else ''}: step {a.clock} time / uninstrumented, "
          "median of "
          f"{a.rounds} rounds x {a.steps} steps")
    for c in configs:
        if c != "plain":
            print(f"  {c:16s} {fmt(ratios[c])}")
    for c in ("stop", "stats+stop"):
        if "anomaly" in ratios and c in ratios:
            rel = [s / an for s, an in zip(ratios[c], ratios["anomaly"])]
            print(f"  {c} / anomaly  x{statistics.median(rel):.2f}")


if __name__ == "__main__":
    main()
