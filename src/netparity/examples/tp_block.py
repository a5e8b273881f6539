"""A transformer block with tensor parallelism 2 (gloo, CPU) against the same block unsharded.

Megatron-style: attention with column-parallel ``q``/``k``/``v`` (each rank holds half of the
heads) and a row-parallel output projection ``proj`` (all-reduced inside it, bias added after);
MLP with a column-parallel ``fc1``, a GELU on the sharded activation, and a row-parallel
``fc2``. Both runs start from the same weights (the full block, seeded; each rank slices its
shards from it), train one SGD step on the same batch, and are captured with tensors.

``ref``: one process, the block unsharded. ``tp``: two gloo processes; ``bug`` plants a mistake:

* ``bias``: rank 1's shard of ``mlp.fc1`` has a wrong bias;
* ``no-allreduce``: ``mlp.fc2``'s partial outputs are not all-reduced;
* ``twice``: ``mlp.fc2``'s all-reduced output is divided by the world size again.

``netparity.shard_layout`` records :data:`LAYOUT` in the TP trace, so
``netparity compare ref tp`` merges the ranks without ``--shards``::

    PYTHONPATH=src python -m netparity.examples.tp_block runs/tp [--bug bias]
    netparity compare runs/tp/ref runs/tp/tp
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from netparity.examples.ddp_buckets import _free_port

WORLD = 2
D, HEADS, HIDDEN, BATCH, SEQ = 32, 4, 64, 2, 8
BUGS = ("bias", "no-allreduce", "twice")
#: the block's sharding, as ``--shards`` reads it (YAML/JSON) and ``netparity.shard_layout``
LAYOUT: dict[str, Any] = {
    "attn.[qkv]": {"parallel": "column", "dim": -1},
    "attn.proj": {"parallel": "row", "dim": -1},
    "mlp.fc1": {"parallel": "column", "dim": -1},
    "mlp.act": {"parallel": "split", "dim": -1},
    "mlp.fc2": {"parallel": "row", "dim": -1},
}


def _world() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def _all_reduce(x: torch.Tensor) -> torch.Tensor:
    if _world() > 1:
        x = x.clone()
        dist.all_reduce(x)
    return x


class _CopyToTP(torch.autograd.Function):
    """Megatron's ``f``: identity forward, all-reduce of the input's gradient backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x

    backward = staticmethod(lambda ctx, g: _all_reduce(g))


class _ReduceFromTP(torch.autograd.Function):
    """Megatron's ``g``: all-reduce forward, identity backward."""

    forward = staticmethod(lambda ctx, x: _all_reduce(x))

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g


class ColumnLinear(torch.nn.Linear):
    """A Linear holding a slice of the output features (the full one when unsharded)."""


class RowLinear(torch.nn.Module):
    """A Linear holding a slice of the input features; partial outputs all-reduced, then the
    (replicated) bias added."""

    def __init__(self, fin: int, fout: int, bug: str | None = None) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(fout, fin))
        self.bias = torch.nn.Parameter(torch.empty(fout))
        self.bug = bug

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight)
        if self.bug != "no-allreduce":
            y = _ReduceFromTP.apply(y)
        if self.bug == "twice":
            y = y / _world()
        return y + self.bias


class Attention(torch.nn.Module):
    def __init__(self, tp: int, bug: str | None) -> None:
        super().__init__()
        self.heads = HEADS // tp
        self.q = ColumnLinear(D, D // tp)
        self.k = ColumnLinear(D, D // tp)
        self.v = ColumnLinear(D, D // tp)
        self.proj = RowLinear(D // tp, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _CopyToTP.apply(x)
        b, t, _ = x.shape

        def heads(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, self.heads, -1).transpose(1, 2)

        o = F.scaled_dot_product_attention(heads(self.q(x)), heads(self.k(x)), heads(self.v(x)),
                                           is_causal=True)
        return self.proj(o.transpose(1, 2).reshape(b, t, -1))


class MLP(torch.nn.Module):
    def __init__(self, tp: int, bug: str | None) -> None:
        super().__init__()
        self.fc1 = ColumnLinear(D, HIDDEN // tp)
        self.act = torch.nn.GELU()
        self.fc2 = RowLinear(HIDDEN // tp, D, bug=bug if bug in ("no-allreduce", "twice")
                             else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(_CopyToTP.apply(x))))


class Block(torch.nn.Module):
    def __init__(self, tp: int = 1, bug: str | None = None) -> None:
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(D)
        self.attn = Attention(tp, bug)
        self.ln2 = torch.nn.LayerNorm(D)
        self.mlp = MLP(tp, bug)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def full_state() -> dict[str, torch.Tensor]:
    """The unsharded block's weights (seeded: the same in every process)."""
    torch.manual_seed(0)
    m = Block()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                torch.nn.init.normal_(p, std=0.2)
            elif "ln" not in name:
                torch.nn.init.normal_(p, std=0.1)
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


def shard_state(full: dict[str, torch.Tensor], rank: int, world: int,
                bug: str | None = None) -> dict[str, torch.Tensor]:
    """Rank ``rank``'s slices of ``full`` (column: output rows; row: input columns)."""
    out = {}
    for k, v in full.items():
        mod = k.rpartition(".")[0]
        if mod in ("attn.q", "attn.k", "attn.v", "mlp.fc1"):
            v = v.chunk(world, 0)[rank]
        elif mod in ("attn.proj", "mlp.fc2") and v.dim() == 2:
            v = v.chunk(world, 1)[rank]
        out[k] = v.clone()
    if bug == "bias" and rank == 1:
        out["mlp.fc1.bias"] = out["mlp.fc1.bias"] + 0.5
    return out


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(BATCH, SEQ, D, generator=g), torch.randn(BATCH, SEQ, D, generator=g)


def train(model: torch.nn.Module, out: str | Path, *, record_layout: bool = False) -> None:
    """One captured SGD step of ``model`` on :func:`batch` (tensors stored)."""
    import netparity

    if record_layout:
        netparity.shard_layout(model, LAYOUT)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = batch()
    with netparity.capture(model, str(out), payload="tensors", optimizer=opt) as cap:
        loss = F.mse_loss(model(x), y)
        cap.record_loss(loss)
        loss.backward()
        opt.step()
        cap.step()


def _worker(rank: int, runs: list[tuple[str | None, str]], port: int,
            record_layout: bool) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        for bug, out in runs:  # one process group for every variant: one spawn
            m = Block(tp=WORLD, bug=bug)
            m.load_state_dict(shard_state(full_state(), rank, WORLD, bug))
            train(m, out, record_layout=record_layout)
    finally:
        dist.destroy_process_group()


def run_ref(out: str | Path) -> Path:
    """The unsharded block, one process, into the trace ``out``."""
    torch.set_num_threads(1)
    m = Block()
    m.load_state_dict(full_state())
    train(m, out)
    return Path(out)


def run_tp(out: str | Path, *, bug: str | None = None, record_layout: bool = True) -> Path:
    """The block with TP 2 on two gloo processes into the trace ``out`` (rank0/, rank1/)."""
    run_tps({bug: out}, record_layout=record_layout)
    return Path(out)


def run_tps(runs: dict[str | None, str | Path], *, record_layout: bool = True) -> None:
    """:func:`run_tp` of several variants ``{bug or None: trace}`` on the same two processes."""
    for bug in runs:
        if bug is not None and bug not in BUGS:
            raise ValueError(f"bug must be one of {BUGS}, not {bug!r}")
    mp.start_processes(_worker, args=([(b, str(o)) for b, o in runs.items()], _free_port(),
                                      record_layout),
                       nprocs=WORLD, join=True, start_method="spawn")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="folder for ref/ and tp/")
    ap.add_argument("--bug", choices=BUGS, default=None)
    a = ap.parse_args(argv)
    root = Path(a.out)
    run_ref(root / "ref")
    run_tp(root / "tp", bug=a.bug)
    print(f"netparity compare {root / 'ref'} {root / 'tp'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
