"""Import a ``torch.profiler`` (Kineto) trace: step breakdown, hot ops, conversion ops, memory.

Reads the Chrome trace-event JSON that ``prof.export_chrome_trace(F)`` or
``torch.profiler.tensorboard_trace_handler(DIR)`` writes (``*.pt.trace.json``, ``.gz`` too) and
returns the same :class:`~netparity.analyzers.perf.PerfResult` as the light timing mode, so the
findings, the side by side and every output work on it:

* **steps**: the ``ProfilerStep#N`` spans (``schedule=`` and ``prof.step()``; a trace without
  them is one step). The first profiled step is the "first step" (after the schedule's warm-up,
  so usually not the run's first).
* **phases** (host thread that ran the step): ``data`` the ``enumerate(DataLoader)#...``
  annotations; ``backward`` from the first to the last ``autograd::engine::evaluate_function``
  event (on CPU the engine runs on the caller's thread; on CUDA its device thread);
  ``optimizer`` the ``Optimizer.step#...`` annotations; ``forward`` the top-level ops before the
  backward begins (the loss included: the profiler has no module boundaries); ``other`` the rest
  (``zero_grad``, Python between ops, idle).
* **hot ops** by self time (an op's time less its child ops'), grouped by name, input dtypes
  and shapes (``record_shapes=True`` gives them; without it they are empty).
* **conversion ops**: casts (``aten::_to_copy``, and ``aten::copy_`` between two dtypes),
  copies (other ``aten::copy_``), layout (``aten::contiguous``/``aten::clone``), counted and timed
  per step (outermost only: a ``_to_copy``'s inner ``copy_`` is not counted again).
* **memory per phase** (``profile_memory=True``): the peak ``Total Allocated`` of the
  ``[memory]`` events inside each phase, per device type.

Example:
    >>> _dtypes({"Input type": ["float", "c10::BFloat16", "Scalar", ""]})
    ['float32', 'bfloat16']
"""

from __future__ import annotations

import bisect
import math
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from netparity import inputs
from netparity.errors import UsageError
from netparity.untrusted import load_json

__all__ = ["OP_CLASSES", "OpTime", "find_kineto", "is_kineto", "load_events", "op_class",
           "summarize"]

_BACKWARD = "autograd::engine::evaluate_function"
_DATA = re.compile(r"enumerate\(DataLoader\)#")
_OPT = re.compile(r"Optimizer\.step#")
_STEP = re.compile(r"ProfilerStep#(\d+)")
_DTYPE = {"float": "float32", "double": "float64", "c10::Half": "float16",
          "c10::BFloat16": "bfloat16", "long int": "int64", "int": "int32", "bool": "bool",
          "c10::complex<float>": "complex64", "unsigned char": "uint8", "signed char": "int8",
          "short int": "int16", "c10::Float8_e4m3fn": "float8_e4m3fn",
          "c10::Float8_e5m2": "float8_e5m2"}
_LAYOUT = ("aten::contiguous", "aten::clone")
_MS_VIEW = "ASCEND_PROFILER_OUTPUT/trace_view.json"
_MS_OP = re.compile(r"(?:.*/)?([A-Za-z0-9_]+?)(?:-op\d+)?")  # Default/SGD-op1 -> SGD


#: op classes of the side by side, in the order they are tried on an op's name (squashed:
#: lower case, no ``aten::``/``_``, no backward/grad suffix, ``ConvolutionBackward0`` -> conv)
_CLASS_RULES = (
    ("communication", r"allreduce|allgather|reducescatter|broadcast|alltoall|nccl|gloo|c10d|"
                      r"hcom|^send$|^recv$|barrier"),
    ("optimizer", r"^(?:foreach|fusedadam|fusedsgd|fusedadagrad|apply(?:momentum|adam|rmsprop|"
                  r"adagrad|ftrl|gradientdescent|proximal)|sgd$|adamw?$|adamweightdecay|lamb$|"
                  r"lars)"),
    ("conv", r"conv|depthwise"),
    ("matmul-linear", r"matmul|^(?:mm|bmm|addmm|baddbmm|addbmm|addmv|mv|linear|dense|einsum|"
                      r"mkldnnlinear|mkldnnmatmul)$|attention|flashattention"),
    ("norm", r"batchnorm|layernorm|groupnorm|instancenorm|rmsnorm|^bn(?:training|infer)|"
             r"^(?:normalize|localresponsenorm)$"),
    ("reduction", r"loss|crossentropy|^(?:sum|mean|amax|amin|max|min|argmax|argmin|prod|var|"
                  r"std|varmean|norm|linalgvectornorm|logsumexp|cumsum|all|any|topk|sort|"
                  r"argmaxwithvalue|argminwithvalue)$|^reduce|pool"),
    ("activation", r"relu|gelu|silu|swish|sigmoid|tanh|softmax|softplus|^elu$|hardswish|"
                   r"hardsigmoid|mish|threshold|leaky|glu$|^celu$|^selu$"),
    ("data movement & conversion",
     r"^(?:tocopy|to|copy|contiguous|clone|cast|transdata|transpose|permute|view|reshape|"
     r"reshapealias|t|asstrided|expand|expandas|expanddims|slice|select|narrow|unsqueeze|"
     r"squeeze|flatten|unflatten|cat|concat|stack|split|chunk|splitwithsizes|unbind|"
     r"indexselect|gather|gatherd|gathernd|scatter|scatternd|index|indexput|tile|repeat|"
     r"stridedslice|pad|constantpadnd|alias|detach|liftfresh|embedding|maskedselect|roll|flip|"
     r"unsafeview|viewas|broadcastto|identity|depend|tensorcopyslices|padv3)$"),
    ("elementwise",
     r"^(?:add|sub|rsub|mul|div|realdiv|truediv|floordiv|pow|sqrt|rsqrt|exp|log|log1p|neg|"
     r"abs|where|select|clamp|clampmin|clampmax|clip|fill|zero|zeros|ones|zeroslike|oneslike|"
     r"fillslike|"
     r"addcmul|addcdiv|lerp|dropout|nativedropout|maximum|minimum|square|reciprocal|sign|"
     r"floor|ceil|round|eq|ne|lt|le|gt|ge|equal|notequal|greater|greaterequal|less|lessequal|"
     r"logicaland|logicalor|logicalnot|bitwiseand|bitwiseor|addn|biasadd|maskedfill|sin|cos|"
     r"erf|erfinv|mulnonan|assign|assignadd|assignsub|squaresumall|sqrtgrad|rsqrtgrad|"
     r"tensoradd|muls|adds|divs|subs)$"),
)
OP_CLASSES = (*[c for c, _ in _CLASS_RULES], "other")
_CLASS_RE = [(c, re.compile(r)) for c, r in _CLASS_RULES]
_SQUASH = re.compile(r"^(?:aten|c10d|mkldnn|cudnn|native|miopen|_)+::|[^a-z0-9]")
_SUFFIX = re.compile(r"(?:ext|backward\d*|grad(?:input|filter|weight)?|backprop\w*|v\d|\d+)$")


def op_class(name: str) -> str:
    """The class of an op of a Kineto or MindSpore Profiler trace, by its name (one of
    :data:`OP_CLASSES`; ``other`` when no rule knows it).

    Example:
        >>> [op_class(n) for n in ("aten::addmm", "ConvolutionBackward0", "BatchNormGrad",
        ...                        "aten::_to_copy", "Cast", "aten::relu_", "ReduceMean")]
        ['matmul-linear', 'conv', 'norm', 'data movement & conversion', \
'data movement & conversion', 'activation', 'reduction']
    """
    n = name.rsplit(": ", 1)[-1]  # autograd::engine::evaluate_function: XBackward0
    n = n.split("::", 1)[-1].lower()
    n = _SQUASH.sub("", n)
    stem = _SUFFIX.sub("", n) or n
    for c, rx in _CLASS_RE:
        if rx.search(stem) or rx.search(n):
            return c
    return "other"


@dataclass
class OpTime:
    """One op (name, input dtypes and shapes) per steady step: calls, self and total seconds."""

    op: str
    dtypes: str
    shapes: str
    calls: float
    self_time: float
    total: float
    conversion: str = ""  # cast | copy | layout | ""

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["self"] = d.pop("self_time")
        return d


def is_kineto(path: str | os.PathLike[str]) -> bool:
    """A profiler trace file, or a directory of them without a netparity manifest."""
    p = Path(path)
    if p.is_file():
        return p.name.endswith((".json", ".json.gz"))
    return p.is_dir() and not (p / "manifest.json").exists() and bool(_trace_files(p))


def _trace_files(d: Path) -> list[Path]:
    """torch.profiler's ``*.pt.trace.json[.gz]``, or MindSpore Profiler's
    ``*/ASCEND_PROFILER_OUTPUT/trace_view.json`` (its output_path, or one run's folder)."""
    out = sorted(q for q in d.iterdir() if q.name.endswith((".pt.trace.json",
                                                            ".pt.trace.json.gz")))
    return out or sorted([*d.glob(f"{_MS_VIEW}"), *d.glob(f"*/{_MS_VIEW}")])


def find_kineto(path: str | os.PathLike[str]) -> Path:
    """The trace file itself, or the newest ``*.pt.trace.json[.gz]`` of a directory (one per
    profiling cycle and worker: ``tensorboard_trace_handler``)."""
    p = Path(path)
    if p.is_dir():
        files = _trace_files(p)
        if not files:
            raise UsageError(f"{p}: no *.pt.trace.json file (torch.profiler output) here")
        return max(files, key=lambda q: (q.lstat().st_mtime, q.name))
    return p


def load_events(path: str | os.PathLike[str], progress: Any = None
                ) -> tuple[Path, list[dict[str, Any]], dict[str, Any]]:
    """The trace's events and its top-level facts; :class:`UsageError` on anything else.
    ``progress`` (:class:`netparity.report.progress.Progress`) is told each stage: a profiler
    trace of a long run is hundreds of MB."""
    p = find_kineto(path)
    say = progress.stage if progress is not None else (lambda *_a, **_k: None)
    try:
        say(f"reading {p.name}")
        raw = inputs.read_bytes(p, within=path if Path(path).is_dir() else None,
                                error=UsageError, what="profiler trace", limit=inputs.MAX_JSON)
        say(f"parsing {p.name} ({len(raw) / 2**20:.0f} MiB)")
        doc = load_json(raw, what="trace")
        del raw
    except (ValueError, UnicodeDecodeError) as e:
        raise UsageError(f"{p}: not a readable profiler trace ({type(e).__name__}: {e})") \
            from None
    if isinstance(doc, list) and p.name == "trace_view.json":  # MindSpore Profiler
        return p, _mindspore_events(doc), {"framework": "mindspore"}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise UsageError(f"{p}: no traceEvents (not a torch.profiler Chrome trace)")
    ev = [e for e in doc["traceEvents"] if isinstance(e, dict)]
    for i, event in enumerate(ev):
        if event.get("ph") == "X" and (why := _malformed(event)):
            raise UsageError(f"{p}: event {i}: {why} (a damaged profiler trace)")
    facts = {k: v for k, v in doc.items() if k != "traceEvents"}
    facts.setdefault("framework", "torch")
    return p, ev, facts


def _malformed(e: dict[str, Any]) -> str:
    """Why a complete event (``"ph": "X"``) cannot be read ('' when it can): the fields the
    summary reads must have the types torch.profiler writes."""
    def num(v: Any) -> bool:
        return type(v) in (int, float) and math.isfinite(v)

    if not num(e.get("ts")):
        return f"'ts' is not a finite number: {e.get('ts')!r:.40}"
    if "dur" in e and not (num(e["dur"]) and e["dur"] >= 0):
        return f"'dur' is not a duration: {e['dur']!r:.40}"
    if not isinstance(e.get("name"), str):
        return "no 'name'"
    if not isinstance(e.get("args", {}), dict):
        return "'args' is not an object"
    for k in ("tid", "pid", "cat"):
        if k in e and not isinstance(e[k], (int, str)):
            return f"{k!r} is a {type(e[k]).__name__}"
    return ""


def _mindspore_events(doc: list[Any]) -> list[dict[str, Any]]:
    """MindSpore Profiler's ``trace_view.json`` (a bare event list, times as strings) as the
    torch events this module reads: each operator an op named by its type (``MatMul``,
    ``Default/SGD-op1`` -> ``SGD``: MindSpore does not record input dtypes or shapes here)."""
    out = []
    for e in doc:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        try:
            ts, dur = float(e["ts"]), float(e.get("dur", 0))
        except (KeyError, TypeError, ValueError):
            continue
        m = _MS_OP.fullmatch(str(e.get("name", "")))
        name = m.group(1) if m else str(e.get("name", ""))
        if name == "Default":  # the graph's whole span, not an operator
            continue
        out.append({"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur,
                    "tid": e.get("tid"), "pid": e.get("pid"), "args": {"native": e["name"]}})
    return out


def _dtypes(args: dict[str, Any]) -> list[str]:
    return [_DTYPE.get(t, t) for t in args.get("Input type") or [] if t and t != "Scalar"
            and not str(t).startswith(("ScalarList", "GenericList", "TensorList"))]


def _shapes(args: dict[str, Any]) -> list[list[int]]:
    return [d for d in args.get("Input Dims") or [] if isinstance(d, list) and d]


def _conversion(e: dict[str, Any]) -> str:
    name = e["name"]
    if name in ("aten::_to_copy", "Cast"):  # (Cast: MindSpore)
        return "cast"
    if name in ("TransData", "Transpose"):  # MindSpore layout transforms
        return "layout"
    if name == "aten::copy_":
        dt = [t for t in (e.get("args") or {}).get("Input type") or [] if t and t != "Scalar"]
        return "cast" if len(dt) >= 2 and dt[0] != dt[1] else "copy"
    if name in _LAYOUT:
        return "layout"
    return ""


class _Node:
    __slots__ = ("children", "conv_parent", "e", "end", "in_opt", "start")

    def __init__(self, e: dict[str, Any]):
        self.e = e
        self.start = float(e["ts"])
        self.end = self.start + float(e.get("dur", 0.0))
        self.children = 0.0
        self.conv_parent = False
        self.in_opt = False  # inside an ``Optimizer.step#`` annotation


def summarize(path: str | os.PathLike[str], *, progress: Any = None) -> dict[str, Any]:
    """Steps (seconds per phase), ops, conversions and memory of one profiler trace; the parts
    :func:`netparity.analyzers.perf.analyze_kineto` builds its result from."""
    p, events, facts = load_events(path, progress)
    if progress is not None:
        progress.stage(f"summarising {len(events):,} events")
    xs = [e for e in events if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]
    steps = sorted(((int(m.group(1)), float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)),
                     e.get("tid"))
                    for e in xs if e.get("cat") == "user_annotation"
                    and (m := _STEP.fullmatch(str(e.get("name", ""))))), key=lambda s: s[1])
    ops = [e for e in xs if e.get("cat") in ("cpu_op", "user_annotation")
           and not _STEP.fullmatch(str(e.get("name", "")))]
    if not ops:
        raise UsageError(f"{p}: no operator events (was the profiler on during the steps?)")
    marked = bool(steps)
    if not steps:  # no schedule/prof.step(): the whole trace is one step
        t0 = min(float(e["ts"]) for e in ops)
        t1 = max(float(e["ts"]) + float(e.get("dur", 0)) for e in ops)
        steps = [(0, t0, t1, None)]
    # self time: nest the events of each thread by time (Chrome's own rule for "X" events)
    nodes: list[_Node] = []
    by_tid: dict[Any, list[dict[str, Any]]] = {}
    for e in ops:
        by_tid.setdefault(e.get("tid"), []).append(e)
    top: list[_Node] = []  # the outermost events of each thread
    for evs in by_tid.values():
        evs.sort(key=lambda e: (float(e["ts"]), -float(e.get("dur", 0))))
        stack: list[_Node] = []
        for e in evs:
            n = _Node(e)
            while stack and stack[-1].end <= n.start:
                stack.pop()
            if stack:
                stack[-1].children += n.end - n.start
                n.conv_parent = stack[-1].conv_parent or bool(_conversion(stack[-1].e))
                n.in_opt = stack[-1].in_opt or bool(_OPT.match(stack[-1].e["name"]))
            else:
                top.append(n)
            stack.append(n)
            nodes.append(n)

    def step_of(t: float) -> int | None:
        for k, (_, a, b, _) in enumerate(steps):
            if a <= t < b:
                return k
        return None

    n_steps = len(steps)
    rows = []
    for idx, a, b, tid in steps:
        inside = [n for n in top if a <= n.start < b and (tid is None or n.e.get("tid") == tid
                                                          or _BACKWARD in n.e["name"])]
        bwd = [n for n in nodes if a <= n.start < b and n.e["name"].startswith(_BACKWARD)]
        b0 = min((n.start for n in bwd), default=b)
        b1 = max((n.end for n in bwd), default=b0)
        data = sum(n.end - n.start for n in inside if _DATA.match(n.e["name"]))
        opt = [n for n in inside if _OPT.match(n.e["name"])]
        fwd = sum(n.end - n.start for n in inside if n.start < b0 and n.e.get("tid") == tid
                  and not _DATA.match(n.e["name"]) and not _OPT.match(n.e["name"])
                  and not n.e["name"].startswith(("Optimizer.", _BACKWARD)))
        total = b - a
        row = {"index": float(idx), "step": total / 1e6, "data": data / 1e6, "compile": 0.0,
               "forward": fwd / 1e6, "backward": (b1 - b0) / 1e6, "comm": 0.0,
               "optimizer": sum(n.end - n.start for n in opt) / 1e6,
               "t_step": a / 1e6, "t_data": a / 1e6,
               "t_forward": a / 1e6, "t_backward": b0 / 1e6,
               "t_optimizer": (opt[0].start if opt else b) / 1e6}
        row["other"] = max(row["step"] - row["data"] - row["forward"] - row["backward"]
                           - row["optimizer"], 0.0)
        rows.append(row)
    steady = set(range(1, n_steps)) if n_steps > 1 else {0}
    agg: dict[tuple[str, str, str], list[float]] = {}
    conv: dict[str, list[float]] = {"cast": [0, 0.0], "copy": [0, 0.0], "layout": [0, 0.0]}
    conv_rows: dict[tuple[str, str, str], list[float]] = {}
    classes: dict[str, list[float]] = {}
    for n in nodes:
        if n.e.get("cat") != "cpu_op":
            continue
        where = step_of(n.start)
        if where is None or where not in steady:
            continue
        # self time by class: inside the optimizer's step everything is the optimizer's, inside
        # a conversion (an allocation and copy under aten::_to_copy) the conversion's
        oc = "optimizer" if n.in_opt else "data movement & conversion" if n.conv_parent \
            else op_class(n.e["name"])
        ca = classes.setdefault(oc, [0, 0.0])
        ca[0] += 1
        ca[1] += max(n.end - n.start - n.children, 0.0)
        args = n.e.get("args") or {}
        dts, shp = _dtypes(args), _shapes(args)
        key = (n.e["name"], ",".join(dts), ";".join("x".join(map(str, s)) for s in shp))
        acc = agg.setdefault(key, [0, 0.0, 0.0])
        acc[0] += 1
        acc[1] += max(n.end - n.start - n.children, 0.0)
        acc[2] += n.end - n.start
        kind = _conversion(n.e)
        if kind and not n.conv_parent:  # the outermost conversion only
            conv[kind][0] += 1
            conv[kind][1] += n.end - n.start
            cr = conv_rows.setdefault((kind, *key[:2]), [0, 0.0])
            cr[0] += 1
            cr[1] += n.end - n.start
    ns = len(steady)
    op_rows = sorted((OpTime(name, dts, shp, c / ns, s / 1e6 / ns, t / 1e6 / ns,
                             _conversion({"name": name, "args": {"Input type":
                                                                 dts.split(",")}}))
                      for (name, dts, shp), (c, s, t) in agg.items()),
                     key=lambda o: -o.self_time)
    conversions = {
        "per_step": {k: {"count": v[0] / ns, "seconds": v[1] / 1e6 / ns} for k, v in conv.items()},
        "count": sum(v[0] for v in conv.values()) / ns,
        "seconds": sum(v[1] for v in conv.values()) / 1e6 / ns,
        "ops": [{"kind": kind, "op": name, "dtypes": dts, "count": c / ns,
                 "seconds": s / 1e6 / ns}
                for (kind, name, dts), (c, s) in sorted(conv_rows.items(),
                                                        key=lambda kv: -kv[1][1])],
    }
    op_classes = {c: {"calls": classes[c][0] / ns, "self": classes[c][1] / 1e6 / ns}
                  for c in OP_CLASSES if c in classes}
    memory = _memory(events, steps, rows) if facts.get("profile_memory") else {}
    device = device_activity(xs, steps, steady)
    spans = [(int(r["index"]), "phase", ph, "", r[f"t_{ph}"], r[ph]) for r in rows
             for ph in ("step", "data", "forward", "backward", "optimizer") if r[ph] > 0]
    return {"path": str(p), "framework": facts.get("framework", "torch"), "marked": marked,
            "rows": rows, "ops": op_rows, "conversions": conversions, "op_classes": op_classes,
            "memory": memory, "spans": spans, "facts": facts, "device": device}


_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_SYNC = re.compile(r"cuda(?:Device|Stream|Event)Synchronize|cudaStreamWaitEvent|cudaMemcpy$|"
                   r"cuCtxSynchronize|cuStreamSynchronize|cuEventSynchronize")
_LAUNCH = re.compile(r"cudaLaunchKernel|cuLaunchKernel|cudaLaunchCooperativeKernel|"
                     r"cudaGraphLaunch|cudaMemcpyAsync|cudaMemsetAsync")
GAP_MIN_US = 1.0  # device gaps shorter than this are the hardware's, not idleness


def _merge(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _clip(iv: list[tuple[float, float]], lo: float, hi: float,
          starts: list[float] | None = None) -> list[tuple[float, float]]:
    """The parts of merged intervals ``iv`` (their ``starts``, for a long list) inside
    ``[lo, hi)``."""
    i = max(bisect.bisect_right(starts if starts is not None else [a for a, _ in iv], lo) - 1,
            0)
    out = []
    while i < len(iv) and iv[i][0] < hi:
        a, b = max(iv[i][0], lo), min(iv[i][1], hi)
        if b > a:
            out.append((a, b))
        i += 1
    return out


_Cat = tuple[str, list[tuple[float, float]], list[float]]  # name, merged intervals, starts


def _cat(name: str, events: list[dict[str, Any]]) -> _Cat:
    iv = _merge([(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in events])
    return name, iv, [a for a, _ in iv]


def _attribute(lo: float, hi: float, cats: list[_Cat]) -> dict[str, float]:
    """Split ``[lo, hi)`` among host activities (merged intervals, in priority order); what
    none covers is ``none``."""
    pts = {lo, hi}
    clipped = []
    for name, iv, starts in cats:
        c = _clip(iv, lo, hi, starts)
        clipped.append((name, c))
        for a, b in c:
            pts.update((a, b))
    xs = sorted(pts)
    out = {name: 0.0 for name, _, _ in cats}
    out["none"] = 0.0
    for x0, x1 in zip(xs, xs[1:]):
        mid = (x0 + x1) / 2
        for name, c in clipped:
            if any(a <= mid < b for a, b in c):
                out[name] += x1 - x0
                break
        else:
            out["none"] += x1 - x0
    return out


def device_activity(xs: list[dict[str, Any]], steps: list[tuple[int, float, float, Any]],
                    steady: set[int]) -> dict[str, Any]:
    """GPU activity per steady step from the trace's device events (``kernel``, ``gpu_memcpy``,
    ``gpu_memset``; CUDA: Kineto puts them on the device's own timeline, aligned to the host
    clock): busy time (the union of the device's events inside the host's step window), idle
    time and gaps, and what the host's step thread was doing while the device sat idle --
    ``data`` (``enumerate(DataLoader)``), ``sync`` (``cuda*Synchronize``, blocking
    ``cudaMemcpy``), ``host`` (ops and kernel launches: the device waits for the host to feed
    it), ``none`` (nothing traced: Python between ops). Also the median delay from a kernel's
    launch call to its start (correlation ids): near zero, the device's queue is empty.
    ``{}`` without device events (a CPU run)."""
    dev = [e for e in xs if e.get("cat") in _DEVICE_CATS]
    if not dev:
        return {}
    by_dev: dict[str, list[tuple[float, float]]] = {}
    for e in dev:
        a = e.get("args") or {}
        d = a.get("device", e.get("pid"))
        t = float(e["ts"])
        by_dev.setdefault(f"cuda:{d}", []).append((t, t + float(e.get("dur", 0.0))))
    launches = {(e.get("args") or {}).get("correlation"): float(e["ts"]) for e in xs
                if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and _LAUNCH.match(str(e.get("name", "")))}
    delays = sorted(float(e["ts"]) - launches[c] for e in dev if e.get("cat") == "kernel"
                    and (c := (e.get("args") or {}).get("correlation")) in launches)
    host_cat = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver")
    per_tid: dict[Any, list[_Cat]] = {}

    def host_of(tid: Any) -> list[_Cat]:  # the step thread's activities, by priority
        if tid not in per_tid:
            host = [e for e in xs if e.get("cat") in host_cat
                    and (tid is None or e.get("tid") == tid)]
            per_tid[tid] = [
                _cat("data", [e for e in host if _DATA.match(str(e.get("name", "")))]),
                _cat("sync", [e for e in host if _SYNC.match(str(e.get("name", "")))]),
                _cat("host", [e for e in host if not _STEP.fullmatch(str(e.get("name", "")))])]
        return per_tid[tid]

    out: dict[str, Any] = {}
    for name, ivs in sorted(by_dev.items()):
        busy_iv = _merge(ivs)
        busy_starts = [x for x, _ in busy_iv]
        acc = {"busy": 0.0, "idle": 0.0, "gaps": 0.0, "longest_gap": 0.0, "events": 0.0}
        cause = {"data": 0.0, "sync": 0.0, "host": 0.0, "none": 0.0}
        for k, (_, a, b, tid) in enumerate(steps):
            if k not in steady:
                continue
            cats = host_of(tid)
            inside = _clip(busy_iv, a, b, busy_starts)
            acc["busy"] += sum(y - x for x, y in inside)
            acc["events"] += sum(1 for x, y in ivs if a <= x < b)
            edges = [a, *[v for iv in inside for v in iv], b]
            for lo, hi in zip(edges[0::2], edges[1::2]):
                if hi - lo < GAP_MIN_US:
                    continue
                acc["idle"] += hi - lo
                acc["gaps"] += 1
                acc["longest_gap"] = max(acc["longest_gap"], hi - lo)
                for c, v in _attribute(lo, hi, cats).items():
                    cause[c] += v
        n = max(len(steady), 1)
        out[name] = {"busy": acc["busy"] / 1e6 / n, "idle": acc["idle"] / 1e6 / n,
                     "gaps": acc["gaps"] / n, "longest_gap": acc["longest_gap"] / 1e6,
                     "events": acc["events"] / n,
                     "idle_by_host": {c: v / 1e6 / n for c, v in cause.items()}}
    return {"devices": out, "launch_delay_median": (delays[len(delays) // 2] / 1e6
                                                     if delays else None),
            "source": "profiler device events (kernel, gpu_memcpy, gpu_memset)"}


def _memory(events: list[dict[str, Any]], steps: list[tuple[int, float, float, Any]],
            rows: list[dict[str, float]]) -> dict[str, Any]:
    """Peak ``Total Allocated`` bytes inside each phase (over all steps), per device type."""
    mem = sorted((float(e["ts"]), e.get("args") or {}) for e in events
                 if e.get("name") == "[memory]" and isinstance(e.get("ts"), (int, float)))
    if not mem:
        return {}
    ts = np.array([t for t, _ in mem])
    out: dict[str, dict[str, int]] = {}
    for (_, a, b, _), r in zip(steps, rows):
        b0 = r["t_backward"] * 1e6
        b1 = b0 + r["backward"] * 1e6
        o0 = r["t_optimizer"] * 1e6
        spans = {"forward": (a, b0), "backward": (b0, b1),
                 "optimizer": (o0, o0 + r["optimizer"] * 1e6), "step": (a, b)}
        for ph, (lo, hi) in spans.items():
            i, j = np.searchsorted(ts, lo), np.searchsorted(ts, hi, side="right")
            for _, ar in mem[i:j]:
                code = ar.get("Device Type")
                dev = {0: "cpu", 1: "cuda"}.get(code, str(code)) if isinstance(code, int) \
                    else str(code)
                tot = int(ar.get("Total Allocated") or 0)
                d = out.setdefault(dev, {})
                d[ph] = max(d.get(ph, 0), tot)
    return {"peak_allocated": out, "source": "torch.profiler profile_memory [memory] events"}
