"""All-reduce bucket advice: when each gradient is ready, what a bucket costs, the best split.

Data-parallel training reduces gradients in buckets while backward still runs; the part that
does not overlap is the iteration **tail** (the reference's ``all_reduce_fusion_config``
advice: ResNet-50, 160 weights, split ``[85, 160]``). From a run timed by ``netparity.profile``
on a ``DistributedDataParallel`` model this module takes

* the gradient-ready time of every parameter (``grads`` records: the median over the steady
  steps, seconds after the backward began) and its size in bytes (manifest ``param_bytes``);
* a bandwidth model ``seconds = latency + bytes / bandwidth`` fitted (least squares, relative
  errors) on measured all-reduces: the service times of the run's own buckets (``allreduce``
  records: each from when the channel was free to when it came back, so with the run's
  contention), when there are at least 4 of two sizes or more; else the ``comm_probe``
  records (``prof.probe_comm()``: plain all-reduces on an idle channel);

and simulates a bucket plan: buckets are reduced one after another (one communication channel),
each starting when its last gradient is ready and the previous bucket is done; the tail is the
last bucket's end minus the last gradient's ready time. It proposes

* the split that minimises the tail (exact dynamic programme over split points in ready order),
  written as MindSpore ``all_reduce_fusion_config`` indices (upper bounds in parameter order)
  and as DDP ``bucket_cap_mb_list`` (bytes per bucket, in MiB);
* the best uniform DDP ``bucket_cap_mb`` (DDP's own greedy assignment, simulated for each
  candidate cap), against DDP's default (first bucket 1 MiB, then 25 MiB);

and predicts the tail of the buckets the run actually used, to set beside the measured one.

Example:
    >>> bw = Bandwidth(1e-4, 1e9, [], "given")
    >>> ready = [0.0, 0.01, 0.02, 0.03]
    >>> sizes = [4_000_000] * 4
    >>> round(simulate(ready, sizes, [[0, 1, 2, 3]], bw), 4)   # one bucket at the end
    0.0161
    >>> best = best_split(ready, sizes, bw)
    >>> best, round(simulate(ready, sizes, best, bw), 4)
    ([[0, 1], [2], [3]], 0.0041)
    >>> bw.latency = 0.02   # each all-reduce costs more than the gaps: fewer, larger buckets
    >>> best_split(ready, sizes, bw)
    [[0], [1, 2, 3]]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from netparity.trace import Trace
from netparity.trace.schema import timing_extra

__all__ = ["DDP_DEFAULT_CAP", "DDP_FIRST_CAP", "Bandwidth", "BucketAdvice", "advise",
           "best_cap", "best_split", "ddp_buckets", "fit_bandwidth", "fusion_config",
           "simulate"]

MIB = 1 << 20
DDP_FIRST_CAP = 1 * MIB  # DDP's first bucket when bucket_cap_mb is left at its default
DDP_DEFAULT_CAP = 25 * MIB
TAIL_SLACK = 0.02  # a split within 2 % of the least tail counts as as good (fewer buckets win)


@dataclass
class Bandwidth:
    """``seconds = latency + bytes / bandwidth`` (bytes per second), and what it was fitted on."""

    latency: float
    bandwidth: float
    points: list[tuple[int, float]]
    source: str

    def cost(self, nbytes: float) -> float:
        return self.latency + nbytes / self.bandwidth

    def to_json(self) -> dict[str, Any]:
        return {"latency": self.latency, "bandwidth": self.bandwidth, "source": self.source,
                "points": [list(p) for p in self.points]}


def fit_bandwidth(points: list[tuple[int, float]], source: str = "probe") -> Bandwidth | None:
    """Least-squares ``latency + bytes / bandwidth`` over the median time of each size
    (relative errors; through the origin when the line would have a negative latency or
    slope); ``None`` without two distinct sizes.

    Example:
        >>> b = fit_bandwidth([(0, 1e-4), (1_000_000, 1.1e-3), (2_000_000, 2.1e-3)])
        >>> round(b.latency * 1e6), round(b.bandwidth / 1e9, 3)
        (100, 1.0)
    """
    pts = [(int(b), float(s)) for b, s in points if s > 0]
    if len({b for b, _ in pts}) < 2:
        return None
    by: dict[int, list[float]] = {}
    for nb, sec in pts:  # one point per size, its median: a noisy repeat does not tilt the fit
        by.setdefault(nb, []).append(sec)
    x = np.array(sorted(by), dtype=float)
    y = np.array([float(np.median(by[k])) for k in sorted(by)], dtype=float)
    # relative errors (weights 1/y): the small sizes set the latency, the large the bandwidth,
    # instead of the largest transfer's noise deciding both
    slope, icpt = np.polyfit(x, y, 1, w=1.0 / y)
    if icpt < 0 or slope <= 0:
        # a negative latency is noise, and so is a time that falls with the size (reductions
        # slowed by whatever else the machine does): fit through the origin instead
        icpt, slope = 0.0, float(np.sum(x / y) / np.sum(x * x / (y * y)))
    if not slope > 0:
        return None
    return Bandwidth(float(icpt), float(1.0 / slope), pts, source)


def simulate(ready: list[float], sizes: list[int], buckets: list[list[int]],
             bw: Bandwidth) -> float:
    """The tail (seconds after the last gradient is ready) of reducing ``buckets`` (lists of
    positions into ``ready``/``sizes``) one after another, each as soon as its gradients are
    ready and the previous bucket is done."""
    end = float("-inf")
    for b in sorted(buckets, key=lambda b: max(ready[i] for i in b)):
        start = max(max(ready[i] for i in b), end)
        end = start + bw.cost(sum(sizes[i] for i in b))
    return max(end - max(ready), 0.0) if buckets else 0.0


def best_split(ready: list[float], sizes: list[int], bw: Bandwidth,
               slack: float = TAIL_SLACK) -> list[list[int]]:
    """Contiguous buckets in ready order (``ready`` ascending) with the least tail, and among
    the splits within ``slack`` of it (relative; at least 0.1 ms) the fewest buckets.

    Dynamic programme over split points, one layer per bucket count: ``end[k][j]``, the
    earliest time the first ``j`` gradients are reduced in ``k`` buckets (a prefix's earliest
    finish is all its future needs); the first count whose tail is within the slack of the
    unconstrained optimum wins."""
    n = len(ready)
    if n == 0:
        return []
    r = np.asarray(ready, dtype=float)
    pre = np.concatenate([[0.0], np.cumsum(np.asarray(sizes, dtype=float))])
    # unconstrained optimum (any number of buckets)
    opt = np.full(n + 1, np.inf)
    opt[0] = -np.inf
    for j in range(1, n + 1):
        opt[j] = float(np.min(np.maximum(r[j - 1], opt[:j]) + bw.latency
                              + (pre[j] - pre[:j]) / bw.bandwidth))
    target = opt[n] - r[-1]
    target += max(slack * target, 1e-4)
    prev = np.full(n + 1, np.inf)
    prev[0] = -np.inf
    cuts: list[np.ndarray] = []
    for _ in range(n):
        cur = np.full(n + 1, np.inf)
        arg = np.zeros(n + 1, dtype=int)
        for j in range(1, n + 1):
            e = np.maximum(r[j - 1], prev[:j]) + bw.latency + (pre[j] - pre[:j]) / bw.bandwidth
            arg[j] = int(np.argmin(e))
            cur[j] = e[arg[j]]
        cuts.append(arg)
        prev = cur
        if cur[n] - r[-1] <= target:
            break
    out, j = [], n
    for arg in reversed(cuts):
        i = int(arg[j])
        out.append(list(range(i, j)))
        j = i
    return out[::-1]


def proposed_split(ready: list[float], sizes: list[int], bw: Bandwidth) -> list[list[int]]:
    """:func:`best_split`, unless DDP's default buckets (also contiguous in ready order) have
    a shorter simulated tail: the fewest buckets within the slack of the optimum can still
    lose to the default, and advice must never be worse than changing nothing."""
    split = best_split(ready, sizes, bw)
    default = ddp_buckets(sizes, DDP_DEFAULT_CAP, DDP_FIRST_CAP)
    return default if simulate(ready, sizes, split, bw) > simulate(ready, sizes, default, bw) \
        else split


def ddp_buckets(sizes: list[int], cap: int, first_cap: int | None = None,
                caps: list[int] | None = None) -> list[list[int]]:
    """DDP's greedy assignment in gradient-ready order (as its reducer rebuilds the buckets
    after the first iteration): add parameters until the bucket holds at least its limit
    (``first_cap`` for the first, ``cap`` after; or the per-bucket ``caps`` list)."""
    limits = list(caps) if caps else [first_cap if first_cap is not None else cap, cap]
    out: list[list[int]] = []
    cur: list[int] = []
    size = 0
    for i, b in enumerate(sizes):
        cur.append(i)
        size += b
        if size >= limits[min(len(out), len(limits) - 1)]:
            out.append(cur)
            cur, size = [], 0
    if cur:
        out.append(cur)
    return out


def best_cap(ready: list[float], sizes: list[int], bw: Bandwidth, candidates: int = 400,
             slack: float = TAIL_SLACK) -> tuple[int, float]:
    """The uniform DDP ``bucket_cap_mb`` (in bytes; a non-default cap applies to the first
    bucket too) with the least simulated tail; among tails within ``slack`` of it (at least
    0.1 ms) the largest cap (fewer, larger all-reduces). Returns (cap, its tail)."""
    cums = sorted(set(np.cumsum(sizes).astype(int).tolist()))
    if len(cums) > candidates:
        cums = [cums[int(k)] for k in np.linspace(0, len(cums) - 1, candidates)]
    tails = [(cap, simulate(ready, sizes, ddp_buckets(sizes, cap), bw)) for cap in cums]
    least = min(t for _, t in tails)
    ok = least + max(slack * least, 1e-4)
    return max((c, t) for c, t in tails if t <= ok)  # the largest cap within the slack


def fusion_config(buckets: list[list[int]]) -> tuple[list[int], bool]:
    """MindSpore ``all_reduce_fusion_config``: the buckets' upper bounds in parameter order
    (``[85, 161]``: parameters 0-84 in one all-reduce, 85-160 in another), and whether every
    bucket is a contiguous range of parameters (else the indices only approximate the split).

    Example:
        >>> fusion_config([[160, 159, 158], [157, 156], [155, 154, 0, 1]])
        ([156, 158, 161], False)
    """
    ranges = sorted((min(b), max(b)) for b in buckets if b)
    contiguous = all(hi - lo + 1 == len(b) for b, (lo, hi) in
                     zip(sorted((b for b in buckets if b), key=min), ranges))
    return [hi + 1 for _, hi in ranges], contiguous


@dataclass
class BucketAdvice:
    """The measured inputs, the prediction for the buckets the run used, and the proposals.

    Positions are parameter indices (``model.parameters()`` order); times are seconds per
    steady step. ``proposed``: the least-tail split (``buckets``, ``all_reduce_fusion_config``,
    ``bucket_cap_mb_list``, ``predicted_tail``); ``ddp``: the best uniform ``bucket_cap_mb``
    (``None`` when none beats DDP's default) and the default, each with its predicted tail; ``measured``: the run's buckets, their
    reduction seconds (sum) and the exposed tail (the ``comm`` phase), with ``predicted_tail``
    for the same buckets (and ``predicted_tail_probe``, under the idle probe's model).
    """

    params: int
    total_bytes: int
    backward: float
    bandwidth: Bandwidth
    measured: dict[str, Any]
    proposed: dict[str, Any]
    ddp: dict[str, Any]
    order: list[int] = field(repr=False, default_factory=list)  # parameters, ready order
    ready: list[float] = field(repr=False, default_factory=list)  # their ready times
    sizes: list[int] = field(repr=False, default_factory=list)  # their bytes

    def to_json(self) -> dict[str, Any]:
        return {"params": self.params, "total_bytes": self.total_bytes,
                "backward": self.backward, "bandwidth": self.bandwidth.to_json(),
                "measured": self.measured, "proposed": self.proposed, "ddp": self.ddp,
                "ready_order": self.order, "ready": self.ready, "sizes": self.sizes}

    def advice(self) -> str:
        p, d = self.proposed, self.ddp
        cap = (f"DDP bucket_cap_mb={d['bucket_cap_mb']:.3g} (predicted tail "
               f"{d['predicted_tail'] * 1e3:.1f} ms; default 25 MiB: "
               f"{d['default_tail'] * 1e3:.1f} ms)" if d["bucket_cap_mb"] is not None else
               f"no uniform DDP bucket_cap_mb beats the default (predicted tail "
               f"{d['default_tail'] * 1e3:.1f} ms)")
        return (f"split the gradient all-reduce so it overlaps backward: {cap}, or per "
                f"bucket bucket_cap_mb_list="
                f"{[round(x, 3) for x in p['bucket_cap_mb_list']]} "
                f"({p['predicted_tail'] * 1e3:.1f} ms); MindSpore "
                f"all_reduce_fusion_config={p['all_reduce_fusion_config']}")


def _extra(extras: Any, i: int, op: str) -> dict[str, Any]:
    return timing_extra(extras[i], op)


def advise(tr: Trace, rank: int, steady: set[int], starts: dict[int, float],
           comm_phase: float) -> BucketAdvice | None:
    """Bucket advice from one rank's ``grads``, ``allreduce`` and ``comm_probe`` records;
    ``starts``: each step's backward start (the ``backward`` phase's ``t``); ``None`` without
    gradient-ready times, parameter sizes or a bandwidth model."""
    sizes_all = [int(b) for b in tr.manifest.get("param_bytes") or []]
    if not sizes_all:
        return None
    c = tr.scan(["step", "op", "call", "extra"], rank=rank, kind="timing")
    ops = c["op"].objects()
    steps = c["step"].tolist()
    calls = c["call"].tolist()
    extras = c["extra"].objects()
    ready: dict[int, list[float]] = {}
    buckets: dict[int, list[tuple[int, float, float, int, list[int]]]] = {}
    probe: list[tuple[int, float]] = []
    for k, op in enumerate(ops):
        s = int(steps[k])
        if op == "grads" and s in steady and s in starts:
            for i, t in _extra(extras, k, op).get("ready", []):
                ready.setdefault(int(i), []).append(float(t) - starts[s])
        elif op == "allreduce" and s in steady:
            e = _extra(extras, k, op)
            buckets.setdefault(s, []).append((int(calls[k]), float(e["t"]),
                                              float(e["t"]) + float(e["d"]),
                                              int(e.get("bytes", 0)),
                                              [int(x) for x in e.get("params", [])]))
        elif op == "comm_probe":
            e = _extra(extras, k, op)
            probe += list(zip(e.get("bytes", []), e.get("seconds", [])))
    if not ready:
        return None
    service: list[tuple[int, float]] = []
    for bl in buckets.values():  # each bucket's own time: from when the channel was free
        end = float("-inf")
        for _, t0, t1, nb, _ in sorted(bl, key=lambda b: b[2]):
            service.append((nb, t1 - max(t0, end)))
            end = t1
    # the run's own buckets, reduced while backward computes (contention included), are the
    # model when they span two sizes; the idle probe otherwise (and as a second opinion)
    bw_probe = fit_bandwidth(probe, "probe") if probe else None
    bw = fit_bandwidth(service, "buckets") if len(service) >= 4 else None
    bw = bw or bw_probe
    if bw is None:
        return None
    order = sorted(ready, key=lambda i: float(np.median(ready[i])))
    rt = [float(np.median(ready[i])) for i in order]
    sz = [sizes_all[i] if i < len(sizes_all) else 0 for i in order]
    pos = {p: k for k, p in enumerate(order)}

    default_tail = simulate(rt, sz, ddp_buckets(sz, DDP_DEFAULT_CAP, DDP_FIRST_CAP), bw)
    split = proposed_split(rt, sz, bw)
    split_params = [[order[k] for k in b] for b in split]
    cfg, contiguous = fusion_config(split_params)
    cap, cap_tail = best_cap(rt, sz, bw)
    measured: dict[str, Any] = {"tail": comm_phase, "buckets": [], "reduce_seconds": None,
                                "predicted_tail": None, "predicted_tail_probe": None}
    if buckets:
        last = buckets[max(buckets)]
        used = [[pos[p] for p in b[4] if p in pos] for b in sorted(last, key=lambda b: b[0])]
        measured.update(
            buckets=[{"bytes": b[3], "params": len(b[4])} for b in sorted(last,
                                                                       key=lambda b: b[0])],
            reduce_seconds=float(np.median([sum(b[2] - b[1] for b in bl)
                                            for bl in buckets.values()])),
            service=[[nb, s] for nb, s in service],
            predicted_tail=simulate(rt, sz, [u for u in used if u], bw),
            predicted_tail_probe=simulate(rt, sz, [u for u in used if u], bw_probe)
            if bw_probe is not None else None)
    return BucketAdvice(
        params=len(order), total_bytes=int(sum(sz)), backward=max(rt) if rt else 0.0,
        bandwidth=bw, measured=measured,
        proposed={"buckets": split_params, "bucket_bytes": [sum(sz[k] for k in b)
                                                            for b in split],
                  "bucket_cap_mb_list": [sum(sz[k] for k in b) / MIB for b in split],
                  "all_reduce_fusion_config": cfg, "contiguous": contiguous,
                  "predicted_tail": simulate(rt, sz, split, bw)},
        # a uniform cap that does not beat DDP's default (small first bucket) keeps it
        ddp={"bucket_cap_mb": cap / MIB, "buckets": len(ddp_buckets(sz, cap)),
             "predicted_tail": cap_tail, "default_tail": default_tail} if cap_tail < default_tail
        else {"bucket_cap_mb": None, "buckets": len(ddp_buckets(sz, DDP_DEFAULT_CAP,
                                                                DDP_FIRST_CAP)),
              "predicted_tail": default_tail, "default_tail": default_tail},
        order=order, ready=rt, sizes=sz)
