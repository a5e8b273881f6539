"""Cost per training step of ``netparity precision``: a torchvision ResNet-18 and a small
transformer encoder (PyTorch), one step each (forward, backward, SGD).

For each model: the plain step's time, the op-level capture with tensors (time, op calls,
trace size), and ``check_precision`` on that trace (time, op calls measured, flagged, the
worst normwise error in ULP of float32). The traces are written under a temporary folder and
deleted.

Run:  PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/precision_cost.py [--image 64]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F  # noqa: N812

import netparity
from netparity.precision import check_precision
from netparity.trace import open_trace


def _resnet18() -> Any:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.corpus.models import torchvision_models

    return torchvision_models().resnet18(num_classes=10)


def _encoder() -> Any:
    layer = torch.nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True)
    return torch.nn.Sequential(torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False),
                               torch.nn.Flatten(), torch.nn.Linear(128 * 16, 10))


def _size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def measure(name: str, model: Any, x: torch.Tensor, work: Path) -> dict[str, Any]:
    y = torch.randint(0, 10, (x.shape[0],))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step() -> None:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    step()  # warm-up
    t0 = time.perf_counter()
    step()
    plain = time.perf_counter() - t0
    path = work / name
    t0 = time.perf_counter()
    with netparity.capture(model, path, level="op", payload="tensors", optimizer=opt) as cap:
        step()
        cap.step()
    cap_s = time.perf_counter() - t0
    with open_trace(path) as tr:
        t0 = time.perf_counter()
        r = check_precision(tr)
        check_s = time.perf_counter() - t0
    errs = [o.err for o in r.ops if o.err is not None]
    out = {"model": name, "plain_s": plain, "capture_s": cap_s, "check_s": check_s,
           "ops": len(r.ops), "measured": len(errs), "flagged": len(r.flagged),
           "worst_ulp": max(errs), "trace_mb": _size(path) / 2**20, "counts": r.counts()}
    shutil.rmtree(path)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--image", type=int, default=64, help="ResNet input side (default 64)")
    ap.add_argument("--batch", type=int, default=4)
    a = ap.parse_args()
    torch.manual_seed(0)
    work = Path(tempfile.mkdtemp(prefix="np-prec-"))
    try:
        for name, model, x in (
            ("resnet18", _resnet18(), torch.randn(a.batch, 3, a.image, a.image)),
            ("encoder2x128", _encoder(), torch.randn(a.batch, 16, 128)),
        ):
            m = measure(name, model, x, work)
            print(f"{m['model']}: plain step {m['plain_s']:.3f} s; capture (op, tensors) "
                  f"{m['capture_s']:.2f} s, {m['ops']} op calls, {m['trace_mb']:.1f} MiB; "
                  f"precision {m['check_s']:.2f} s ({m['check_s'] / m['plain_s']:.0f}x the "
                  f"step), {m['measured']} measured, {m['flagged']} flagged, worst "
                  f"{m['worst_ulp']:.3g} ULP; {m['counts']}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
