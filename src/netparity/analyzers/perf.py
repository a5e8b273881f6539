"""Performance of a run from its ``timing`` records: step breakdown, findings, side by side.

The method is the reference's performance chapter: split each step into its phases -- data wait
(the iteration gap), forward, backward, optimizer, the rest (host overhead, idle) -- separate
the first step (warm-up, graph compilation) from the steady state, and fix the phase that
dominates. :func:`analyze` reads one trace written by ``netparity.profile`` and returns a
:class:`PerfResult`; :func:`compare` puts two side by side (:class:`PerfComparison`) and lists
where the candidate spends more time than the reference, per phase and per module, costliest
first. :func:`chrome_trace` turns a result into Chrome trace-event JSON (Perfetto).

Findings (:class:`Finding`: ``kind``, ``where``, ``seconds`` per steady step, ``advice``):
``data-starvation`` (data wait > 10 % of the step; jitter correlated with the waits is quoted
as evidence, as the reference pairs the two), ``first-step`` (the first step > 2x the steady
median), ``hot-module`` (the module with the most self time), ``host-overhead`` (the unattributed
rest > 25 %), ``optimizer`` (> 30 %).

Example:
    >>> f = Finding("data-starvation", "data loader", 0.05, "raise num_workers")
    >>> f.to_json()["kind"]
    'data-starvation'
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from netparity.align.names import norm_path
from netparity.align.ownership import modules_by_ownership
from netparity.analyzers.allreduce import BucketAdvice, advise
from netparity.analyzers.kineto import OP_CLASSES, OpTime, is_kineto, summarize
from netparity.errors import MappingError, UsageError
from netparity.mapfile import Mapping, load_mapping
from netparity.trace import Trace, open_trace
from netparity.trace.schema import TIMING_PHASES, timing_extra

__all__ = ["PHASES", "Finding", "ModuleTime", "PerfComparison", "PerfResult", "analyze",
           "chrome_trace", "compare"]

#: the phases a step is split into (they add up to the step)
PHASES = tuple(p for p in TIMING_PHASES if p != "step")
DATA_SHARE = 0.10  # the data-wait share above which the pipeline is starving the model
FIRST_STEP_FACTOR = 2.0
OTHER_SHARE = 0.25
OPTIMIZER_SHARE = 0.30
CONVERSION_SHARE = 0.05  # conversion ops above this share of forward + backward
HOT_OP_SHARE = 0.10
COMM_SHARE = 0.05  # an exposed all-reduce tail above this share of the step is worth a split
HOT_SHARE = 0.10  # a hot module (forward or backward self time) of its phase
MEM_MODULE_SHARE = 0.25  # a module's forward memory rise of the whole forward's
DEVICE_IDLE_SHARE = 0.20  # the device idle above this share of the step (profiler traces)


@dataclass
class Finding:
    """One performance problem: what, where, how many seconds per steady step, what to do."""

    kind: str
    where: str
    seconds: float
    advice: str
    share: float | None = None  # of the steady step
    evidence: str = ""
    bytes: int | None = None  # memory findings: the bytes in question

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ModuleTime:
    """A module's forward time per steady step (median over steps): total, self, calls; its
    backward time (PyTorch light mode: from the gradient reaching its output to its parameters'
    gradients accumulated; ``None`` where not measured) and self backward time (less its
    child modules'); its forward memory peak and the peak's rise above the memory at its
    start (bytes, the highest over the steps read; ``None`` where not read)."""

    module: str
    cls: str
    total: float
    self_time: float
    calls: float
    backward: float | None = None
    backward_self: float | None = None
    mem_peak: int | None = None
    mem_rise: int | None = None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["self"] = d.pop("self_time")
        return d


@dataclass
class PerfResult:
    """The step breakdown of one run (truthy when no finding).

    ``steps``: one dict per step with seconds per phase and ``step`` (its total);
    ``breakdown``: each phase's share of the steady-state steps (all steps but the first, or
    the only one); ``first_step``: the first step against the steady median; ``modules``:
    forward time per module, most self time first; ``spans``: the timeline (for Chrome traces).
    """

    path: str
    framework: str
    steps: list[dict[str, float]]
    breakdown: dict[str, float]
    first_step: dict[str, Any]
    modules: list[ModuleTime]
    findings: list[Finding]
    loader: dict[str, Any] = field(default_factory=dict)
    allreduce: BucketAdvice | None = None
    source: str = "light"  # light (netparity.profile) | kineto (a torch.profiler trace)
    ops: list[OpTime] = field(default_factory=list)  # kineto: per op, most self time first
    conversions: dict[str, Any] = field(default_factory=dict)  # kineto: casts, copies, layout
    memory: dict[str, Any] = field(default_factory=dict)  # peak bytes per phase
    device: dict[str, Any] = field(default_factory=dict)  # kineto with GPU events: busy/idle
    # profiler traces: self seconds and calls per steady step per op class (kineto.OP_CLASSES)
    op_classes: dict[str, dict[str, float]] = field(default_factory=dict)
    params: list[tuple[str, tuple[int, ...]]] = field(default_factory=list, repr=False)
    spans: list[tuple[int, str, str, str, float, float]] = field(default_factory=list, repr=False)

    def __bool__(self) -> bool:
        return not self.findings

    @property
    def steady(self) -> dict[str, float]:
        """Median seconds per phase over the steady steps."""
        rows = self.steps[1:] if len(self.steps) > 1 else self.steps
        if not rows:
            return dict.fromkeys(("step", *PHASES), 0.0)
        out = {"step": float(np.median([r["seconds"] for r in rows]))}
        out.update({k: float(np.median([r[k] for r in rows])) for k in PHASES})
        return out

    def to_json(self) -> dict[str, Any]:
        return {"trace": self.path, "framework": self.framework, "steps": self.steps,
                "breakdown": self.breakdown, "steady": self.steady,
                "first_step": self.first_step,
                "findings": [f.to_json() for f in self.findings],
                "modules": [m.to_json() for m in self.modules], "loader": self.loader,
                "allreduce": self.allreduce.to_json() if self.allreduce else None,
                "source": self.source, "ops": [o.to_json() for o in self.ops[:50]],
                "conversions": self.conversions, "memory": self.memory, "device": self.device,
                "op_classes": self.op_classes}


# a module call read from the trace: step, "module", path, class, start, seconds, self seconds,
# then the extra facts (backward ``bd``/``bself``, memory ``mem``/``mem_rise``) as a dict
_ModRow = tuple[int, str, str, str, float, float, float, dict[str, float]]


def _read(tr: Trace, rank: int) -> tuple[list[dict[str, float]], list[_ModRow]]:
    if tr.count(rank=rank, kind="timing") == 0:
        raise UsageError(f"{tr.path}: no timing records (record them with netparity.profile)")
    c = tr.scan(["step", "op", "module", "native", "extra"], rank=rank, kind="timing")
    steps: dict[int, dict[str, float]] = {}
    mods: list[_ModRow] = []
    for s, op, mod, cls, ex in zip(c["step"].tolist(), c["op"].objects(), c["module"].objects(),
                                   c["native"].objects(), c["extra"].objects()):
        e = timing_extra(ex, op)
        if op == "module":
            mods.append((s, "module", mod, cls, float(e.get("t", 0.0)), float(e.get("d", 0.0)),
                         float(e.get("self", 0.0)),
                         {k: e[k] for k in ("bt", "bd", "bself", "mem", "mem_rise") if k in e}))
        elif op in TIMING_PHASES:  # (grads, allreduce, comm_probe: the bucket advice's)
            row = steps.setdefault(s, {"index": float(s)})
            row[op] = float(e.get("d", 0.0))
            row[f"t_{op}"] = float(e.get("t", 0.0))
            for k in ("mem", "mem0"):  # memory peak readings (light mode, PyTorch)
                if k in e:
                    row[f"{k}_{op}"] = float(e[k])
    rows = []
    for s in sorted(steps):
        r = steps[s]
        rows.append(r)
        for k in ("step", *PHASES):
            r.setdefault(k, 0.0)
    return rows, mods


def _modules(mods: list[_ModRow], steady: set[int]) -> list[ModuleTime]:
    per: dict[str, dict[int, list[float]]] = {}
    cls: dict[str, str] = {}
    bwd: set[str] = set()  # modules whose backward was measured
    mem: dict[str, list[int]] = {}  # the highest forward peak and rise (any step read)
    for s, _, path, c, _t, d, sf, ex in mods:
        if "mem" in ex:
            m = mem.setdefault(path, [0, 0])
            m[0] = max(m[0], int(ex["mem"]))
            m[1] = max(m[1], int(ex.get("mem_rise", 0)))
        if s not in steady:
            continue
        acc = per.setdefault(path, {}).setdefault(s, [0.0, 0.0, 0.0, 0.0, 0.0])
        acc[0] += d
        acc[1] += sf
        acc[2] += 1
        if "bd" in ex:
            acc[3] += float(ex["bd"])
            acc[4] += float(ex.get("bself", 0.0))
            bwd.add(path)
        cls[path] = c
    n = len(steady)
    out = []
    for path, by in per.items():
        vals = list(by.values()) + [[0.0] * 5] * (n - len(by))  # steps it did not run
        arr = np.array(vals)
        b = path in bwd
        out.append(ModuleTime(path, cls[path], float(np.median(arr[:, 0])),
                              float(np.median(arr[:, 1])), float(np.median(arr[:, 2])),
                              float(np.median(arr[:, 3])) if b else None,
                              float(np.median(arr[:, 4])) if b else None,
                              *mem.get(path, (None, None))))
    # costliest first, forward and backward together (a module slow only in backward led
    # nowhere when rows were sorted by forward time)
    out.sort(key=lambda m: -(m.self_time + (m.backward_self or 0.0)))
    return out


def _loader_advice(framework: str, loader: dict[str, Any]) -> str:
    if framework == "mindspore":
        return ("raise the dataset's num_parallel_workers (map and batch), convert the data to "
                "MindRecord, and train with dataset_sink_mode=True so the pipeline overlaps "
                "the device")
    now = ""
    if loader:
        now = (f" (now: num_workers={loader.get('num_workers')}, prefetch_factor="
               f"{loader.get('prefetch_factor')}, pin_memory={loader.get('pin_memory')})")
    cores = os.cpu_count() or 1
    return (f"DataLoader: raise num_workers (up to the {cores} CPU cores), keep "
            f"persistent_workers=True, raise prefetch_factor (default 2), and pin_memory=True "
            f"with .to(device, non_blocking=True) on accelerators{now}; move heavy per-sample "
            f"work out of __getitem__/collate_fn or precompute it")


def _findings(framework: str, steps: list[dict[str, float]], steady_rows: list[dict[str, float]],
              breakdown: dict[str, float], modules: list[ModuleTime],
              loader: dict[str, Any], mode: str = "",
              allreduce: BucketAdvice | None = None, memory_source: str = ""
              ) -> list[Finding]:
    out: list[Finding] = []
    med = {k: float(np.median([r[k] for r in steady_rows])) for k in ("step", *PHASES)}
    data_share = breakdown.get("data", 0.0)
    if data_share > DATA_SHARE:
        ev = f"data wait {data_share:.0%} of the step"
        if len(steady_rows) >= 3:
            tot = np.array([r["step"] for r in steady_rows])
            dat = np.array([r["data"] for r in steady_rows])
            cv = float(tot.std() / tot.mean()) if tot.mean() > 0 else 0.0
            ev += f"; step time varies by {cv:.0%}"
            if tot.std() > 0 and dat.std() > 0:
                corr = float(np.corrcoef(tot, dat)[0, 1])
                ev += f", correlation with the wait {corr:+.2f}"
                if corr > 0.5:
                    ev += " (the pipeline cannot keep up: jitter follows the waits)"
        out.append(Finding("data-starvation", "data loader", med["data"],
                           _loader_advice(framework, loader), data_share, ev))
    if len(steps) > 1 and med["step"] > 0:
        first = steps[0]["step"]
        if first > FIRST_STEP_FACTOR * med["step"]:
            adv = ("graph compilation (GRAPH_MODE) dominates the first step: compare steady "
                   "steps only, and cut compile time (fewer graph breaks, static shapes)"
                   if framework == "mindspore" and mode == "graph" else
                   "first-call operator compilation and warm-up (PyNative builds each kernel "
                   "on first use; the optimizer's too): compare steady steps only"
                   if framework == "mindspore" else
                   "warm-up (allocator, kernel selection, lazy init, torch.compile) dominates the "
                   "first step: leave it out of throughput figures; with torch.compile, avoid "
                   "recompiles (static shapes, mark_dynamic)")
            ev = (f"first step {first:.3g} s, {first / med['step']:.1f}x the steady median "
                  f"{med['step']:.3g} s")
            comp = steps[0].get("compile", 0.0)
            if comp > 0:  # measured (GRAPH_MODE: the root Cell's compile)
                ev += (f"; graph compilation {comp:.3g} s of it (measured), execution "
                       f"{first - comp:.3g} s")
            out.append(Finding("first-step", "step 0", first - med["step"], adv, None, ev))
    fwd = med["forward"]
    if modules and fwd > 0:
        top = modules[0]
        share = top.self_time / med["step"] if med["step"] > 0 else None
        out.append(Finding(
            "hot-module", top.module or "(root)", top.self_time,
            "look at its ops (netparity run --level op) and their dtypes and shapes: use "
            "bf16/fp16 autocast where precision allows, align dimensions to 8 (tensor cores) "
            "or 16 (Ascend), and avoid host work or synchronisation (.item(), prints) inside "
            "forward",
            share, f"{top.cls}: self {top.self_time:.3g} s per step, "
                   f"{top.self_time / fwd:.0%} of the forward"))
    if breakdown.get("other", 0.0) > OTHER_SHARE:
        out.append(Finding("host-overhead", "outside forward/backward/optimizer",
                           med["other"], "time between the phases: loss and metric code, "
                           ".item()/print synchronisation, zero_grad, logging; move them out of "
                           "the step or do them every N steps", breakdown["other"]))
    if breakdown.get("comm", 0.0) > COMM_SHARE:
        ev = f"exposed all-reduce tail {breakdown['comm']:.0%} of the step"
        adv = ("overlap the gradient all-reduce with backward: smaller buckets (DDP "
               "bucket_cap_mb, MindSpore all_reduce_fusion_config); record gradient-ready "
               "times and a bandwidth probe (prof.probe_comm()) for a concrete split")
        if allreduce is not None:
            m, bw = allreduce.measured, allreduce.bandwidth
            ev += (f"; {len(m['buckets'])} bucket(s) of {allreduce.params} gradients "
                   f"({allreduce.total_bytes / 2**20:.1f} MiB), backward "
                   f"{allreduce.backward * 1e3:.1f} ms; bandwidth model ({bw.source}): "
                   f"{bw.latency * 1e6:.0f} us + {bw.bandwidth / 1e6:.0f} MB/s; tail "
                   f"measured {med['comm'] * 1e3:.1f} ms, predicted "
                   + (f"{m['predicted_tail'] * 1e3:.1f} ms" if m["predicted_tail"] is not None
                      else "-"))
            adv = allreduce.advice()
        out.append(Finding("communication", "gradient all-reduce", med["comm"], adv,
                           breakdown["comm"], ev))
    if breakdown.get("optimizer", 0.0) > OPTIMIZER_SHARE:
        out.append(Finding("optimizer", "optimizer.step", med["optimizer"],
                           "use the optimizer's foreach=True or fused=True implementation",
                           breakdown["optimizer"]))
    bwd = med["backward"]
    timed = [m for m in modules if m.backward_self is not None]
    if timed and bwd > 0:
        top = max(timed, key=lambda m: m.backward_self or 0.0)
        bs = top.backward_self or 0.0
        if bs >= HOT_SHARE * bwd:
            out.append(Finding(
                "hot-module-backward", top.module or "(root)", bs,
                "its backward: custom autograd Functions and ops with slow gradients (scatter/"
                "index, unfused normalisation), recomputation (gradient checkpointing re-runs "
                "its forward here); check its dtypes and shapes as for the forward",
                bs / med["step"] if med["step"] > 0 else None,
                f"{top.cls}: backward self {bs:.3g} s per step (its gradients in, its "
                f"parameters' gradients out, less its child modules), {bs / bwd:.0%} of the "
                f"backward phase; forward self {top.self_time:.3g} s"))
    mem = memory_finding(modules, memory_source)
    if mem is not None:
        out.append(mem)
    # hot-module is a pointer for the forward, not a problem on its own: rank it by seconds
    # with the rest, but keep it only when it is worth a look (>= 10 % of the forward)
    out = [f for f in out if f.kind != "hot-module" or f.seconds >= HOT_SHARE * fwd]
    out.sort(key=lambda f: -f.seconds)
    return out


def memory_finding(modules: list[ModuleTime], source: str) -> Finding | None:
    """``memory-module``: the module (not the root) whose forward raises the memory most above
    what it had at its start, when that is >= 25 % of the whole forward's rise (the root's) and
    >= 1 MiB: activations, temporaries or caches made there. ``seconds`` is 0 (memory, not
    time); ``bytes`` the rise."""
    read = [m for m in modules if m.mem_rise is not None]
    root = next((m for m in read if m.module == ""), None)
    inner = [m for m in read if m.module != ""]
    if not inner or root is None or not root.mem_rise:
        return None
    top = max(inner, key=lambda m: m.mem_rise or 0)
    rise = top.mem_rise or 0
    if rise < MEM_MODULE_SHARE * root.mem_rise or rise < 1 << 20:
        return None
    what = {"rss_peak": "resident set (VmHWM) peak", "cuda.max_memory_allocated":
            "CUDA allocator peak"}.get(source, source)
    return Finding(
        "memory-module", top.module, 0.0,
        "the largest memory rise of the forward: activations kept for backward or "
        "temporaries; lower the batch, recompute it in backward (torch.utils.checkpoint / "
        "MindSpore recompute), keep activations in bf16/fp16, free intermediate tensors "
        "(in-place ops where safe)",
        None, f"{top.cls}: forward peak {rise / 2**20:.1f} MiB above its start "
              f"({what}; peak {(top.mem_peak or 0) / 2**20:.1f} MiB), "
              f"{rise / root.mem_rise:.0%} of the whole forward's rise "
              f"{root.mem_rise / 2**20:.1f} MiB", bytes=rise)


def analyze(trace: Trace | str | os.PathLike[str], *, rank: int = 0,
            progress: Any = None) -> PerfResult:
    """The step breakdown, hot modules and findings of one run's ``timing`` records, or of a
    ``torch.profiler`` trace (a ``*.json[.gz]`` file or a directory of ``*.pt.trace.json``:
    :func:`analyze_kineto`).

    Raises :class:`~netparity.errors.UsageError` when the trace has no timing records.

    Example:
        >>> # r = analyze("runs/prof"); r.breakdown["data"], r.findings[0].advice
    """
    if not isinstance(trace, Trace) and is_kineto(trace):
        return analyze_kineto(trace, progress=progress)
    tr = trace if isinstance(trace, Trace) else open_trace(trace)
    rows, mods = _read(tr, rank)
    steady_rows = rows[1:] if len(rows) > 1 else rows
    steady = {int(r["index"]) for r in steady_rows}
    total = sum(r["step"] for r in steady_rows)
    breakdown = {k: (sum(r[k] for r in steady_rows) / total if total > 0 else 0.0)
                 for k in PHASES}
    modules = _modules(mods, steady)
    loader = dict(tr.manifest.get("loader") or {})
    framework = str(tr.manifest.get("framework", ""))
    comm = float(np.median([r["comm"] for r in steady_rows]))
    allreduce = advise(tr, rank, steady, {int(r["index"]): r["t_backward"] for r in rows
                                          if "t_backward" in r}, comm)
    findings = _findings(framework, rows, steady_rows, breakdown, modules, loader,
                         str(tr.manifest.get("mode", "")), allreduce,
                         str(tr.manifest.get("module_memory") or ""))
    med = float(np.median([r["step"] for r in steady_rows]))
    first = {"seconds": rows[0]["step"], "steady_median": med,
             "ratio": rows[0]["step"] / med if med > 0 else None,
             **{k: rows[0][k] for k in PHASES}}
    steps = [{"step": int(r["index"]), "seconds": r["step"], **{k: r[k] for k in PHASES}}
             for r in rows]
    spans = [(int(r["index"]), "phase", k, "", r[f"t_{k}"], r[k])
             for r in rows for k in ("step", *PHASES) if f"t_{k}" in r and k != "other"]
    spans += [(s, "module", path or "(root)", cls, t, d) for s, _, path, cls, t, d, _, _ in mods]
    spans += [(s, "module-backward", path or "(root)", cls, float(ex["bt"]), float(ex["bd"]))
              for s, _, path, cls, _t, _d, _, ex in mods if "bt" in ex and "bd" in ex]
    params = [(str(n), tuple(int(d) for d in shape))
              for n, shape in tr.manifest.get("params") or []]
    spans += _comm_spans(tr, rank) if allreduce is not None or comm > 0 else []
    return PerfResult(str(tr.path), framework, steps, breakdown, first, modules, findings,
                      loader, allreduce, params=params, spans=spans,
                      memory=_light_memory(rows, str(tr.manifest.get("memory", ""))))


def _light_memory(rows: list[dict[str, float]], source: str) -> dict[str, Any]:
    """Memory peak per phase from the light mode's readings at each phase end: the CUDA
    allocator's peak or the process's peak RSS (both reset at each phase start: the peak of
    each phase), or the ``getrusage`` high-water mark (it never falls: ``raised`` says which
    phase pushed it up, summed over the steps)."""
    order = ("forward", "backward", "optimizer")
    if not source or not any(f"mem_{p}" in r for r in rows for p in order):
        return {}
    peak = {p: int(max(r[f"mem_{p}"] for r in rows if f"mem_{p}" in r))
            for p in order if any(f"mem_{p}" in r for r in rows)}
    peak["step"] = max(peak.values())
    out: dict[str, Any] = {"source": source, "peak_allocated": {
        "cuda" if source.startswith("cuda") else "cpu (RSS peak)" if source == "rss_peak"
        else "cpu (RSS high-water)": peak}}
    if source == "rss_high_water":
        raised = dict.fromkeys(order, 0)
        for r in rows:
            prev = r.get("mem0_step")
            for p in order:
                if f"mem_{p}" in r:
                    if prev is not None:
                        raised[p] += int(max(r[f"mem_{p}"] - prev, 0))
                    prev = r[f"mem_{p}"]
        out["raised"] = raised
    return out


def analyze_kineto(path: str | os.PathLike[str], *, progress: Any = None) -> PerfResult:
    """A :class:`PerfResult` from a ``torch.profiler`` Chrome trace (docs/perf.md): steps from
    ``ProfilerStep#N``, hot ops by self time with dtypes and shapes, conversion ops, memory per
    phase; findings as for the light mode plus ``conversion`` and ``hot-op``."""
    k = summarize(path, progress=progress)
    rows: list[dict[str, float]] = k["rows"]
    steady_rows = rows[1:] if len(rows) > 1 else rows
    total = sum(r["step"] for r in steady_rows)
    breakdown = {ph: (sum(r[ph] for r in steady_rows) / total if total > 0 else 0.0)
                 for ph in PHASES}
    framework = str(k["framework"])
    # without step markers (ProfilerStep#N) the phases are unknown: op findings only
    findings = _findings(framework, rows, steady_rows, breakdown, [], {}) if k["marked"] \
        else []
    med = {ph: float(np.median([r[ph] for r in steady_rows])) for ph in ("step", *PHASES)}
    conv = k["conversions"]
    compute = med["forward"] + med["backward"]
    if compute > 0 and conv["seconds"] > CONVERSION_SHARE * compute:
        per = conv["per_step"]
        top = conv["ops"][0] if conv["ops"] else {}
        findings.append(Finding(
            "conversion", f"{top.get('op', 'casts')} ({top.get('dtypes', '')})",
            conv["seconds"],
            "casts and copies between dtypes/layouts every step: with autocast the fp32 "
            "weights are cast on every forward (and the gradients back): keep the model in "
            "the compute dtype where precision allows (model.to(torch.bfloat16), fp32 master "
            "weights in the optimizer), keep inputs in it (no .float()/.half() round trips), "
            "avoid .contiguous() after permute/transpose (channels_last throughout); on "
            "Ascend the same shows as Cast/TransData",
            conv["seconds"] / med["step"] if med["step"] > 0 else None,
            f"{conv['count']:.0f} conversion ops per step ({per['cast']['count']:.0f} casts "
            f"{per['cast']['seconds'] * 1e3:.2f} ms, {per['copy']['count']:.0f} copies, "
            f"{per['layout']['count']:.0f} layout), {conv['seconds'] / compute:.0%} of "
            f"forward + backward"))
    ops: list[OpTime] = k["ops"]
    if ops and med["step"] > 0 and ops[0].self_time >= HOT_OP_SHARE * med["step"]:
        o = ops[0]
        findings.append(Finding(
            "hot-op", o.op + (f" [{o.dtypes}]" if o.dtypes else ""), o.self_time,
            "the op with the most self time: check its dtype (bf16/fp16 where precision "
            "allows) and its shapes (dimensions a multiple of 8 for tensor cores, 16 on "
            "Ascend); a fused or channels_last variant may exist",
            o.self_time / med["step"],
            f"{o.calls:.0f} call(s) per step, self {o.self_time * 1e3:.2f} ms; shapes "
            f"{o.shapes or '(record_shapes=False)'}"))
    findings += _device_findings(k["device"], med["step"], framework)
    findings.sort(key=lambda f: -f.seconds)
    first = {"seconds": rows[0]["step"], "steady_median": med["step"],
             "ratio": rows[0]["step"] / med["step"] if med["step"] > 0 else None,
             **{ph: rows[0][ph] for ph in PHASES}}
    steps = [{"step": int(r["index"]), "seconds": r["step"], **{ph: r[ph] for ph in PHASES}}
             for r in rows]
    return PerfResult(k["path"], framework, steps, breakdown, first, [], findings, {}, None,
                      source="kineto", ops=ops, conversions=conv, memory=k["memory"],
                      spans=k["spans"], device=k["device"], op_classes=k["op_classes"])


_IDLE_ADVICE = {
    "data": "the device waits for the data loader: {loader}",
    "sync": "the host blocks on the device inside the step and the device then waits for the "
            "next launches: remove synchronisations from the step (.item(), .cpu(), .tolist(), "
            "printing tensors, torch.cuda.synchronize(), nonzero/boolean masks, blocking "
            ".to(device) copies without pin_memory/non_blocking), or do them every N steps",
    "host": "host-bound: the device runs each kernel as soon as the host launches it and then "
            "waits for the next; give it fewer, larger kernels (a larger batch, fused ops, "
            "torch.compile), replay the step as a CUDA graph (torch.compile(mode="
            "'reduce-overhead') or torch.cuda.CUDAGraph), and move Python work out of the step",
    "none": "the host thread is outside any traced op while the device idles: Python between "
            "ops, logging, garbage collection; profile with with_stack=True to see where",
}


def _device_findings(device: dict[str, Any], step: float, framework: str) -> list[Finding]:
    """``device-idle``: a device idle > 20 % of the steady step (profiler traces with device
    events), with what the host was doing meanwhile and the advice for the main cause."""
    out: list[Finding] = []
    if not device or step <= 0:
        return out
    for name, d in device.get("devices", {}).items():
        idle = float(d["idle"])
        if idle <= DEVICE_IDLE_SHARE * step:
            continue
        by = d["idle_by_host"]
        cause = max(by, key=lambda c: by[c])
        label = {"data": "loading data", "sync": "synchronising with the device",
                 "host": "running ops and launching kernels", "none": "in nothing traced"}
        ev = (f"device busy {d['busy'] / step:.0%} of the step; {d['gaps']:.0f} gap(s) per "
              f"step, longest {d['longest_gap'] * 1e3:.2f} ms; while it idled the host was "
              + ", ".join(f"{label[c]} {by[c] * 1e3:.2f} ms" for c in
                          sorted(by, key=lambda c: -by[c]) if by[c] >= 5e-6))
        lat = device.get("launch_delay_median")
        if lat is not None:
            ev += f"; median launch-to-kernel delay {lat * 1e6:.0f} us"
        out.append(Finding("device-idle", name, idle,
                           _IDLE_ADVICE[cause].format(loader=_loader_advice(framework, {})),
                           idle / step, ev))
    return out


def _comm_spans(tr: Trace, rank: int) -> list[tuple[int, str, str, str, float, float]]:
    """The all-reduce buckets as timeline spans (the Chrome trace's ``comm`` thread)."""
    c = tr.scan(["step", "op", "call", "extra"], rank=rank, kind="timing")
    out = []
    for s, op, b, ex in zip(c["step"].tolist(), c["op"].objects(), c["call"].tolist(),
                            c["extra"].objects()):
        if op == "allreduce" and ex:
            e = timing_extra(ex, op)
            out.append((int(s), "comm", f"bucket {b}", f"{e.get('bytes', 0)} B",
                        float(e["t"]), float(e["d"])))
    return out


# -- side by side ---------------------------------------------------------------------------------
@dataclass
class PerfComparison:
    """Where the candidate spends more time than the reference (truthy when nowhere).

    ``phases``: per phase, steady medians and the extra seconds; ``modules``: per aligned module
    (self time), then candidate-only and reference-only modules; both sorted by extra seconds.
    """

    ref: PerfResult
    cand: PerfResult
    phases: list[dict[str, Any]]
    modules: list[dict[str, Any]]
    slowdown: float | None
    ops: list[dict[str, Any]] = field(default_factory=list)
    classes: list[dict[str, Any]] = field(default_factory=list)  # per op class, as ``ops``

    def __bool__(self) -> bool:
        return not self.slower

    @property
    def slower(self) -> list[dict[str, Any]]:
        """Rows (phases, then modules) where the candidate costs more, costliest first."""
        rows = [dict(r, what="phase") for r in self.phases if r["extra"] > 0] + \
               [dict(r, what="module") for r in self.modules if r["extra"] > 0] + \
               [dict(r, what="module backward", extra=r["extra_bwd"]) for r in self.modules
                if (r.get("extra_bwd") or 0.0) > 0] + \
               [dict(r, what="op class") for r in self.classes if r["extra"] > 0] + \
               [dict(r, what="op") for r in self.ops if r["extra"] > 0]
        return sorted(rows, key=lambda r: -r["extra"])

    def to_json(self) -> dict[str, Any]:
        return {"ref": self.ref.to_json(), "cand": self.cand.to_json(), "slowdown": self.slowdown,
                "phases": self.phases, "modules": self.modules, "ops": self.ops[:50],
                "classes": self.classes,
                "conversions": {"ref": self.ref.conversions.get("count"),
                                "cand": self.cand.conversions.get("count")},
                "slower": self.slower}


def _map_module(path: str, mapping: Mapping, owned: dict[str, str]) -> str | None:
    if path in mapping.modules:
        return mapping.modules[path]
    for pat, rep in mapping.rules:
        if pat.fullmatch(path):
            return pat.sub(rep, path)
    return owned.get(path)


def _by_ownership(r: PerfResult, c: PerfResult, mp: Mapping) -> dict[str, str]:
    """Reference module -> candidate module from the parameters each owns (the alignment's
    own pass: ``fc`` <-> ``end_point`` across PyTorch and MindSpore); ``{}`` without them."""
    if not r.params or not c.params:
        return {}
    try:
        return modules_by_ownership(r.params, c.params,
                                    mapping=mp if (mp.params or mp.modules or mp.rules) else None)
    except MappingError:  # the user's params name something these runs lack
        return modules_by_ownership(r.params, c.params)


def compare(ref: Trace | str | os.PathLike[str] | PerfResult,
            cand: Trace | str | os.PathLike[str] | PerfResult, *, rank: int = 0,
            mapping: Mapping | str | os.PathLike[str] | None = None) -> PerfComparison:
    """Side by side of two runs' timings: per phase and per module, costliest extra first.

    Modules pair through the mapping file's ``modules``/``rules`` when given, then by the
    parameters they own (:func:`netparity.align.ownership.modules_by_ownership`, from the
    manifests' ``params``), then by exact path, then by
    :func:`netparity.align.names.norm_path` (framework spelling removed).

    Example:
        >>> # c = compare("runs/ref-prof", "runs/cand-prof"); c.slower[0]
    """
    r = ref if isinstance(ref, PerfResult) else analyze(ref, rank=rank)
    c = cand if isinstance(cand, PerfResult) else analyze(cand, rank=rank)
    mp = mapping if isinstance(mapping, Mapping) else (
        load_mapping(mapping) if mapping is not None else Mapping())
    rs, cs = r.steady, c.steady
    phases: list[dict[str, Any]] = [
        {"name": k, "ref": rs[k], "cand": cs[k], "extra": cs[k] - rs[k],
         "ratio": cs[k] / rs[k] if rs[k] > 0 else None} for k in PHASES]
    phases.sort(key=lambda p: -float(p["extra"]))
    owned = _by_ownership(r, c, mp)
    cmods = {m.module: m for m in c.modules}
    by_norm = {norm_path(m.module): m for m in c.modules}
    used: set[str] = set()
    modules: list[dict[str, Any]] = []
    for m in r.modules:
        target = _map_module(m.module, mp, owned)
        cm = cmods.get(target) if target is not None else None
        if cm is None:
            cm = cmods.get(m.module) or by_norm.get(norm_path(m.module))
        if cm is not None and cm.module not in used:
            used.add(cm.module)
            modules.append({"name": m.module, "cand_name": cm.module, "cls": cm.cls,
                            "ref": m.self_time, "cand": cm.self_time,
                            "extra": cm.self_time - m.self_time, "only": "",
                            "ref_bwd": m.backward_self, "cand_bwd": cm.backward_self,
                            "extra_bwd": (cm.backward_self - m.backward_self
                                          if cm.backward_self is not None
                                          and m.backward_self is not None else None)})
        else:
            modules.append({"name": m.module, "cand_name": "", "cls": m.cls, "ref": m.self_time,
                            "cand": 0.0, "extra": -m.self_time, "only": "ref",
                            "ref_bwd": m.backward_self, "cand_bwd": None, "extra_bwd": None})
    for cm in c.modules:
        if cm.module not in used:
            modules.append({"name": cm.module, "cand_name": cm.module, "cls": cm.cls, "ref": 0.0,
                            "cand": cm.self_time, "extra": cm.self_time, "only": "cand",
                            "ref_bwd": None, "cand_bwd": cm.backward_self,
                            "extra_bwd": cm.backward_self})
    modules.sort(key=lambda x: -x["extra"])
    slowdown = cs["step"] / rs["step"] if rs["step"] > 0 else None
    return PerfComparison(r, c, phases, modules, slowdown, _ops_side(r, c), _classes_side(r, c))


def _classes_side(r: PerfResult, c: PerfResult) -> list[dict[str, Any]]:
    """Per op class (conv, matmul-linear, norm, ...; :func:`netparity.analyzers.kineto.op_class`):
    self seconds and calls per steady step of both runs, the candidate's extra first
    (profiler traces on both sides; empty otherwise)."""
    if not r.op_classes or not c.op_classes:
        return []
    zero = {"self": 0.0, "calls": 0.0}
    rows: list[dict[str, Any]] = []
    for k in OP_CLASSES:
        if k in r.op_classes or k in c.op_classes:
            a, b = r.op_classes.get(k, zero), c.op_classes.get(k, zero)
            rows.append({"name": k, "ref": a["self"], "cand": b["self"],
                         "extra": b["self"] - a["self"], "ref_calls": a["calls"],
                         "cand_calls": b["calls"]})
    return sorted(rows, key=lambda x: -float(x["extra"]))


def _ops_side(r: PerfResult, c: PerfResult) -> list[dict[str, Any]]:
    """Per op name (all dtypes and shapes together): self seconds and calls per steady step
    of both runs, costliest extra first (profiler traces; empty otherwise)."""
    def by_name(ops: list[OpTime]) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for o in ops:
            acc = out.setdefault(o.op, [0.0, 0.0])
            acc[0] += o.self_time
            acc[1] += o.calls
        return out

    ro, co = by_name(r.ops), by_name(c.ops)
    rows = [{"name": n, "ref": ro.get(n, [0.0, 0.0])[0], "cand": co.get(n, [0.0, 0.0])[0],
             "ref_calls": ro.get(n, [0.0, 0.0])[1], "cand_calls": co.get(n, [0.0, 0.0])[1],
             "extra": co.get(n, [0.0, 0.0])[0] - ro.get(n, [0.0, 0.0])[0]}
            for n in set(ro) | set(co)]
    return sorted(rows, key=lambda x: -x["extra"])


# -- Chrome trace ---------------------------------------------------------------------------------
def nested(spans: list[tuple[int, str, str, str, float, float]]
           ) -> list[tuple[int, str, str, str, float, float]]:
    """``spans`` with each category's slices properly nested per step, as Perfetto draws a
    thread: a slice that starts inside another and ends after it (module backward times are
    read from autograd hooks on different nodes, so a child's end can pass its parent's by
    the hooks' skew) is cut at its parent's end. Slices that do not overlap are untouched."""
    out: list[tuple[int, str, str, str, float, float]] = []
    groups: dict[tuple[int, str], list[tuple[int, str, str, str, float, float]]] = {}
    for sp in spans:
        groups.setdefault((sp[0], sp[1]), []).append(sp)
    for group in groups.values():
        group.sort(key=lambda sp: (sp[4], -sp[5]))  # by start; the longer (outer) first
        stack: list[float] = []  # ends of the open slices
        for step, what, name, cls, t, d in group:
            while stack and stack[-1] <= t:
                stack.pop()
            end = t + d
            if stack and end > stack[-1]:
                end = stack[-1]
            out.append((step, what, name, cls, t, max(end - t, 0.0)))
            stack.append(end)
    return out


def chrome_trace(result: PerfResult | PerfComparison) -> dict[str, Any]:
    """Chrome trace-event JSON (opens in Perfetto / chrome://tracing): complete events
    (``"ph": "X"``, microseconds) for steps, phases and module calls; one process per run.

    Example:
        >>> r = PerfResult("t", "torch", [], {}, {}, [], [], spans=[(0, "phase", "step", "", 0.0,
        ...                1.0)])
        >>> chrome_trace(r)["traceEvents"][-1]["dur"]
        1000000.0
    """
    runs = [result] if isinstance(result, PerfResult) else [result.ref, result.cand]
    events: list[dict[str, Any]] = []
    for pid, run in enumerate(runs, start=1):
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"name": f"{run.framework} {run.path}"}})
        for tid, label in ((1, "steps"), (2, "phases"), (3, "modules"), (4, "all-reduce"),
                           (5, "modules (backward)")):
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                           "args": {"name": label}})
        for step, what, name, cls, t, d in nested(run.spans):
            if not (math.isfinite(t) and math.isfinite(d)) or d <= 0:
                continue
            tid = 1 if name == "step" and what == "phase" else \
                {"phase": 2, "module": 3, "comm": 4, "module-backward": 5}.get(what, 3)
            ev = {"name": f"step {step}" if tid == 1 else name, "cat": what, "ph": "X",
                  "pid": pid, "tid": tid, "ts": round(t * 1e6, 3), "dur": round(d * 1e6, 3),
                  "args": {"step": step, **({"class": cls} if cls else {})}}
            events.append(ev)
    return {"traceEvents": events, "displayTimeUnit": "ms"}
