"""Each captured operator of one trace against a higher-precision reference of itself.

For every op call of the chosen steps (forward and backward; PyTorch aten overloads and
MindSpore primitives alike, through :meth:`FrameworkAdapter.run_op`), the call is made again on
its captured inputs on the reference backend (CPU float64 by default: float inputs widened;
``cpu-fp32``: narrower inputs widened to float32) and each float output is measured against it:

* ``err``: ``||y - r|| / ||r||`` in ULP of the judged dtype (the op's own output dtype, or the
  run's working dtype when the op computes in a narrower one);
* ``round``: the same for an exact rounding of ``r`` to the op's output dtype (what the dtype
  must lose);
* ``cpu``: the same for the op computed in its own dtype on this CPU (only for an op over its
  standard: an ill-conditioned call loses as much in any faithful kernel).

An op is **over** when ``err`` exceeds its dtype's standard and ``KERNEL_RATIO`` times both
``round`` and ``cpu`` (it loses more than its dtype must), **demoted** when it computes in a
dtype narrower than the run's working dtype and loses more than the working dtype's standard,
**overflow** when its output holds Inf/NaN where the reference is finite.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from netparity.errors import FrameworkError, UsageError
from netparity.precision.standards import (
    EMULATE_RISK,
    EPS,
    KERNEL_RATIO,
    STANDARD,
    eps,
    is_float,
)

REFERENCES = {"cpu-fp64": "float64", "cpu-fp32": "float32"}
#: native-name fragments of operators whose result is random (never replayed)
_RANDOM = ("bernoulli", "dropout", "rand", "normal", "uniform", "multinomial", "exponential")
#: MindSpore's CPU BatchNorm leaves outputs 1-2 unwritten (tests/workflow/test_replay_ops_*)
_UNWRITTEN = {"BatchNorm": {"1", "2"}}
#: canonical ops that move values without computing (a view of a narrow tensor loses nothing)
_LAYOUT = frozenset({"reshape", "transpose", "flatten", "squeeze", "expand_dims", "slice",
                     "split", "identity", "concat", "stack", "broadcast"})

Tensors = list[tuple[str, np.ndarray, str]]


@dataclass
class OpPrecision:
    """One op call's worst output against the reference."""

    step: int
    rank: int
    direction: str
    module: str
    op: str
    native: str
    index: int  # the op's index inside its module call
    dtype: str  # the output dtype judged
    judged: str  # the dtype whose ULP the errors are in
    status: str  # ok | over | demoted | overflow | skipped | stats-only
    err: float | None = None
    round: float | None = None
    cpu: float | None = None
    standard: float | None = None
    output: str = ""
    source: str = ""
    reason: str = ""
    emulated: float | None = None  # with --emulate: the op in float16, in float16 ULP
    reference: str = ""  # when not the run's: the backend this op's reference ran on

    @property
    def flagged(self) -> bool:
        return self.status in ("over", "demoted", "overflow")

    @property
    def emulated_status(self) -> str:
        if self.emulated is None:
            return ""
        return "risk" if not self.emulated <= EMULATE_RISK else "ok"

    def where(self) -> str:
        return (f"{self.module or '<root>'} op {self.index} {self.native} ({self.direction}, "
                f"step {self.step})" + (f" at {self.source}" if self.source else ""))


@dataclass
class PrecisionResult:
    trace: str
    framework: str
    reference: str
    working: str  # the working dtype ("own": each op judged in its own dtype)
    ops: list[OpPrecision] = field(default_factory=list)
    seconds: float = 0.0
    steps: list[int] = field(default_factory=list)
    emulate: list[str] = field(default_factory=list)

    @property
    def flagged(self) -> list[OpPrecision]:
        return [o for o in self.ops if o.flagged]

    @property
    def stats_only(self) -> list[OpPrecision]:
        return [o for o in self.ops if o.status == "stats-only"
                or (o.status == "demoted" and o.err is None)]

    @property
    def emulated(self) -> list[OpPrecision]:
        """The op calls run in float16 (``--emulate``), worst first."""
        return sorted((o for o in self.ops if o.emulated is not None),
                      key=lambda o: -(o.emulated or 0.0))

    @property
    def measured(self) -> int:
        return sum(1 for o in self.ops if o.err is not None or o.status == "overflow")

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.ops:
            out[o.status] = out.get(o.status, 0) + 1
        return out

    def needed_capture(self) -> str | None:
        """What a statistics-only trace needs: a short tensor capture of the ops it could not
        replay (their modules and steps)."""
        every = self.stats_only
        if not every:
            return None
        so = [o for o in every if o.flagged] or every  # the ops the dtypes flag first
        mods = sorted({o.module for o in so if o.module})
        steps = sorted({o.step for o in so})
        sel = (mods[:8] + ["..."]) if len(mods) > 8 else mods
        return (f"{len(every)} op calls have statistics only: capture "
                f"{'the ' + str(len(so)) + ' flagged ones' if so is not every else 'them'} "
                "again with tensors, "
                f"e.g. netparity.capture(model, PATH, level='op', payload='tensors', "
                f"steps='{steps[0]}', include={sel!r}) and run precision on that trace")

    def __bool__(self) -> bool:
        return not self.flagged

    def to_json(self) -> dict[str, Any]:
        return {"trace": self.trace, "framework": self.framework, "reference": self.reference,
                "working_dtype": self.working, "steps": self.steps, "seconds": self.seconds,
                "emulate": self.emulate, "standards_ulp": STANDARD, "counts": self.counts(),
                "flagged": [asdict(o) for o in self.flagged],
                "emulated_risk": [asdict(o) for o in self.emulated
                                  if o.emulated_status == "risk"],
                "needed_capture": self.needed_capture(),
                "ops": [asdict(o) for o in self.ops]}


def normwise(y: np.ndarray, r: np.ndarray) -> float:
    """``||y - r|| / ||r||`` over the elements finite in both (float64)."""
    y64 = np.asarray(y, np.float64).ravel()
    r64 = np.asarray(r, np.float64).ravel()
    ok = np.isfinite(y64) & np.isfinite(r64)
    d, rr = y64[ok] - r64[ok], r64[ok]
    den = float(np.sqrt(np.dot(rr, rr)))
    num = float(np.sqrt(np.dot(d, d)))
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / den


def rounded(r: np.ndarray, dtype: str) -> np.ndarray:
    """``r`` rounded exactly (to nearest) to ``dtype``, as float64."""
    r64 = np.asarray(r, np.float64)
    if dtype == "float64":
        return r64
    if dtype == "bfloat16":
        from netparity.dtypes import decode, encode_bf16

        return np.asarray(decode(encode_bf16(r64.astype(np.float32)), "bfloat16"), np.float64)
    with np.errstate(over="ignore"):
        return r64.astype(dtype).astype(np.float64)


def _widen(ins: Tensors, to: str) -> Tensors:
    """Float inputs in ``to`` (never narrowed)."""
    return [(a, v, to if is_float(d) and EPS[d] > EPS[to] else d) for a, v, d in ins]


def _line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:160]


def _is_random(op: str, native: str) -> bool:
    n = native.lower()
    return op == "dropout" or any(k in n for k in _RANDOM)


def _group(recs: Iterable[Any]) -> list[list[Any]]:
    by: dict[tuple[int, int], list[Any]] = {}
    for r in recs:
        if r.direction in ("forward", "backward"):
            by.setdefault((int(r.rank), int(r.event)), []).append(r)
    return sorted(by.values(), key=lambda rs: min(r.seq for r in rs))


def working_dtype(tr: Any, rank: int, steps: list[int]) -> str:
    """The run's working dtype: its parameters' (the widest float dtype among them), else the
    most common float output dtype of its ops."""
    seen: dict[str, int] = {}
    for r in tr.records(step=steps[0], rank=rank, kind="param"):
        if is_float(r.dtype):
            seen[r.dtype] = seen.get(r.dtype, 0) + 1
    if seen:
        return min(seen, key=lambda d: EPS[d])
    for r in tr.records(step=steps[0], rank=rank, kind="op", role="output"):
        if is_float(r.dtype):
            seen[r.dtype] = seen.get(r.dtype, 0) + 1
    return max(seen, key=lambda d: seen[d]) if seen else "float32"


class _Checker:
    def __init__(self, tr: Any, adapter: Any, ref_dtype: str, working: str,
                 emulate: frozenset[str]) -> None:
        self.tr, self.adapter, self.ref_dtype = tr, adapter, ref_dtype
        self.working, self.emulate = working, emulate

    def tensors(self, recs: list[Any], role: str) -> Tensors:
        return [(r.arg, np.asarray(self.tr.tensor(r)), r.dtype) for r in recs if r.role == role]

    def run(self, recs: list[Any], ins: Tensors) -> dict[str, np.ndarray]:
        first = recs[0]
        extra = next((r.extra for r in recs if isinstance(r.extra, dict) and r.extra), {})
        got = self.adapter.run_op(first.native, ins, dict(extra.get("scalars") or {}),
                                  dict(extra["prim"]) if extra.get("prim") else None)
        return dict(got)

    def check(self, recs: list[Any]) -> OpPrecision:
        first = recs[0]
        outs_recs = [r for r in recs if r.role == "output" and is_float(r.dtype)
                     and r.arg not in _UNWRITTEN.get(first.native, ())]
        dtype = outs_recs[0].dtype if outs_recs else (first.dtype or "")
        o = OpPrecision(step=int(first.step), rank=int(first.rank), direction=first.direction,
                        module=first.module, op=first.op, native=first.native,
                        index=int(first.call), dtype=dtype, judged=dtype, status="ok",
                        source=next((r.source for r in recs if r.source), ""))
        if not outs_recs:
            o.status, o.reason = "skipped", "no float output"
            return o
        demoted = self.working != "own" and EPS[dtype] > EPS[self.working]
        o.judged = self.working if demoted else dtype
        o.standard = STANDARD[o.judged]
        if _is_random(first.op, first.native):
            o.status, o.reason = "skipped", "random operator"
            return o
        if not all(r.has_payload for r in recs):
            o.status, o.reason = "stats-only", "no tensors captured"
            if demoted and first.op not in _LAYOUT:  # the dtype alone says it computes below the working precision
                o.status = "demoted"
                o.reason = (f"computes in {dtype} in a {self.working} run (statistics only: "
                            "capture its tensors to measure what it loses)")
            return o
        ins = self.tensors(recs, "input")
        try:
            ref = self.run(recs, _widen(ins, self.ref_dtype))
        except (FrameworkError, RuntimeError, TypeError, ValueError) as e:
            if self.ref_dtype == "float32":
                o.status, o.reason = "skipped", f"not replayable: {_line(e)}"
                return o
            try:  # no float64 kernel (MindSpore's CPU Conv2D, BatchNorm): float32's
                ref = self.run(recs, _widen(ins, "float32"))
            except (FrameworkError, RuntimeError, TypeError, ValueError):
                o.status, o.reason = "skipped", f"not replayable: {_line(e)}"
                return o
            o.reference = "cpu-fp32 (no float64 kernel)"
        worst: tuple[float, float, str, np.ndarray, np.ndarray] | None = None
        unit = eps(o.judged)
        for r in outs_recs:
            if r.arg not in ref:
                continue
            y = np.asarray(self.tr.tensor(r), np.float64)
            rv = np.asarray(ref[r.arg], np.float64)
            if y.shape != rv.shape:
                continue
            if np.any(~np.isfinite(y) & np.isfinite(rv)):
                o.status, o.output = "overflow", r.arg
                o.reason = (f"output {r.arg or '0'} holds Inf/NaN where the {self.ref_dtype} "
                            "reference is finite")
                return o
            err = normwise(y, rv) / unit
            if worst is None or err > worst[0]:
                worst = (err, normwise(rounded(rv, r.dtype), rv) / unit, r.arg, y, rv)
        if worst is None:
            o.status, o.reason = "skipped", "the replay made no comparable output"
            return o
        o.err, o.round, o.output = worst[0], worst[1], worst[2]
        if self.emulate and first.op in self.emulate:
            o.emulated = self._emulated(recs, ins, o.output, worst[4])
        if not o.err > o.standard:
            return o
        if demoted:
            o.status = "demoted"
            o.reason = (f"computes in {dtype} in a {self.working} run: {o.err:.3g} ULP of "
                        f"{self.working} (an exact rounding to {dtype}: {o.round:.3g})")
            return o
        if not o.err > KERNEL_RATIO * o.round:
            return o
        # ill-conditioned call? the same op in its own dtype on this CPU
        try:
            own = self.run(recs, ins).get(o.output)
        except (FrameworkError, RuntimeError, TypeError, ValueError):
            own = None
        if own is not None and np.shape(own) == worst[4].shape:
            o.cpu = normwise(np.asarray(own, np.float64), worst[4]) / unit
            if not o.err > KERNEL_RATIO * o.cpu:
                return o
        o.status = "over"
        o.reason = (f"loses {o.err:.3g} ULP of {dtype} (standard {o.standard:g}; an exact "
                    f"rounding {o.round:.3g}" + (f", this CPU's {dtype} kernel {o.cpu:.3g})"
                                                 if o.cpu is not None else ")"))
        return o

    def _emulated(self, recs: list[Any], ins: Tensors, arg: str, rv: np.ndarray) -> float | None:
        """The op computed in float16 on its captured inputs: its error in float16 ULP."""
        narrow = [(a, v, "float16" if is_float(d) else d) for a, v, d in ins]
        try:
            got = self.run(recs, narrow).get(arg)
        except (FrameworkError, RuntimeError, TypeError, ValueError):
            return None
        if got is None or np.shape(got) != rv.shape:
            return None
        g = np.asarray(got, np.float64)
        if np.any(~np.isfinite(g) & np.isfinite(rv)):
            return math.inf
        return normwise(g, rv) / eps("float16")


def check_precision(trace: Any, *, reference: str = "cpu-fp64", steps: list[int] | None = None,
                    rank: int = 0, working: str = "auto", emulate: frozenset[str] = frozenset(),
                    progress: Callable[[int, int], None] | None = None) -> PrecisionResult:
    """Replay every op call of ``trace`` (an open :class:`~netparity.trace.Trace`) on the
    reference backend and judge it (module docstring). ``working``: ``auto`` (the parameters'
    dtype), a dtype name, or ``own`` (each op in its own dtype: a mixed-precision run)."""
    from netparity.frameworks.registry import get_adapter

    if reference not in REFERENCES:
        raise UsageError(f"--reference {reference!r}: one of {', '.join(REFERENCES)}")
    if working not in ("auto", "own") and not is_float(working):
        raise UsageError(f"--working-dtype {working!r}: auto, own or one of {', '.join(EPS)}")
    have = list(trace.steps())
    chosen = have if steps is None else [s for s in steps if s in have]
    if steps is not None and len(chosen) < len(steps):
        missing = sorted(set(steps) - set(have))
        raise UsageError(f"step {missing[0]} is not in the trace (steps {have})")
    if rank not in trace.ranks or not trace.count(rank=rank, kind="op"):
        raise UsageError(f"{trace.path}: rank {rank} has no op records: capture with "
                         "level='op' (and payload='tensors' for replay)")
    wd = working_dtype(trace, rank, chosen) if working == "auto" else working
    adapter = get_adapter(trace.framework)
    res = PrecisionResult(trace=str(trace.path), framework=trace.framework,
                          reference=reference, working=wd, steps=chosen,
                          emulate=sorted(emulate))
    checker = _Checker(trace, adapter, REFERENCES[reference], wd, emulate)
    t0 = time.perf_counter()
    for s in chosen:
        calls = _group(trace.records(step=s, rank=rank, kind="op"))
        for i, recs in enumerate(calls):
            res.ops.append(checker.check(recs))
            if progress is not None:
                progress(i + 1, len(calls))
    res.seconds = time.perf_counter() - t0
    return res
