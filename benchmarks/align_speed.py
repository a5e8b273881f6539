"""Alignment speed on synthetic traces of 1k, 10k and 100k ops per side.

The two traces look like a PyTorch run and its MindSpore port of a deep ResNet-like network:
repeated residual blocks (conv, batch norm, relu, add; a downsample path in the first block of
each stage), different module names (``downsample`` / ``down_sample``, ``fc`` / ``classifier``),
different native op names (``aten.convolution.default`` / ``Conv2D``), a linear head that the
candidate runs as ``MatMul`` + ``BiasAdd`` (N:M), a layer norm the candidate decomposes into nine
ops (N:M), a few ops inserted or deleted, and statistics that differ by ~0.1 % (float noise).
Traces hold statistics only, written with ``TraceWriter`` into a temporary directory. Only
``align_traces`` is timed (reading the index included, writing excluded); the split columns time
its two halves again: reading both call tables from the indexes (``read``) and aligning them
(``align``). ``align_traces`` reads only what alignment looks at; the calls' records are read from
the traces the first time any of them is asked for, which the last column times (``records``:
every matched call's records; the comparison engine makes only those of N:M groups and odd
calls, pairing the rest as rows of the scans -- not part of the budget).

After writing, each trace gets its columnar index copy (``netparity.trace.columnar.compact``,
what a capture does when it closes; timed in the ``compact s`` column, not part of any other);
``--sqlite`` leaves it out, so every read goes through SQLite (traces of older netparity).

Run:  PYTHONPATH=src python benchmarks/align_speed.py [--sizes 1000,10000,100000] [--flat]
      [--compare] [--cli] [--sqlite]
(``--flat`` also times traces without module records: one 100k-op sequence; ``--compare`` also
times the whole ``netparity.compare(level="op")`` a user runs on the same traces; ``--cli`` the
end-to-end ``netparity compare --level op -q`` command in a fresh process, report included:
wall time, CPU time (user + system, steadier than wall time on a shared machine) and the
command's peak resident memory.)
The 1M-ops-per-side case: ``--sizes 1000000`` (writing the two traces takes ~8 minutes here).
The ``peak MiB`` column is this process's peak resident memory so far, writing the traces
included (sizes run in ascending order, so it is the peak of the largest size up to that row).
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import netparity
from netparity.align import Mapping, align_traces
from netparity.align.core import align_tables
from netparity.align.table import Pools
from netparity.align.tableread import read_table
from netparity.align.vocab import canonical_op
from netparity.trace import Record, TraceWriter, open_trace
from netparity.trace.columnar import compact

BUDGET_S = 5.0
OPS_PER_STAGE = 61  # reference ops of one stage below: 8 blocks of 7, a downsample, a head of 3

NAT = {
    "torch": {"conv": "aten.convolution.default", "bn": "aten._native_batch_norm_legit.default",
              "relu": "aten.relu.default", "add": "aten.add.Tensor", "mean": "aten.mean.dim",
              "linear": "aten.addmm.default", "ln": "aten.native_layer_norm.default",
              "Conv": "torch.nn.Conv2d", "BN": "torch.nn.BatchNorm2d", "ReLU": "torch.nn.ReLU",
              "Block": "Bottleneck", "Seq": "torch.nn.Sequential", "Linear": "torch.nn.Linear",
              "LN": "torch.nn.LayerNorm", "down": "downsample", "fc": "fc"},
    "mindspore": {"conv": "Conv2D", "bn": "BatchNorm", "relu": "ReLU", "add": "Add",
                  "mean": "ReduceMean", "linear": "MatMul", "ln": "LayerNorm",
                  "Conv": "mindspore.nn.Conv2d", "BN": "mindspore.nn.BatchNorm2d",
                  "ReLU": "mindspore.nn.ReLU", "Block": "ResidualBlock",
                  "Seq": "mindspore.nn.SequentialCell", "Linear": "mindspore.nn.Dense",
                  "LN": "mindspore.nn.LayerNorm", "down": "down_sample", "fc": "classifier"},
}


class T:
    """A synthetic tensor: shape and statistics."""

    __slots__ = ("shape", "stats", "tid")
    _n = 0

    def __init__(self, shape: tuple[int, ...], mean: float, std: float):
        T._n += 1
        self.tid = T._n
        n = math.prod(shape)
        self.shape = shape
        self.stats = {"min": mean - 3 * std, "max": mean + 3 * std, "mean": mean, "std": std,
                      "norm": math.sqrt(n * (std * std + mean * mean)), "abs_sum": n * (abs(mean) + std),
                      "nan": 0, "posinf": 0, "neginf": 0, "zeros": 0, "fp16_overflow": 0}


class Gen:
    """Writes the same synthetic network as one framework would capture it."""

    def __init__(self, path: Path, fw: str, ops: int, flat: bool, seed: int = 0, steps: int = 1):
        self.fw, self.nat, self.flat = fw, NAT[fw], flat
        self.steps, self.step = steps, 0  # ``ops`` per step; steps 0 .. steps-1
        self.w = TraceWriter(path, manifest={"framework": fw})
        self.rng = np.random.default_rng(seed)  # same seed both sides: same network
        self.noise = np.random.default_rng(1000 + (fw == "mindspore"))
        self.target = ops
        self.nops = 0
        self.stack: list[list] = []
        self.calls: dict[str, int] = {}

    def _recs(self, ev: int, base: dict, role: str, ts: list[T]) -> None:
        for k, t in enumerate(ts):
            st = t.stats
            if self.fw == "mindspore":  # float noise of another framework
                f = 1 + 1e-3 * float(self.noise.standard_normal())
                st = {k2: (v * f if k2 in ("min", "max", "mean", "std", "norm", "abs_sum") else v)
                      for k2, v in st.items()}
            self.w.add(Record(event=ev, role=role, arg=str(k) if len(ts) > 1 else "",
                              dtype="float32", shape=t.shape, stats=st, **base))

    def enter(self, path: str, cls: str, x: T) -> list:
        if self.flat:
            return []
        call = self.calls.get(path, 0)
        self.calls[path] = call + 1
        ev = self.w.next_event()
        base = {"kind": "module", "module": path, "op": canonical_op(self.fw, cls), "native": cls,
                "call": call, "step": self.step}
        self._recs(ev, base, "input", [x])
        h = [path, call, 0, ev, base]
        self.stack.append(h)
        return h

    def exit(self, h: list, y: T) -> None:
        if self.flat:
            return
        self.stack.pop()
        self._recs(h[3], h[4], "output", [y])

    def op(self, native: str, ins: list[T], out: T) -> T:
        if self.stack:
            h = self.stack[-1]
            module, mcall, n = h[0], h[1], h[2]
            h[2] += 1
        else:
            module, mcall, n = "", 0, 0
        ev = self.w.next_event()
        base = {"kind": "op", "module": module, "module_call": mcall, "call": n,
                "op": canonical_op(self.fw, native), "native": native, "step": self.step}
        self._recs(ev, base, "input", ins)
        self._recs(ev, base, "output", [out])
        self.nops += 1
        return out

    def new(self, shape: tuple[int, ...], r: np.random.Generator | None = None) -> T:
        r = r or self.rng
        return T(shape, float(r.normal(0, 0.5)), float(r.uniform(0.2, 2.0)))

    def leaf(self, path: str, cls: str, native: str, x: T, shape: tuple[int, ...] | None = None,
             nparams: int = 1) -> T:
        h = self.enter(path, self.nat[cls], x)
        ws = [self.new((64, 64)) for _ in range(nparams)]
        y = self.op(native, [x, *ws], self.new(shape or x.shape))
        self.exit(h, y)
        return y

    def run(self) -> None:
        for step in range(self.steps):
            self.step = step
            self.calls.clear()  # module call numbers count within a step
            self._step()
        self.w.close()

    def _step(self) -> None:
        ms = self.fw == "mindspore"
        x = self.new((8, 64, 28, 28))
        # the number of stages follows the reference's op count so both sides run the same net
        stages = max(1, round(self.target / OPS_PER_STAGE))
        for stage in range(1, stages + 1):
            for b in range(8):
                p = f"layer{stage}.{b}"
                blk = self.enter(p, self.nat["Block"], x)
                idn = x
                y = self.leaf(f"{p}.conv1", "Conv", self.nat["conv"], x)
                y = self.leaf(f"{p}.bn1", "BN", self.nat["bn"], y, nparams=2)
                y = self.leaf(f"{p}.relu", "ReLU", self.nat["relu"], y, nparams=0)
                y = self.leaf(f"{p}.conv2", "Conv", self.nat["conv"], y)
                y = self.leaf(f"{p}.bn2", "BN", self.nat["bn"], y, nparams=2)
                if b == 0:
                    d = self.enter(f"{p}.{self.nat['down']}", self.nat["Seq"], idn)
                    names = ("conv", "bn") if ms else ("0", "1")
                    z = self.leaf(f"{p}.{self.nat['down']}.{names[0]}", "Conv", self.nat["conv"], idn)
                    z = self.leaf(f"{p}.{self.nat['down']}.{names[1]}", "BN", self.nat["bn"], z, nparams=2)
                    self.exit(d, z)
                    idn = z
                s = self.op(self.nat["add"], [y, idn], self.new(y.shape))
                u = self.rng.random()  # one draw on both sides keeps the networks in step
                if ms and u < 0.02:  # an extra cast only the port does
                    self.op("Cast", [s], self.new(s.shape, self.noise))
                elif not ms and 0.02 <= u < 0.04:  # an op only the reference runs
                    self.op("aten.clone.default", [s], self.new(s.shape, self.noise))
                x = self.op(self.nat["relu"], [s], self.new(s.shape))
                self.exit(blk, x)
            # a head per stage: pooling, layer norm (decomposed in the port), linear (N:M)
            pooled = self.op(self.nat["mean"], [x], self.new((8, 64)))
            h = self.enter(f"head{stage}.norm", self.nat["LN"], pooled)
            g, be = self.new((64,)), self.new((64,))
            normed = self.new((8, 64))
            if ms:
                t = [self.new((8, 1)), self.new((8, 64)), self.new((8, 64)), self.new((8, 1)),
                     self.new((8, 1)), self.new((8, 1)), self.new((8, 64)), self.new((8, 64))]
                self.op("ReduceMean", [pooled], t[0])
                self.op("Sub", [pooled, t[0]], t[1])
                self.op("Pow", [t[1]], t[2])
                self.op("ReduceMean", [t[2]], t[3])
                self.op("Add", [t[3]], t[4])
                self.op("Rsqrt", [t[4]], t[5])
                self.op("Mul", [t[1], t[5]], t[6])
                self.op("Mul", [t[6], g], t[7])
                self.op("Add", [t[7], be], normed)
            else:
                for _ in range(8):
                    self.new((1,))  # keep generators in step with the decomposition
                self.op(self.nat["ln"], [pooled, g, be], normed)
            self.exit(h, normed)
            h = self.enter(f"head{stage}.{self.nat['fc']}", self.nat["Linear"], normed)
            wt, bias = self.new((10, 64)), self.new((10,))
            mm, out = self.new((8, 10)), self.new((8, 10))
            if ms:
                self.op("MatMul", [normed, wt], mm)
                self.op("BiasAdd", [mm, bias], out)
            else:
                # aten.addmm's own argument order: the bias first, x second
                self.op(self.nat["linear"], [bias, normed, wt], out)
            self.exit(h, out)
            x = self.new((8, 64, 28, 28))


def bench(size: int, flat: bool, tmp: Path, compare_too: bool = False,
          cli_too: bool = False, columnar: bool = True) -> dict:
    ref, cand = tmp / f"ref{size}{flat}", tmp / f"cand{size}{flat}"
    t0 = time.perf_counter()
    g1 = Gen(ref, "torch", size, flat)
    g1.run()
    g2 = Gen(cand, "mindspore", size, flat)
    g2.run()
    t_write = time.perf_counter() - t0
    t_compact = None
    if columnar:  # what a capture does when it closes (netparity.trace.columnar)
        t0 = time.perf_counter()
        compact(ref)
        compact(cand)
        t_compact = time.perf_counter() - t0
    tr, tc = open_trace(ref), open_trace(cand)
    t0 = time.perf_counter()
    al = align_traces(tr, tc, level="op")
    t_total = time.perf_counter() - t0
    # the records of every matched call, read on first access (call by call, then the rest
    # of each kind at once; the comparison engine now pairs most calls from the rows)
    t0 = time.perf_counter()
    for m in al.matches:
        assert m.ref[0].inputs is not None and m.cand[0].inputs is not None
    t_records = time.perf_counter() - t0
    # the same work split in two: reading the call tables from the indexes, then aligning them
    gc.disable()
    t0 = time.perf_counter()
    pools = Pools()
    rt, ct = read_table(tr, pools), read_table(tc, pools)
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    align_tables(rt, ct, level="op", mapping=Mapping(), cross_framework=True, pools=pools)
    t_align = time.perf_counter() - t0
    gc.enable()
    s = al.summary()
    t_cli = cli_cpu = cli_rss = None
    if cli_too:  # what a user runs: a fresh process, terminal report included
        t0 = time.perf_counter()
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-m", "netparity", "compare", str(ref), str(cand),
                        "--level", "op", "-q"], check=False, env=dict(os.environ),
                       stdout=subprocess.DEVNULL)
        t_cli = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cli_cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        cli_rss = r1.ru_maxrss / 1024  # the largest child so far (the CLI runs are the children)
    t_compare = None
    if compare_too:  # the whole comparison a user runs on these traces (statistics basis)
        t0 = time.perf_counter()
        netparity.compare(str(ref), str(cand), level="op")
        t_compare = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"compact_s": t_compact, "cli_s": t_cli, "cli_cpu_s": cli_cpu, "cli_rss_mib": cli_rss, "peak_mib": peak, "compare_s": t_compare, "size": size, "ref_ops": g1.nops, "cand_ops": g2.nops, "write_s": t_write,
            "total_s": t_total, "load_s": t_load, "align_s": t_align, "records_s": t_records,
            "records": rt.n_records, **s}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--flat", action="store_true", help="also time traces without module records")
    ap.add_argument("--compare", action="store_true",
                    help="also time netparity.compare(level='op') on the traces (last column)")
    ap.add_argument("--cli", action="store_true",
                    help="also time the netparity compare command (--level op) end to end")
    ap.add_argument("--sqlite", action="store_true",
                    help="do not write the columnar index copies (time the SQLite read path; "
                         "what traces of netparity before the copies, or open captures, get)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{'ops/side':>9} {'modules':>8} {'records':>8} {'total s':>8} {'= read':>7} "
          f"{'+ align':>8} {'matched':>8} {'groups':>7} {'unm ref':>8} {'unm cand':>8} "
          f"{'records s':>9} {'peak MiB':>8}" + (f" {'compare s':>9}" if args.compare else "")
          + (f" {'cli s':>7} {'cli cpu':>7} {'cli MiB':>7}" if args.cli else "")
          + ("" if args.sqlite else f" {'compact s':>9}"))
    last = None
    with tempfile.TemporaryDirectory() as d:
        for flat in [False, True] if args.flat else [False]:
            for size in sizes:
                r = bench(size, flat, Path(d), args.compare, args.cli, not args.sqlite)
                print(f"{r['ref_ops']:>9} {'no' if flat else 'yes':>8} {r['records']:>8} "
                      f"{r['total_s']:>8.2f} {r['load_s']:>7.2f} {r['align_s']:>8.2f} "
                      f"{r['matched']:>8} {r['groups']:>7} {r['unmatched_ref']:>8} "
                      f"{r['unmatched_cand']:>8} {r['records_s']:>9.2f} {r['peak_mib']:>8.0f}"
                      + (f" {r['compare_s']:>9.2f}" if args.compare else "")
                      + (f" {r['cli_s']:>7.2f} {r['cli_cpu_s']:>7.2f} {r['cli_rss_mib']:>7.0f}"
                         if args.cli else "")
                      + ("" if args.sqlite else f" {r['compact_s']:>9.2f}"), flush=True)
                if not flat:
                    last = r
    if last is not None:
        print(f"largest ({last['ref_ops']} ops/side, op level): align_traces {last['total_s']:.2f} s "
              f"= {last['total_s'] / BUDGET_S:.2f} x the {BUDGET_S:.0f} s budget "
              f"(reading the call tables {last['load_s']:.2f} s, aligning {last['align_s']:.2f} s); "
              f"the calls' records, read on first access: {last['records_s']:.2f} s more")
    return 0


if __name__ == "__main__":
    sys.exit(main())
