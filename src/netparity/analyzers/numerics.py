"""Numerics of one run: where the first NaN/Inf came from, and where float16/bfloat16 would
overflow or underflow.

A stateless analyzer over one trace (read through :meth:`~netparity.trace.Trace.scan` only).
The method is the reference FAQ's "loss is NaN/INF": find the throw point, the first call whose
output is non-finite while its inputs are finite (*introduced*), then the calls that merely
carried it on (*propagated*). A call is one module or op call (records sharing an ``event``);
op records are preferred when the trace has them (the finest place), module records otherwise.
When no call introduces the first non-finite value it *entered* from outside the captured calls:
the data batch, or a parameter made non-finite by an update.

:func:`analyze` combines this with :mod:`netparity.analyzers.health` (weights not updating, the
loss explosion window) into one :class:`NumericsResult`, what ``netparity numerics`` shows.

Example:
    >>> from netparity.analyzers.numerics import analyze           # doctest: +SKIP
    >>> r = analyze("runs/ref")                                     # doctest: +SKIP
    >>> r.first_nonfinite.module, r.first_nonfinite.op, r.first_nonfinite.cause  # doctest: +SKIP
    ('block.norm', 'log', 'log of zero or negative input (min 0, 12 zeros)')
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from netparity.analyzers.health import (
    Explosion,
    ParamUpdate,
    loss_explosion,
    loss_scale_history,
    rank_consistency,
    update_jumps,
    weight_updates,
)
from netparity.capture.nonfinite import FORMATS, HALF, SINGULAR, classify
from netparity.errors import NetparityError
from netparity.trace import Trace, open_trace
from netparity.trace.vocab import OVERWRITING_OPS, UNINITIALISED_OPS

_COLUMNS = ("seq", "step", "kind", "direction", "role", "arg", "event", "module", "op", "native",
            "dtype", "numel", "source", "s_min", "s_max", "s_mean", "s_std", "s_nan", "s_posinf",
            "s_neginf", "s_zeros", "s_fp16_overflow")


@dataclass
class Origin:
    """Where a non-finite value first appeared.

    ``verdict`` is ``introduced`` (a call made it from finite inputs) or ``entered`` (it was
    already in a call's input: the data batch, a parameter); ``cause`` names the classic cause
    when the statistics show it; ``chain`` lists the calls that then carried it, in order.
    """

    module: str
    op: str
    native: str
    kind: str
    direction: str
    step: int
    rank: int
    seq: int
    source: str
    verdict: str
    cause: str = ""
    dtype: str = ""
    inputs: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    chain: list[str] = field(default_factory=list)
    forward_op: str = ""  # backward: the forward op/module the gradient belongs to
    node: str = ""  # backward op level: the autograd node that ran it (``SqrtBackward0``)

    @property
    def where(self) -> str:
        """``module / op`` (op records) or the module path (``(root)`` for the model)."""
        mod = self.module or "(root)"
        return f"{mod} / {self.op}" if self.kind == "op" else mod


@dataclass
class RiskRow:
    """One tensor's float16/bfloat16 range risk (statistics of its first occurrence)."""

    step: int
    seq: int
    kind: str
    direction: str
    module: str
    op: str
    role: str
    arg: str
    dtype: str
    numel: int
    amax: float  # largest finite |x|
    of_fp16_max: float  # amax / 65504
    of_own_max: float  # amax / the tensor's own dtype max
    fp16_overflow: int  # exact count of finite values beyond 65504
    fp16_underflow: float  # estimated share of non-zero values below float16's smallest normal
    bf16_underflow: float  # the same for bfloat16
    source: str = ""


@dataclass
class Overflow:
    """Float16/bfloat16 range risk of a run (item "overflow" of the JSON).

    ``first_fp16_overflow``: the first tensor holding finite values beyond 65504 (in a float32
    run: where float16 would overflow first). ``first_overflow``: in a float16/bfloat16 run,
    the first call whose low-precision output is infinite while its inputs are finite.
    Underflow shares are *estimates*: exact when the statistics bound every value (max |x|
    below the threshold, or min above it), otherwise the share of a normal distribution with
    the tensor's mean and std, scaled by its non-zero share.
    """

    records: int = 0  # float tensors examined
    fp16_overflow_records: int = 0
    first_fp16_overflow: RiskRow | None = None
    first_overflow: Origin | None = None
    max_of_fp16: float = 0.0
    top: list[RiskRow] = field(default_factory=list)
    underflow: list[RiskRow] = field(default_factory=list)


@dataclass
class NumericsResult:
    """Everything ``netparity numerics`` reports; truthy when the run is healthy."""

    path: str
    ranks: list[int]
    steps: list[int]
    first_nonfinite: Origin | None = None
    first_backward: Origin | None = None
    nonfinite_records: int = 0
    overflow: Overflow = field(default_factory=Overflow)
    loss_scale: dict[str, Any] | None = None
    not_updating: list[ParamUpdate] = field(default_factory=list)
    updates: list[ParamUpdate] = field(default_factory=list)
    explosion: Explosion | None = None
    live_stop: dict[str, Any] | None = None  # what a stop_on_nonfinite capture saved
    # gradients after all-reduce and parameters across ranks (None: one rank)
    ranks_consistent: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    #: the run's modules, (path, class), first call order (the network view's tree)
    modules: list[tuple[str, str]] = field(default_factory=list)
    #: what this kind of trace cannot show (a MindSpore graph dump: :data:`GRAPH_DUMP_UNSEEN`),
    #: said with the verdict so that a healthy one is never silent about it
    unseen: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        """One line per problem found (empty when healthy)."""
        out = []
        ls = self.loss_scale or {}
        out += ls.get("warnings", [])
        if self.first_nonfinite is not None and ls.get("handled"):
            pass  # overflowing steps that loss scaling skipped: expected, not a problem
        elif self.first_nonfinite is not None:
            o = self.first_nonfinite
            out.append(f"non-finite values from {o.where} ({o.direction}, step {o.step})")
        elif self.live_stop is not None:
            out.append(f"the run stopped at non-finite values from {self.live_stop.get('op')}")
        out += [f"parameter {p.name} is not updating ({p.reason})" for p in self.not_updating
                if p.severity == "fail"]
        rc = (self.ranks_consistent or {}).get("first")
        if rc:
            out.append(f"rank {rc['rank']} {rank_diff(rc)}")
        if self.explosion is not None and self.explosion.found:
            e = self.explosion
            cause = e.lr_cause if "likely cause" in e.lr_cause else e.update_cause
            out.append(f"loss {e.kind} at step {e.step}"
                       + (f" ({cause.split(': the likely')[0]})" if cause else ""))
        return out

    def __bool__(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["healthy"] = bool(self)
        d["problems"] = self.problems
        return d


# ---- reading ---------------------------------------------------------------------------------
class _Rows:
    """The scanned columns of one rank as plain arrays (text as object arrays)."""

    def __init__(self, tr: Trace, rank: int, **filters: Any):
        self.tr, self.rank = tr, rank
        cols = tr.scan(_COLUMNS, rank=rank, **filters)
        self.n = cols.n
        self.a: dict[str, np.ndarray] = {}
        for c in _COLUMNS:
            v = cols[c]
            if hasattr(v, "objects"):
                v = v.objects()
            elif v.dtype.kind == "i" and c.startswith("s_"):
                v = np.where(cols.null(c), 0, v)  # a count that was never computed is no count
            self.a[c] = v
        self.bad = (self.a["s_nan"] + self.a["s_posinf"] + self.a["s_neginf"]) > 0
        if self.bad.any():
            # memory nobody wrote yet: an allocation's output (traces from before those ops
            # were skipped), and the destination an op is about to overwrite whole (``copy_``'s
            # first argument, an ``out=`` tensor) -- often that allocation's garbage
            op, role, arg = self.a["op"], self.a["role"], self.a["arg"]
            overwritten = (role == "input") & (
                (np.isin(op, list(OVERWRITING_OPS)) & (arg == "0")) | (arg == "kw.out"))
            self.bad &= ~(np.isin(op, list(UNINITIALISED_OPS)) | overwritten)

    def __getitem__(self, c: str) -> np.ndarray:
        return self.a[c]

    def at(self, seq: int) -> int:
        """Row of sequence number ``seq`` (rows are in execution order: a binary search)."""
        return int(np.searchsorted(self.a["seq"], seq))

    def stats(self, i: int) -> dict[str, Any]:
        """Record ``i``'s identity and statistics, JSON-ready."""
        a = self.a
        d: dict[str, Any] = {"role": a["role"][i], "arg": a["arg"][i], "dtype": a["dtype"][i],
                             "numel": int(a["numel"][i])}
        for k in ("min", "max", "mean", "std"):
            v = float(a[f"s_{k}"][i])
            d[k] = None if math.isnan(v) else v
        for k in ("nan", "posinf", "neginf", "zeros", "fp16_overflow"):
            d[k] = int(a[f"s_{k}"][i])
        return d


def _open(trace: Trace | str | os.PathLike[str]) -> Trace:
    return trace if isinstance(trace, Trace) else open_trace(trace)


# ---- NaN/Inf origin --------------------------------------------------------------------------
def _calls(rows: _Rows, kind: str) -> dict[int, dict[str, Any]]:
    """Per event of ``kind`` calls: first seq, first bad output seq, input/output badness."""
    a = rows.a
    idx = np.nonzero(a["kind"] == kind)[0]
    out: dict[int, dict[str, Any]] = {}
    if not len(idx):
        return out
    ev = a["event"][idx]
    uniq, inv = np.unique(ev, return_inverse=True)
    is_in = a["role"][idx] == "input"
    bad = rows.bad[idx]
    seq = a["seq"][idx]
    first = np.full(len(uniq), np.iinfo(np.int64).max)
    np.minimum.at(first, inv, seq)
    in_bad = np.zeros(len(uniq), bool)
    np.logical_or.at(in_bad, inv, bad & is_in)
    out_bad_seq = np.full(len(uniq), np.iinfo(np.int64).max)
    sel = bad & ~is_in
    np.minimum.at(out_bad_seq, inv[sel], seq[sel])
    for j in np.nonzero(out_bad_seq < np.iinfo(np.int64).max)[0]:
        out[int(uniq[j])] = {"start": int(first[j]), "bad_seq": int(out_bad_seq[j]),
                             "in_bad": bool(in_bad[j])}
    return out


def _describe(rows: _Rows, ev: int, kind: str, verdict: str, rank: int,
              at_seq: int) -> Origin:
    a = rows.a
    i0 = rows.at(at_seq)
    idx = np.nonzero((a["event"] == ev) & (a["kind"] == kind))[0] if ev >= 0 else \
        np.array([i0])
    ins = [rows.stats(int(i)) for i in idx if a["role"][i] == "input"]
    outs = [rows.stats(int(i)) for i in idx if a["role"][i] != "input"]
    return Origin(module=str(a["module"][i0]), op=str(a["op"][i0]), native=str(a["native"][i0]),
                  kind=str(a["kind"][i0]), direction=str(a["direction"][i0]),
                  step=int(a["step"][i0]), rank=rank, seq=at_seq, source=str(a["source"][i0]),
                  verdict=verdict, dtype=str(a["dtype"][i0]), inputs=ins, outputs=outs)


def _cause(o: Origin) -> str:
    """The classic cause the statistics of an introducing call show, or ``""``."""
    return classify(o.op, o.inputs, o.outputs, o.dtype)


def _entered_cause(rows: _Rows, i: int) -> str:
    a = rows.a
    kind, role = a["kind"][i], a["role"][i]
    if kind == "data":
        return f"NaN/Inf already in the data batch {a['module'][i]!r}"
    if kind == "param":
        name, step = a["module"][i], a["step"][i]
        g = (a["kind"] == "grad") & (a["module"] == name) & (a["step"] == step)
        how = ("its gradient was NaN/Inf" if (rows.bad & g).any() else
               "its gradient was finite: the optimizer made it" if g.any() else
               "no gradient recorded")
        return f"NaN/Inf in parameter {name} after the update of step {int(step)} ({how})"
    if kind == "grad":
        return f"NaN/Inf in the gradient of {a['module'][i]} (produced outside captured calls)"
    if kind == "loss":
        return "NaN/Inf in the loss (computed outside captured calls)"
    if role == "input" and a["direction"][i] == "forward":
        return "NaN/Inf already in the input of the first captured call (the data batch)"
    return "NaN/Inf from outside the captured calls"


def _node_of(rows: _Rows, o: Origin, key: str = "node") -> str:
    """The autograd node that ran backward op ``o`` (recorded in its call's ``extra``; another
    ``key`` of it: e.g. a MindSpore dump kernel's full ``scope``)."""
    if o.kind != "op":
        return ""
    ev = int(rows.a["event"][rows.at(o.seq)])
    try:
        cols = rows.tr.scan(["extra"], rank=rows.rank, kind="op", event=ev)
        texts = cols["extra"].objects() if cols.n else []
    except NetparityError:
        return ""
    for t in texts:
        try:
            node = json.loads(t).get(key) if t else None
        except (ValueError, AttributeError):
            continue
        if isinstance(node, str) and node:
            return node
    return ""


def _node_forward(rows: _Rows, o: Origin, fwd: np.ndarray) -> int | None:
    """The forward op record (an input row of ``fwd``) whose derivative ``o.node`` computes:
    ``SqrtBackward0`` (or a MindSpore dump's ``Grad_Sqrt`` scope) -> the ``sqrt`` of the same
    module and step, the one at a zero or negative input first."""
    base = re.sub(r"^Grad_|Backward\d*$", "", o.node).lower()
    if not base:
        return None
    a = rows.a
    hits = [int(i) for i in fwd if a["kind"][i] == "op" and (
        str(a["native"][i]).split(".")[1:2] == [base] or str(a["op"][i]) == base)]
    edge = [i for i in hits if a["s_zeros"][i]
            or (not math.isnan(a["s_min"][i]) and a["s_min"][i] <= 0)]
    return (edge or hits)[0] if hits else None


def _backward_link(rows: _Rows, o: Origin) -> str:
    """For a backward origin: the forward op (or module) whose derivative it computes -- the
    op of its autograd node when the capture recorded it, else the first singular op at a
    zero input."""
    a = rows.a
    fwd = np.nonzero((a["direction"] == "forward") & (a["step"] == o.step)
                     & (a["module"] == o.module) & (a["role"] == "input"))[0]
    o.node = _node_of(rows, o)
    j = _node_forward(rows, o, fwd) if o.node else None
    if j is not None:
        fwd = np.array([j])
        if a["source"][j]:  # the line of the forward op, not the one calling backward()
            o.source = str(a["source"][j])
    why = {"sqrt": "its derivative 1/(2*sqrt(x)) is infinite at 0",
           "log": "its derivative 1/x is infinite at 0",
           "div": "its derivative 1/y^2 is infinite at y=0",
           "pow": "a fractional power's derivative is infinite at 0"}
    for i in fwd:
        op = str(a["op"][i])
        if a["kind"][i] != "op" or op not in SINGULAR:
            continue
        if a["s_zeros"][i] or (not math.isnan(a["s_min"][i]) and a["s_min"][i] <= 0):
            at = f" at {a['source'][i]}" if a["source"][i] else ""
            o.forward_op = f"{o.module or '(root)'} / {op}{at}"
            w = why.get(SINGULAR[op], "")
            return (f"backward of {op} at an input of zero (forward input min "
                    f"{a['s_min'][i]:.3g}, {int(a['s_zeros'][i])} zeros)"
                    + (f": {w}" if w else ""))
    if j is not None:
        at = f" at {a['source'][j]}" if a["source"][j] else ""
        o.forward_op = f"{o.module or '(root)'} / {a['op'][j]}{at}"
    elif o.module or o.kind == "module":
        o.forward_op = o.module or "(root)"
    return ""


def _chain(rows: _Rows, calls: dict[int, dict[str, Any]], kind: str, after: int,
           limit: int = 8) -> list[str]:
    a = rows.a
    seen: list[str] = []
    for c in sorted(calls.values(), key=lambda c: c["bad_seq"]):
        if c["bad_seq"] <= after or not c["in_bad"]:
            continue
        i = rows.at(c["bad_seq"])
        name = (f"{a['module'][i] or '(root)'} / {a['op'][i]}" if kind == "op"
                else (a["module"][i] or "(root)"))
        name = f"{name} ({a['direction'][i]})"
        if not seen or seen[-1] != name:
            seen.append(name)
        if len(seen) >= limit:
            break
    return seen


def _origin(rows: _Rows, rank: int, direction: str | None = None) -> Origin | None:
    """The first non-finite value of one rank (in ``direction`` only, when given)."""
    a = rows.a
    bad = rows.bad if direction is None else rows.bad & (a["direction"] == direction)
    if not bad.any():
        return None
    first_bad = int(a["seq"][np.nonzero(bad)[0][0]])
    kind = "op" if (a["kind"] == "op").any() else "module"
    calls = _calls(rows, kind)
    intro = [(c["start"], c["bad_seq"], ev) for ev, c in calls.items() if not c["in_bad"]
             and (direction is None
                  or a["direction"][rows.at(c["bad_seq"])] == direction)]
    # calls that were running when the first bad value appeared; nested module calls all
    # qualify, and the innermost is the one that returned its bad output first
    cover = sorted((b, ev) for start, b, ev in intro if start <= first_bad)
    if cover:
        bad_seq, ev = cover[0]
        o = _describe(rows, ev, kind, "introduced", rank, bad_seq)
        o.cause = _cause(o)
        if o.direction == "backward" and not o.cause:
            o.cause = _backward_link(rows, o)
        elif o.direction == "backward":
            _backward_link(rows, o)
        if o.node and o.node not in o.cause:
            o.cause = f"{o.cause}; in {o.node}" if o.cause else f"in {o.node}"
        if not o.cause and o.kind == "module":
            o.cause = _param_cause(rows, o)
        if not o.cause and o.kind == "module" and o.direction == "backward" \
                and rows.tr.framework == "mindspore":
            o.cause = MINDSPORE_BACKWARD
        if not o.module and rows.tr.manifest.get("source") == "mindspore-dump":
            scope = _node_of(rows, o, "scope")
            if scope:  # a function compiled whole (@ms.jit, value_and_grad): no Cell scopes
                o.cause += (f"; the dump's kernel {scope} names no Cell (a function compiled "
                            "whole, e.g. @ms.jit: Cells run inside it leave no scope)")
        if not o.cause and o.direction == "update":
            o.cause = ("made by the optimizer's update from finite parameters and gradients "
                       "(learning rate, eps, or an optimizer state)")
    else:
        i = int(np.nonzero(bad)[0][0])
        o = _describe(rows, -1, str(a["kind"][i]), "entered", rank, first_bad)
        o.cause = _entered_cause(rows, i)
        bad_seq = first_bad
    o.chain = _chain(rows, calls, kind, bad_seq)
    return o


#: the cause of a MindSpore backward origin at Cell level: the finest the capture can name
MINDSPORE_BACKWARD = (
    "its gradient w.r.t. its inputs turns NaN/Inf from a finite gradient of its output; op "
    "level is not available for MindSpore backward (the capture sees no backward primitives: "
    "MindSpore's C++ grad executor runs them), so look at the derivatives of this Cell's "
    "forward ops (sqrt, log, division, pow of a zero or negative value)")


def _param_cause(rows: _Rows, o: Origin) -> str:
    """A module that makes NaN from finite inputs: a non-finite parameter of it, if any."""
    a = rows.a
    pre = f"{o.module}." if o.module else ""
    prm = np.nonzero((a["kind"] == "param") & rows.bad & (a["step"] < o.step))[0]
    for i in prm:
        name = str(a["module"][i])
        if name.startswith(pre) and "." not in name[len(pre):]:
            return (f"NaN/Inf in parameter {name} after the update of step "
                    f"{int(a['step'][i])}")
    return ""


# ---- overflow / underflow risk ---------------------------------------------------------------
def _under_share(mn: np.ndarray, mx: np.ndarray, mean: np.ndarray, std: np.ndarray,
                 nonzero: np.ndarray, t: float) -> np.ndarray:
    """Share of values with 0 < |x| < t: exact where min/max bound it, else a normal model."""
    from math import erf, sqrt

    amax = np.maximum(np.abs(mn), np.abs(mx))
    out = np.zeros(len(mn))
    for i in range(len(mn)):
        if not nonzero[i] or math.isnan(amax[i]):
            continue
        if amax[i] < t:
            out[i] = nonzero[i]
        elif mn[i] >= t or mx[i] <= -t:
            out[i] = 0.0
        elif 0 < std[i] < math.inf and math.isfinite(mean[i]):  # an infinite spread: no model
            def cdf(z: float) -> float:
                return 0.5 * (1.0 + erf(z / sqrt(2.0)))
            p = cdf((t - mean[i]) / std[i]) - cdf((-t - mean[i]) / std[i])
            out[i] = min(nonzero[i], max(0.0, p))
    return out


def overflow_risk(trace: Trace | str | os.PathLike[str], *, rank: int = 0, top: int = 15,
                  underflow_min: float = 0.01) -> Overflow:
    """Where float16/bfloat16 would overflow or underflow, from the statistics of every
    floating-point tensor (first occurrence per module/op/role/argument).

    Args:
        trace: the trace (path or :class:`~netparity.trace.Trace`).
        rank: which rank.
        top: rows of the largest-|x| table.
        underflow_min: estimated underflow share from which a tensor is listed.

    Example:
        >>> ov = overflow_risk("runs/fp32")                    # doctest: +SKIP
        >>> ov.first_fp16_overflow.module if ov.first_fp16_overflow else None  # doctest: +SKIP
    """
    tr = _open(trace)
    rows = _Rows(tr, rank)
    return _overflow(rows, rank, top=top, underflow_min=underflow_min)


def _overflow(rows: _Rows, rank: int, *, top: int = 15, underflow_min: float = 0.01) -> Overflow:
    a = rows.a
    dt = a["dtype"]
    fl = np.isin(dt, list(FORMATS)) & (a["numel"] > 0)
    idx = np.nonzero(fl)[0]
    res = Overflow(records=int(len(idx)))
    if not len(idx):
        return res
    mn, mx = a["s_min"][idx], a["s_max"][idx]
    amax = np.fmax(np.abs(mn), np.abs(mx))
    own = np.array([FORMATS[d][0] for d in dt[idx]])
    numel = a["numel"][idx].astype(np.float64)
    nonzero = 1.0 - a["s_zeros"][idx] / numel - (a["s_nan"][idx] + a["s_posinf"][idx]
                                                  + a["s_neginf"][idx]) / numel
    u16 = _under_share(mn, mx, a["s_mean"][idx], a["s_std"][idx], nonzero, FORMATS["float16"][1])
    ub16 = _under_share(mn, mx, a["s_mean"][idx], a["s_std"][idx], nonzero,
                        FORMATS["bfloat16"][1])
    ovf = a["s_fp16_overflow"][idx]
    res.fp16_overflow_records = int((ovf > 0).sum())

    def row(j: int) -> RiskRow:
        i = int(idx[j])
        am = float(amax[j]) if not math.isnan(amax[j]) else 0.0
        return RiskRow(step=int(a["step"][i]), seq=int(a["seq"][i]), kind=str(a["kind"][i]),
                       direction=str(a["direction"][i]), module=str(a["module"][i]),
                       op=str(a["op"][i]), role=str(a["role"][i]), arg=str(a["arg"][i]),
                       dtype=str(dt[i]), numel=int(a["numel"][i]), amax=am,
                       of_fp16_max=am / 65504.0, of_own_max=am / float(own[j]),
                       fp16_overflow=int(ovf[j]), fp16_underflow=float(u16[j]),
                       bf16_underflow=float(ub16[j]), source=str(a["source"][i]))

    hit = np.nonzero(ovf > 0)[0]
    if len(hit):
        res.first_fp16_overflow = row(int(hit[0]))
    finite_amax = np.where(np.isnan(amax), -1.0, amax)
    res.max_of_fp16 = float(finite_amax.max()) / 65504.0 if len(finite_amax) else 0.0
    # one row per tensor identity (the first step it appears in): a 100-step trace would
    # otherwise list the same activation 100 times
    seen: set[tuple[str, ...]] = set()
    for j in np.argsort(-finite_amax, kind="stable"):
        i = int(idx[j])
        key = (a["kind"][i], a["direction"][i], a["module"][i], a["op"][i], a["role"][i],
               a["arg"][i])
        if key in seen:
            continue
        seen.add(key)
        res.top.append(row(int(j)))
        if len(res.top) >= top:
            break
    seen.clear()
    for j in np.argsort(-u16, kind="stable"):
        if u16[j] < underflow_min or len(res.underflow) >= top:
            break
        i = int(idx[j])
        key = (a["kind"][i], a["direction"][i], a["module"][i], a["op"][i], a["role"][i],
               a["arg"][i])
        if key not in seen:
            seen.add(key)
            res.underflow.append(row(int(j)))
    # a low-precision run: the first call whose float16/bfloat16 output is infinite while its
    # inputs are finite is "the op that overflowed first"
    for kind in ("op", "module"):
        calls = _calls(rows, kind)
        for ev, c in sorted(calls.items(), key=lambda kv: kv[1]["bad_seq"]):
            i = rows.at(c["bad_seq"])
            if c["in_bad"] or dt[i] not in HALF or not (a["s_posinf"][i] or a["s_neginf"][i]):
                continue
            o = _describe(rows, ev, kind, "introduced", rank, c["bad_seq"])
            o.cause = _cause(o)
            res.first_overflow = o
            break
        if res.first_overflow is not None or calls:
            break
    return res


# ---- the whole analysis ----------------------------------------------------------------------
def find_nonfinite(trace: Trace | str | os.PathLike[str], *, rank: int | None = None
                   ) -> tuple[Origin | None, Origin | None, int]:
    """The first NaN/Inf origin of a run, the first backward origin and the number of records
    holding NaN/Inf.

    Ranks are searched in turn; the origin in the earliest step wins (ties: lowest rank).

    Example:
        >>> origin, backward, n = find_nonfinite("runs/nan")   # doctest: +SKIP
        >>> origin.verdict, origin.direction                   # doctest: +SKIP
        ('introduced', 'forward')
    """
    tr = _open(trace)
    first: Origin | None = None
    back: Origin | None = None
    n = 0
    for r in ([rank] if rank is not None else tr.ranks):
        rows = _Rows(tr, r)
        n += int(rows.bad.sum())
        o = _origin(rows, r)
        if o is not None and (first is None or o.step < first.step):
            first = o
        b = o if o is not None and o.direction == "backward" else _origin(rows, r, "backward")
        if b is not None and (back is None or b.step < back.step):
            back = b
    return first, back, n


#: the record kinds a numerics verdict rests on
JUDGED_KINDS = ("module", "op", "param", "grad", "loss")


def _module_list(tr: Trace, rank: int) -> list[tuple[str, str]]:
    """The run's modules as (path, class), in first-call order (one column scan)."""
    if rank not in tr.ranks:
        return []
    cols = tr.scan(["module", "native"], rank=rank, kind="module", direction="forward")
    seen: dict[str, str] = {}
    for path, cls in zip(cols["module"].objects(), cols["native"].objects()):
        seen.setdefault(str(path or ""), str(cls or "").rsplit(".", 1)[-1])
    return list(seen.items())


def nothing_to_judge(tr: Trace, rank: int | None = None) -> str | None:
    """Why ``tr`` (one rank, or all) holds nothing a numerics verdict could rest on -- no
    module, op, parameter, gradient or loss record: an empty trace, or a profile-only one
    (timing records) -- or None when it holds something. Read from the index alone."""
    from netparity.trace.coverage import contents

    ranks = [rank] if rank is not None else tr.ranks
    if any(k in JUDGED_KINDS for r in ranks if r in tr.ranks for _, _, k in contents(tr, r)):
        return None
    what = "records" if not any(contents(tr, r) for r in ranks if r in tr.ranks) else \
        "module, op, param, grad or loss records (a profile-only trace: `netparity perf` reads it)"
    return (f"nothing to judge: {tr.path}" + (f" rank {rank}" if rank is not None else "")
            + f" holds no {what}")


#: what a trace imported from MindSpore's graph-mode dump (``netparity run``'s ``OUT-graph``,
#: ``netparity msdump import``) cannot show: the dump holds kernels and parameters only
GRAPH_DUMP_UNSEEN = [
    "the loss (no loss records: the loss explosion check has nothing to judge)",
    "the learning rate per step",
    "the optimizer's parameter list (a parameter left out of it looks frozen)",
    "parameter gradients by name (no gradient records)",
]


#: a MindSpore dump of the optimizer's graph alone (a PyNative script whose ``TrainOneStepCell``
#: or ``Model.train`` compiles only the update)
OPTIMIZER_GRAPH_ONLY = (
    "the network's forward and backward kernels (the dump holds only the optimizer's compiled "
    "graph: the network ran in PyNative, judge the PyNative trace of the same run)")


def graph_dump_unseen(tr: Trace, rank: int) -> list[str]:
    """What a trace imported from a MindSpore graph dump does not show, of
    :data:`GRAPH_DUMP_UNSEEN`: the dump's import recovers the loss, the learning rate, the
    optimizer's parameter list and gradients by name where the dump holds them
    (:mod:`netparity.frameworks.mindspore.dumpderive`)."""
    from netparity.capture.notes import optimizer_notes
    from netparity.frameworks.mindspore.dumpderive import FROZEN_UNSURE
    from netparity.trace.coverage import contents

    got = contents(tr, rank)
    kinds = {k for _, _, k in got}
    notes = optimizer_notes(tr, rank)
    have = ["loss" in kinds, bool(notes.get("lr")), bool(notes.get("optimizers")),
            "grad" in kinds]
    out = [u for u, seen in zip(GRAPH_DUMP_UNSEEN, have) if not seen]
    if not any(k == "op" and d in ("forward", "backward") for _, d, k in got):
        out.insert(0, OPTIMIZER_GRAPH_ONLY)
    if notes.get("optimizers") and notes.get("frozen"):
        out.append(FROZEN_UNSURE)
    return out


def analyze(trace: Trace | str | os.PathLike[str], *, rank: int | None = None,
            losses: list[tuple[int, float]] | None = None, top: int = 15,
            explosion_factor: float = 10.0) -> NumericsResult:
    """Numerics and training health of one run: NaN/Inf origin (forward and backward),
    float16/bfloat16 range risk, parameters not updating, the loss explosion window.

    Args:
        trace: the trace (path or :class:`~netparity.trace.Trace`).
        rank: only this rank (default: all ranks; range risk and health use the first).
        losses: ``[(step, loss)]`` read from a log or CSV (:func:`health.read_losses`)
            instead of the trace's ``kind="loss"`` records.
        top: rows of the range-risk tables.
        explosion_factor: a loss this many times the median of the steps before it explodes.

    Raises:
        UsageError: the trace holds nothing to judge (:func:`nothing_to_judge`) and no
            ``losses`` are given: never HEALTHY on no evidence.

    Example:
        >>> r = analyze("runs/ref")                          # doctest: +SKIP
        >>> bool(r), r.to_json()["first_nonfinite"]          # doctest: +SKIP
        (True, None)
    """
    tr = _open(trace)
    empty = nothing_to_judge(tr, rank)
    r0 = rank if rank is not None else (tr.ranks[0] if tr.ranks else 0)
    # a live stop's record (the light stop records nothing else) is evidence of its own
    if empty is not None and not losses and _live_stop(tr, r0) is None:
        from netparity.errors import UsageError

        raise UsageError(empty)
    first, back, n = find_nonfinite(tr, rank=rank)
    res = NumericsResult(path=str(tr.path), ranks=[rank] if rank is not None else tr.ranks,
                         steps=tr.steps(), first_nonfinite=first,
                         # a backward origin of its own: introduced there, not the forward
                         # NaN arriving through the loss
                         first_backward=back if back is not None and back is not first
                         and back.verdict == "introduced" else None,
                         nonfinite_records=n)
    res.overflow = overflow_risk(tr, rank=r0, top=top)
    res.updates, res.not_updating = weight_updates(tr, rank=r0)
    res.explosion = loss_explosion(tr, rank=r0, losses=losses, factor=explosion_factor)
    res.not_updating += update_jumps(res.updates, res.explosion)
    if len(res.steps) < 2:
        res.notes.append(f"{len(res.steps)} captured step(s): weights that never change and "
                         "the loss curve need two or more")
    res.live_stop = _live_stop(tr, r0)
    res.modules = _module_list(tr, r0)
    if res.live_stop is not None and res.first_nonfinite is None:
        res.notes.append("the run was stopped live at a non-finite output that the trace does "
                         "not hold (module-level capture): see the live stop")
    res.loss_scale = loss_scale_history(tr, rank=r0)
    if tr.manifest.get("source") == "mindspore-dump":
        res.unseen = graph_dump_unseen(tr, r0)
    if rank is None:
        res.ranks_consistent = rank_consistency(tr)
    return res


def _live_stop(tr: Trace, rank: int) -> dict[str, Any] | None:
    """The origin a ``stop_on_nonfinite`` capture saved next to this trace, if any."""
    from netparity.capture.nonfinite import load_origin
    from netparity.errors import UsageError

    try:
        info, _ = load_origin(tr.path, rank)
    except UsageError:
        return None
    return {k: info.get(k) for k in ("op", "native", "module", "direction", "step", "rank",
                                      "source", "verdict", "cause", "saved")}


def rank_diff(f: dict[str, Any]) -> str:
    """What differs from rank 0, in words: ``uses a different gradient of 2.weight after
    all-reduce than rank 0 (step 0)``."""
    if f.get("what") == "gradient":
        return (f"uses a different gradient of {f['name']} after all-reduce than rank 0 (step "
                f"{f['step']}): it was not aggregated")
    return f"holds a different {f['name']} than rank 0 after the update of step {f['step']}"
