"""All-reduce bucket advice, checked on a real run: 2 processes, ``torch.distributed`` gloo, CPU.

``run``: trains a small MLP (six 1024x1024 layers, 24 MiB of gradients) under
``DistributedDataParallel`` for a few steps, timed by ``netparity.profile`` (gradient-ready
times, every all-reduce bucket), then probes the all-reduce bandwidth (``prof.probe_comm()``).
``check``: runs it with DDP's default buckets, asks ``netparity perf`` for the bucket advice,
runs again with the proposed ``bucket_cap_mb`` and with the proposed per-bucket
``bucket_cap_mb_list``, and sets the predicted tail (exposed communication) of each run beside
the measured one::

    PYTHONPATH=src python -m netparity.examples.ddp_buckets check runs/ddp [--steps 6]

Prints a table and writes ``runs/ddp/check.json``. Each process uses one torch thread.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2
WIDTH = 1024
LAYERS = 6
BATCH = 64


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, 10))


def _worker(rank: int, out: str, port: int, steps: int, cap_mb: float | None,
            cap_list: list[float] | None) -> None:
    import netparity

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        kw: dict[str, Any] = {}
        if cap_list:
            kw["bucket_cap_mb_list"] = cap_list
        elif cap_mb is not None:
            kw["bucket_cap_mb"] = cap_mb
        ddp = torch.nn.parallel.DistributedDataParallel(_model(), **kw)
        opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(rank)
        x = torch.randn(BATCH, WIDTH, generator=g)
        y = torch.randint(0, 10, (BATCH,), generator=g)
        crit = torch.nn.CrossEntropyLoss()
        with netparity.profile(ddp, out, optimizer=opt, modules=False) as prof:
            for _ in range(steps):
                crit(ddp(x), y).backward()
                opt.step()
                opt.zero_grad()
            prof.probe_comm([4 << 10, 64 << 10, 1 << 20, 4 << 20, 8 << 20], repeats=3)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(out: str | Path, *, steps: int = 6, bucket_cap_mb: float | None = None,
        bucket_cap_mb_list: list[float] | None = None) -> Path:
    """Train on 2 gloo processes into the trace ``out`` (one rank directory each)."""
    mp.start_processes(_worker, args=(str(out), _free_port(), steps, bucket_cap_mb,
                                      bucket_cap_mb_list), nprocs=WORLD, join=True,
                       start_method="spawn")
    return Path(out)


def check(root: str | Path, *, steps: int = 6) -> dict[str, Any]:
    """Default buckets -> advice -> the proposed buckets: predicted vs measured tail per run."""
    from netparity.analyzers.perf import analyze

    root = Path(root)
    rows: dict[str, Any] = {}
    base = analyze(run(root / "default", steps=steps))
    adv = base.allreduce
    if adv is None:
        raise SystemExit("no bucket advice from the default run")
    rows["default"] = _row(base)
    cap = adv.ddp["bucket_cap_mb"]
    rows["bucket_cap_mb"] = _row(analyze(run(root / "cap", steps=steps, bucket_cap_mb=cap)),
                                 predicted=adv.ddp["predicted_tail"], setting=cap)
    caps = adv.proposed["bucket_cap_mb_list"]
    rows["bucket_cap_mb_list"] = _row(
        analyze(run(root / "list", steps=steps, bucket_cap_mb_list=caps)),
        predicted=adv.proposed["predicted_tail"], setting=caps)
    out = {"advice": adv.to_json(), "runs": rows}
    (root / "check.json").write_text(json.dumps(out, indent=1))
    return out


def _row(r: Any, predicted: float | None = None, setting: Any = None) -> dict[str, Any]:
    a = r.allreduce
    st = r.steady
    return {"setting": setting, "buckets": len(a.measured["buckets"]) if a else None,
            "predicted_tail_before": predicted,
            "predicted_tail": a.measured["predicted_tail"] if a else None,
            "measured_tail": st["comm"], "step": st["step"], "backward": st["backward"],
            "bandwidth": a.bandwidth.to_json() if a else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("run", "check"))
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--bucket-cap-mb", type=float, default=None)
    a = ap.parse_args(argv)
    if a.what == "run":
        run(a.out, steps=a.steps, bucket_cap_mb=a.bucket_cap_mb)
        return 0
    res = check(a.out, steps=a.steps)
    adv = res["advice"]
    print(f"bandwidth ({adv['bandwidth']['source']}): "
          f"{adv['bandwidth']['latency'] * 1e6:.0f} us + "
          f"{adv['bandwidth']['bandwidth'] / 1e6:.0f} MB/s; backward "
          f"{adv['backward'] * 1e3:.1f} ms; fusion config "
          f"{adv['proposed']['all_reduce_fusion_config']}")
    print(f"{'run':20} {'setting':>22} {'buckets':>7} {'predicted tail':>15} "
          f"{'measured tail':>14} {'step':>9}")
    for k, r in res["runs"].items():
        pred = r["predicted_tail_before"] if r["predicted_tail_before"] is not None \
            else r["predicted_tail"]
        setting = r["setting"] if not isinstance(r["setting"], list) else \
            f"{len(r['setting'])} caps"
        print(f"{k:20} {str(setting if setting is not None else 'default'):>22} "
              f"{r['buckets']:>7} {pred * 1e3:>12.1f} ms {r['measured_tail'] * 1e3:>11.1f} ms "
              f"{r['step'] * 1e3:>6.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
