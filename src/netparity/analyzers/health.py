"""Training health of one run: weights that do not update, and the step where the loss explodes.

The reference checklist's method (004 §2.1, §2.2), automated on a trace:

* "loss does not decrease -- most likely the weights are not updated": per parameter and step,
  ``||w_after - w_before|| / ||w_before||`` from the parameters captured after each update
  (``kind="param"``) and whether a gradient arrived (``kind="grad"``); parameters that never
  change are named with the likely reason (left out of the optimizer, frozen, detached, zero
  gradient), and update ratios far from the rest are flagged.
* "loss explodes": find the step where it explodes or turns upward, check the weights before
  it (normal weights mean the previous backward was fine), then the first layer whose forward
  output blows up in that step.

Without payloads the update size comes from statistics: a tensor whose eleven statistics are all
unchanged has not changed (exact in practice), and ``| ||w1|| - ||w0|| | / ||w0||`` is a *lower
bound* of the update ratio (``exact=False`` on those rows).

Example:
    >>> from netparity.analyzers.health import weight_updates       # doctest: +SKIP
    >>> rows, stuck = weight_updates("runs/ref")                      # doctest: +SKIP
    >>> [p.name for p in stuck]                                       # doctest: +SKIP
    ['head.bias']
"""

from __future__ import annotations

import csv
import heapq
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from netparity.errors import UsageError
from netparity.trace import Trace, open_trace
from netparity.trace.schema import STAT_FIELDS, Record

#: buffers that training updates without a gradient (never "frozen by mistake")
_BUFFER_LEAVES = ("running_mean", "running_var", "moving_mean", "moving_variance")


@dataclass
class ParamUpdate:
    """Update history of one parameter.

    ``ratio``: median ``||dw|| / ||w||`` over the captured steps (``exact`` when computed from
    stored tensors, else a lower bound from norms); ``severity`` ``fail`` (not updating although
    training should move it), ``warn`` (no gradient and unchanged: frozen on purpose or by
    mistake; or a ratio far outside the rest) or ``""``.
    """

    name: str
    steps: int  # captured values after an update
    grads: int  # steps whose gradient arrived
    grad_norm: float | None
    changed: int  # steps where the value changed
    ratio: float | None
    exact: bool
    reason: str = ""
    severity: str = ""
    #: ``(step, ratio)``: the update of each captured step against the value before it
    by_step: list[tuple[int, float]] = field(default_factory=list)


@dataclass
class Explosion:
    """The loss explosion window.

    ``kind``: ``nonfinite`` (the loss is NaN/Inf), ``jump`` (``factor`` x the median before),
    ``rising`` (turned upward and kept rising) -- ``found`` False when the curve is healthy.
    ``weights_before``: what the parameters captured before that step show; ``layer``: the
    first module whose forward output blows up in that step (``layer_ratio``: its output norm
    against the step before), or ``capture_hint`` when that step's forward was not captured.
    """

    found: bool
    step: int | None = None
    kind: str = ""
    loss_before: float | None = None
    loss_at: float | None = None
    losses: list[tuple[int, float]] = field(default_factory=list)
    weights_before: str = ""
    weights_normal: bool | None = None
    layer: str = ""
    layer_ratio: float | None = None
    layer_source: str = ""
    capture_hint: str = ""
    #: ``(step, learning rate)`` from the optimizers (largest over their parameter groups)
    lr: list[tuple[int, float]] = field(default_factory=list)
    #: the learning rate's part: risen far above the early steps' before the explosion
    lr_cause: str = ""
    #: the update ratio (median over parameters) that jumped against the run's early steps
    update_cause: str = ""


def _open(trace: Trace | str | os.PathLike[str]) -> Trace:
    return trace if isinstance(trace, Trace) else open_trace(trace)


def _same(a: Record, b: Record) -> bool:
    """Statistics identical (NaN equal to NaN): the value did not change."""
    for k in STAT_FIELDS:
        x, y = a.stats.get(k), b.stats.get(k)
        if x != y and not (isinstance(x, float) and isinstance(y, float)
                           and math.isnan(x) and math.isnan(y)):
            return False
    return True


def _delta(tr: Trace, a: Record, b: Record) -> tuple[float, bool]:
    """``||b - a|| / ||a||`` exactly from payloads, else the lower bound from the norms."""
    na = float(a.stats.get("norm") or 0.0)
    if a.has_payload and b.has_payload:
        x = tr.tensor(a).astype(np.float64)
        y = tr.tensor(b).astype(np.float64)
        d = float(np.linalg.norm((y - x).ravel()))
        return (d / na if na else (0.0 if d == 0 else math.inf)), True
    if _same(a, b):
        return 0.0, True
    nb = float(b.stats.get("norm") or 0.0)
    return (abs(nb - na) / na if na else math.inf), False


#: mantissa bits of the low-precision float types whose updates can round away
_MANTISSA = {"bfloat16": 7, "float16": 10}


def _frozen_reason(p: Record) -> str:
    """Why a parameter whose gradient arrives never changes: in a 16-bit float type an update
    below half a unit in the last place of the weight is rounded away (pure bf16/fp16
    training without float32 master weights); otherwise it is not being stepped."""
    bits = _MANTISSA.get(p.dtype)
    big = max(abs(float(p.stats.get("min") or 0.0)), abs(float(p.stats.get("max") or 0.0)))
    if bits is not None and big > 0 and math.isfinite(big):
        ulp = 2.0 ** (math.floor(math.log2(big)) - bits)
        return (f"its gradient arrives but the value never changes: it is stored in {p.dtype}, "
                f"where a weight of magnitude {big:.3g} moves only in steps of {ulp:.2g}, so "
                "every smaller update is rounded away -- keep float32 master weights (mixed "
                "precision) or check the learning rate")
    return ("its gradient arrives but the value never changes: excluded from the optimizer, "
            "learning rate 0, or restored after the step")


def weight_updates(trace: Trace | str | os.PathLike[str], *, rank: int = 0,
                   far: float = 100.0) -> tuple[list[ParamUpdate], list[ParamUpdate]]:
    """Per-parameter update ratios, and the parameters that are not updating.

    Args:
        trace: the trace (path or :class:`~netparity.trace.Trace`).
        rank: which rank.
        far: an update ratio this many times above or below the median of all parameters is
            flagged (``warn``).

    Returns:
        ``(rows, not_updating)``: one :class:`ParamUpdate` per parameter, and those with a
        ``severity``.

    Example:
        >>> rows, stuck = weight_updates("runs/ref")   # doctest: +SKIP
    """
    tr = _open(trace)
    params: dict[str, list[Record]] = {}
    grads: dict[str, list[Record]] = {}
    for r in tr.load_records(rank=rank, kind="param"):
        params.setdefault(r.module, []).append(r)
    for r in tr.load_records(rank=rank, kind="grad"):
        grads.setdefault(r.module, []).append(r)
    if not params and not grads:
        return [], []
    captured_steps = sorted({r.step for rs in params.values() for r in rs})
    # what the capture knew from the optimizers (capture_notes.json): a trainable parameter
    # in none of them, a frozen one -- MindSpore's value_and_grad(fn, None, opt.parameters)
    # gives a left-out one no gradient, so its records alone look frozen
    from netparity.capture.notes import optimizer_notes

    notes = optimizer_notes(tr, rank)
    left_out = set(notes.get("not_in_optimizer") or ())
    frozen = set(notes.get("frozen") or ())
    rows: list[ParamUpdate] = []
    for name in list(params) + [g for g in grads if g not in params]:
        ps = sorted(params.get(name, []), key=lambda r: r.step)
        gs = grads.get(name, [])
        gnorms = [float(g.stats.get("norm") or 0.0) for g in gs]
        ratios: list[float] = []
        exact = True
        changed = 0
        for a, b in zip(ps, ps[1:]):
            d, ex = _delta(tr, a, b)
            exact = exact and ex
            ratios.append(d)
            changed += d != 0.0 or not _same(a, b)
        gmax = max(gnorms) if gnorms else None
        row = ParamUpdate(name=name, steps=len(ps), grads=len(gs), grad_norm=gmax,
                          changed=changed, ratio=float(np.median(ratios)) if ratios else None,
                          exact=exact, by_step=[(b.step, d) for b, d in zip(ps[1:], ratios)])
        leaf = name.rpartition(".")[2]
        if not ps and gs and captured_steps:
            row.severity = "fail"
            row.reason = ("its gradient arrives but it is never updated: left out of the "
                          "optimizer's parameter groups")
        elif name in left_out and changed == 0 and captured_steps and len(ps) != 1:
            row.severity = "fail"
            row.reason = ("trainable but never updated: left out of the optimizer's parameter "
                          "groups (no optimizer holds it -- added or replaced after the "
                          "optimizer was built?)")
        elif name in frozen and changed == 0 and not gs and len(ps) >= 2:
            row.severity = "warn"
            row.reason = "frozen (requires_grad=False, in no optimizer): its value never changes"
        elif len(ps) >= 2 and changed == 0:
            if gs and all(_bad(g) for g in gs):
                row.severity = "fail"
                row.reason = ("its gradient is NaN/Inf at every step, so every update was "
                              "skipped or lost (loss-scale overflow?)")
            elif gs and gmax == 0.0:
                row.severity, row.reason = "fail", "gradient is exactly zero at every step"
            elif gs:
                row.severity = "fail"
                row.reason = _frozen_reason(ps[0])
            elif leaf not in _BUFFER_LEAVES:
                row.severity = "warn"
                row.reason = ("no gradient and the value never changes: frozen "
                              "(requires_grad=False), detached from the graph, or a buffer")
        rows.append(row)
    moving = [r.ratio for r in rows if r.ratio and math.isfinite(r.ratio)]
    if len(moving) >= 3:
        med = float(np.median(np.log10(moving)))
        for pu in rows:
            if pu.severity or not pu.ratio or not math.isfinite(pu.ratio):
                continue
            dev = math.log10(pu.ratio) - med
            # a ratio from norms is a lower bound: "far above" holds, "far below" may not
            if abs(dev) >= math.log10(far) and (dev > 0 or pu.exact):
                pu.severity = "warn"
                pu.reason = (f"update ratio {pu.ratio:.3g} is {10 ** abs(dev):.3g}x "
                            f"{'above' if dev > 0 else 'below'} the median of all parameters "
                            f"({10 ** med:.3g})")
    return rows, [r for r in rows if r.severity]


#: the early steps an update ratio or learning rate is judged against
EARLY_STEPS = 3
#: an update ratio this many times the early steps' is a finding
RATIO_JUMP = 10.0
#: ... when it also moves the weights by at least this share (below: noise of tiny updates)
RATIO_FLOOR = 1e-3
#: a learning rate this many times the early steps' before an explosion is named its cause
LR_RISE = 3.0


def update_jumps(rows: list[ParamUpdate], explosion: Explosion | None = None, *,
                 jump: float = RATIO_JUMP) -> list[ParamUpdate]:
    """Judge update ratios against the run's own early steps (004 §2.1): per step, the median
    ratio over parameters; the first step where it is ``jump`` x the median of the first
    :data:`EARLY_STEPS` steps is a finding. Parameters whose ratio reached ``jump`` x the
    early level get ``severity="warn"``; an ``explosion`` gets the step in
    ``update_cause``. Returns the rows newly flagged."""
    per: dict[int, list[float]] = {}
    for pu in rows:
        for st, r in pu.by_step:
            if math.isfinite(r):
                per.setdefault(st, []).append(r)
    steps = sorted(per)
    med = {st: float(np.median(per[st])) for st in steps}
    early = [med[st] for st in steps[:EARLY_STEPS] if med[st] > 0]
    if len(steps) <= EARLY_STEPS or not early:
        return []
    base = float(np.median(early))
    hit = next((st for st in steps[EARLY_STEPS:]
                if med[st] >= jump * base and med[st] >= RATIO_FLOOR), None)
    if hit is None:
        return []
    if explosion is not None and explosion.found and explosion.step is not None \
            and hit <= explosion.step:
        explosion.update_cause = (
            f"update ratio ||dw||/||w|| (median over parameters) {med[hit]:.3g} at step "
            f"{hit}, {med[hit] / base:.3g}x the run's early steps ({base:.3g} at steps "
            f"{steps[0]}-{steps[min(EARLY_STEPS, len(steps)) - 1]})")
    flagged = []
    for pu in rows:
        if pu.severity:
            continue
        top = max(((r, st) for st, r in pu.by_step if math.isfinite(r)), default=None)
        if top is None or top[0] < jump * base or top[0] < RATIO_FLOOR:
            continue
        pu.severity = "warn"
        pu.reason = (f"update ratio {top[0]:.3g} at step {top[1]} is {top[0] / base:.3g}x the "
                     f"run's early steps ({base:.3g}): the updates grew far beyond where "
                     "training started (learning rate schedule? gradients?)")
        flagged.append(pu)
    return flagged


def learning_rates(trace: Trace | str | os.PathLike[str], *, rank: int = 0
                   ) -> list[tuple[int, float]]:
    """``(step, learning rate)`` from the optimizers the capture saw (the largest over every
    optimizer's parameter groups); empty when the capture did not record them."""
    from netparity.capture.notes import optimizer_notes

    best: dict[int, float] = {}
    for row in optimizer_notes(_open(trace), rank).get("lr", []):
        try:
            st, lrs = int(row[0]), [float(x) for x in row[2] if x is not None]
        except (TypeError, ValueError, IndexError):
            continue
        if lrs:
            best[st] = max(best.get(st, -math.inf), *lrs)
    return sorted(best.items())


def _lr_cause(ex: Explosion, k: int) -> None:
    """Name the learning rate when it rose :data:`LR_RISE` x above the early steps' by the
    update before step ``k``."""
    lrs = [(s, v) for s, v in ex.lr if s < k]
    early = [v for _, v in lrs[:EARLY_STEPS] if v > 0]
    if len(lrs) <= EARLY_STEPS or not early:
        return
    base = float(np.median(early))
    s_at, lr_at = lrs[-1]
    if lr_at >= LR_RISE * base:
        ex.lr_cause = (f"the learning rate rose from {lrs[0][1]:.3g} at step {lrs[0][0]} to "
                       f"{lr_at:.3g} at step {s_at}, {lr_at / base:.3g}x the early steps' "
                       "level: the likely cause (a warm-up or schedule that climbs too high)")
    elif lrs:
        ex.lr_cause = (f"the learning rate at step {s_at} was {lr_at:.3g} "
                       f"({lr_at / base:.3g}x the early steps'): not the cause")


# ---- loss curve ------------------------------------------------------------------------------
_NUM = r"([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf|-inf))"
_LOSS_RE = re.compile(r"\bloss\b\s*[=:]?\s*" + _NUM, re.IGNORECASE)
_STEP_RE = re.compile(r"\b(?:step|iter(?:ation)?|it)\b\s*[=:]?\s*(\d+)", re.IGNORECASE)


def read_losses(path: str | os.PathLike[str]) -> list[tuple[int, float]]:
    """A loss curve from a CSV (a ``loss`` column, optional ``step``) or a training log (lines
    with ``loss: 1.23`` / ``loss=1.23``, optional ``step 5``).

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "log.txt")
        >>> _ = open(p, "w").write("step 0 loss: 2.5\\nstep 1 loss=2.1\\n")
        >>> read_losses(p)
        [(0, 2.5), (1, 2.1)]
    """
    p = Path(path)
    from netparity import inputs

    text = inputs.read_text(p, error=UsageError, what="loss file", errors="replace")
    out: list[tuple[int, float]] = []
    first = text.splitlines()[0] if text.strip() else ""
    if p.suffix.lower() == ".csv" or ("," in first and "loss" in first.lower()):
        rd = csv.DictReader(text.splitlines())
        cols = {c.strip().lower(): c for c in (rd.fieldnames or [])}
        if "loss" not in cols:
            raise UsageError(f"{path}: no 'loss' column (columns: {', '.join(cols)})")
        for n, row in enumerate(rd):
            try:
                step = int(row[cols["step"]]) if "step" in cols else n
                out.append((step, float(row[cols["loss"]])))
            except (TypeError, ValueError):
                raise UsageError(f"{path}: line {n + 2}: not a number") from None
    else:
        for line in text.splitlines():
            m = _LOSS_RE.search(line)
            if not m:
                continue
            s = _STEP_RE.search(line)
            out.append((int(s.group(1)) if s else len(out), float(m.group(1))))
    if not out:
        raise UsageError(f"{path}: no loss values found (a CSV with a 'loss' column or log "
                         "lines like 'step 3 loss: 1.25')")
    return out


def find_explosion(losses: list[tuple[int, float]], *, factor: float = 10.0,
                   rise: float = 2.0) -> tuple[int | None, str]:
    """The step where a loss curve explodes: non-finite, a jump beyond ``factor`` x the median
    of the steps before, or (otherwise) the step after the minimum when the curve then rises
    beyond ``rise`` x that minimum and stays there.

    Example:
        >>> find_explosion([(0, 2.0), (1, 1.5), (2, 1.2), (3, 80.0)])
        (3, 'jump')
        >>> find_explosion([(0, 2.0), (1, 1.5), (2, 1.4)])
        (None, '')
    """
    vals = [v for _, v in losses]
    # the median of the finite |loss| before each step, kept as two heaps (the lower half as a
    # max-heap of negated values, the upper half as a min-heap): O(n log n) over the curve,
    # where a median of the prefix at each step was quadratic (117 s for a 40k-line log)
    lo_half: list[float] = []
    hi_half: list[float] = []
    for st, v in losses:
        if not math.isfinite(v):
            return st, "nonfinite"
        if lo_half:
            med = (-lo_half[0] if len(lo_half) > len(hi_half)
                   else (-lo_half[0] + hi_half[0]) / 2)
            if med > 0 and abs(v) > factor * med:
                return st, "jump"
        a = abs(v)
        if lo_half and a > -lo_half[0]:
            heapq.heappush(hi_half, a)
        else:
            heapq.heappush(lo_half, -a)
        if len(hi_half) > len(lo_half):
            heapq.heappush(lo_half, -heapq.heappop(hi_half))
        elif len(lo_half) > len(hi_half) + 1:
            heapq.heappush(hi_half, -heapq.heappop(lo_half))
    if len(vals) >= 4:
        m = int(np.argmin(vals))
        lo = vals[m]
        tail = vals[m + 1:]
        if lo > 0 and len(tail) >= 2 and min(tail[1:]) > rise * lo:
            return losses[m + 1][0], "rising"
    return None, ""


def _losses(tr: Trace, rank: int) -> list[tuple[int, float]]:
    cols = tr.scan(["step", "call", "s_mean"], rank=rank, kind="loss")
    out: dict[int, float] = {}
    for st, call, v in zip(cols["step"], cols["call"], cols["s_mean"]):
        if int(call) == 0 and int(st) not in out:
            out[int(st)] = float(v)
    return sorted(out.items())


def loss_explosion(trace: Trace | str | os.PathLike[str], *, rank: int = 0,
                   losses: list[tuple[int, float]] | None = None,
                   factor: float = 10.0) -> Explosion | None:
    """Find the loss explosion window and localise it (004 §2.1).

    Args:
        trace: the trace (path or :class:`~netparity.trace.Trace`).
        rank: which rank.
        losses: the curve (default: the trace's ``kind="loss"`` records).
        factor: a loss (or a layer's output norm) this many times the one before explodes.

    Returns:
        ``None`` when there is no loss curve, else an :class:`Explosion`.

    Example:
        >>> e = loss_explosion("runs/lr_too_high")           # doctest: +SKIP
        >>> e.step, e.layer                                  # doctest: +SKIP
        (4, '0')
    """
    tr = _open(trace)
    curve = losses if losses is not None else _losses(tr, rank)
    if not curve:
        return None
    k, kind = find_explosion(curve, factor=factor)
    ex = Explosion(found=k is not None, step=k, kind=kind, losses=list(curve),
                   lr=learning_rates(tr, rank=rank))
    if k is None:
        return ex
    _lr_cause(ex, k)
    by_step = dict(curve)
    before = [s for s, _ in curve if s < k]
    ex.loss_at = by_step.get(k)
    ex.loss_before = by_step.get(before[-1]) if before else None
    _weights_before(tr, rank, k, ex, factor)
    _first_layer(tr, rank, k, ex, factor)
    return ex


def _weights_before(tr: Trace, rank: int, k: int, ex: Explosion, factor: float) -> None:
    """Do the parameters entering step ``k`` (captured after step ``k - 1``'s update) look
    normal? Non-finite values or a norm jump against the step before mean the update of step
    ``k - 1`` (its backward) already went wrong."""
    cols = tr.scan(["step", "module", "s_norm", "s_nan", "s_posinf", "s_neginf"], rank=rank,
                   kind="param", step=[k - 2, k - 1])
    if not cols.n:
        ex.weights_before = f"parameters before step {k} not captured"
        return
    prev: dict[str, float] = {}
    cur: dict[str, tuple[float, int]] = {}
    for st, name, nrm, a, b, c in zip(cols["step"], cols["module"].objects(), cols["s_norm"],
                                      cols["s_nan"], cols["s_posinf"], cols["s_neginf"]):
        if int(st) == k - 2:
            prev[name] = float(nrm)
        else:
            cur[name] = (float(nrm), int(a) + int(b) + int(c))
    bad = [n for n, (_, c) in cur.items() if c]
    if bad:
        ex.weights_normal = False
        ex.weights_before = (f"{len(bad)} parameter(s) already hold NaN/Inf before step {k} "
                             f"(first: {bad[0]}): the update of step {k - 1} broke them")
        return
    jumps = sorted(((cur[n][0] / prev[n], n) for n in cur if prev.get(n)), reverse=True)
    if jumps and jumps[0][0] > factor:
        ex.weights_normal = False
        ex.weights_before = (f"weights jumped in the update of step {k - 1}: {jumps[0][1]} "
                             f"norm x{jumps[0][0]:.3g} -- look at step {k - 1}'s gradients "
                             "and learning rate")
        return
    ex.weights_normal = True
    top = f" (largest norm change x{jumps[0][0]:.3g}, {jumps[0][1]})" if jumps else ""
    ex.weights_before = (f"weights before step {k} look normal{top}: the backward of step "
                         f"{k - 1} was fine; the forward of step {k} blows up")


def _first_layer(tr: Trace, rank: int, k: int, ex: Explosion, factor: float) -> None:
    """The first module (execution order) whose forward output at step ``k`` is non-finite or
    ``factor`` x its norm at step ``k - 1``."""
    cols = tr.scan(["step", "module", "call", "arg", "s_norm", "s_nan", "s_posinf", "s_neginf",
                    "source"], rank=rank, kind="module", direction="forward", role="output",
                   step=[k - 1, k])
    at_k = cols["step"] == k
    if not at_k.any() or not (cols["step"] == k - 1).any():
        ex.capture_hint = (f"capture steps {k - 1} and {k} at module level to find the layer: "
                           f"netparity.capture(model, path, steps=\"{k - 1},{k}\")")
        return
    mods = cols["module"].objects()
    args = cols["arg"].objects()
    prev: dict[tuple[str, int, str], float] = {}
    for i in np.nonzero(~at_k)[0]:
        prev[(mods[i], int(cols["call"][i]), args[i])] = float(cols["s_norm"][i])
    srcs = cols["source"].objects()
    for i in np.nonzero(at_k)[0]:
        key = (mods[i], int(cols["call"][i]), args[i])
        nb = int(cols["s_nan"][i]) + int(cols["s_posinf"][i]) + int(cols["s_neginf"][i])
        p, v = prev.get(key), float(cols["s_norm"][i])
        ratio = math.inf if nb else (v / p if p else None)
        if ratio is not None and ratio > factor:
            ex.layer = mods[i] or "(root)"
            ex.layer_ratio = ratio
            ex.layer_source = srcs[i]
            return


# ---- loss scale ------------------------------------------------------------------------------
#: names a run records its loss scale under (``cap.record("loss_scale", scale_tensor)``)
SCALE_NAMES = ("loss_scale", "scale", "loss_scale_value")
#: the scaler's own overflow flag per step (1: NaN/Inf found, update skipped), recorded by the
#: capture next to ``loss_scale`` when it reads the scaler itself
OVERFLOW_NAME = "loss_scale_overflow"


def loss_scale_history(trace: Trace | str | os.PathLike[str], *, rank: int = 0,
                       persistent: int = 3, collapse: float = 2.0 ** 8
                       ) -> dict[str, Any] | None:
    """Per-step loss scale, overflow and skipped updates of a mixed-precision run.

    The scale comes from records named ``loss_scale`` (written by the capture after each
    ``GradScaler.update()`` or MindSpore loss-scale cell call, or by hand:
    ``cap.record("loss_scale", torch.tensor(scaler.get_scale()))``; any kind). A step
    *overflows* when the scaler said so (``loss_scale_overflow`` records, written with the
    scale by the capture) or, without them, when one of its parameter gradients -- recorded as
    backward produced them, still scaled -- holds NaN/Inf; its update was *skipped* when every
    parameter after it equals the step before (or, without parameters, when the scaler
    reported overflow). ``first_grad`` names the first non-finite gradient of the step (in
    backward order), when gradients were captured.

    Args:
        trace: the trace (path or :class:`~netparity.trace.Trace`).
        rank: which rank.
        persistent: this many overflowing steps in a row is persistent overflow.
        collapse: a scale this many times below its largest value has collapsed.

    Returns:
        ``None`` when the run recorded no loss scale, else ``{"steps": [{"step", "scale",
        "overflow", "skipped", "first_grad", "source"}], "overflow_steps", "persistent", "collapsed",
        "handled", "warnings"}``; ``handled``: every non-finite gradient fell in an overflowing
        step whose update was skipped and no parameter became non-finite.

    Example:
        >>> h = loss_scale_history("runs/amp")          # doctest: +SKIP
        >>> h["overflow_steps"], h["warnings"]          # doctest: +SKIP
        (1, [])
    """
    tr = _open(trace)
    scales: dict[int, float] = {}
    for name in SCALE_NAMES:
        cols = tr.scan(["step", "s_mean"], rank=rank, name=name)
        for st, v in zip(cols["step"], cols["s_mean"]):
            scales.setdefault(int(st), float(v))
        if scales:
            break
    if not scales:
        return None
    # what the scaler itself decided (recorded by the capture: GradScaler, MindSpore's
    # loss-scale cell): authoritative where present; the scaler skips the update then
    flags: dict[int, bool] = {}
    cols = tr.scan(["step", "s_max"], rank=rank, name=OVERFLOW_NAME)
    for st, v in zip(cols["step"], cols["s_max"]):
        flags[int(st)] = flags.get(int(st), False) or bool(v and v > 0)
    grads: dict[int, list[Record]] = {}
    for r in tr.load_records(rank=rank, kind="grad"):
        grads.setdefault(r.step, []).append(r)
    params: dict[int, dict[str, Record]] = {}
    for r in tr.load_records(rank=rank, kind="param"):
        params.setdefault(r.step, {})[r.module] = r
    rows: list[dict[str, Any]] = []
    run = longest = 0
    param_bad = any(_bad(r) for ps in params.values() for r in ps.values())
    handled = not param_bad
    for st in sorted(set(scales) | set(grads)):
        bad = sorted((r for r in grads.get(st, []) if _bad(r)), key=lambda r: r.seq)
        prev, cur = params.get(st - 1), params.get(st)
        skipped = (None if not prev or not cur else
                   all(n in prev and _same(prev[n], r) for n, r in cur.items()))
        over = flags[st] if st in flags else bool(bad)
        if st in flags and skipped is None:
            skipped = over  # the scaler skips the update of an overflowing step
        rows.append({"step": st, "scale": scales.get(st), "overflow": over,
                     "skipped": skipped, "first_grad": bad[0].module if bad else "",
                     "source": "scaler" if st in flags else "gradients"})
        run = run + 1 if over else 0
        longest = max(longest, run)
        if over and skipped is False:
            handled = False
    vals = [v for v in scales.values() if math.isfinite(v)]
    collapsed = bool(vals) and (min(vals) < 1.0 or max(vals) / max(min(vals), 1e-300)
                                >= collapse)
    warnings = []
    n_over = sum(r["overflow"] for r in rows)
    if longest >= persistent:
        first = next((r["first_grad"] for r in rows if r["overflow"] and r["first_grad"]),
                     "not captured")
        warnings.append(f"persistent overflow: {longest} steps in a row (first overflowing "
                        f"gradient: {first}) -- find out why before training further")
    if collapsed:
        warnings.append(f"loss scale collapsed: from {max(vals):.4g} to {min(vals):.4g}")
    return {"steps": rows, "overflow_steps": n_over, "persistent": longest >= persistent,
            "collapsed": collapsed, "handled": handled, "warnings": warnings}


def _bad(r: Record) -> bool:
    s = r.stats
    return bool((s.get("nan") or 0) or (s.get("posinf") or 0) or (s.get("neginf") or 0))


# ---- cross-rank consistency ------------------------------------------------------------------
def rank_consistency(trace: Trace | str | os.PathLike[str], *, rtol: float = 0.0
                     ) -> dict[str, Any] | None:
    """Do all ranks use the same gradients and hold the same parameters? (001: every card
    starts from the same weights and aggregates its gradients, so data-parallel replicas stay
    identical.)

    Compares, with rank 0, on every other rank: each parameter's gradient as the optimizer
    was about to use it -- after DDP's (or a hand-written) all-reduce; recorded by the capture
    as ``op="grad_synced"`` in multi-rank runs -- then each parameter after the update
    (``rtol`` 0: bit-identical statistics). Gradients as backward produced them are not
    compared: they precede the all-reduce and differ by design.

    Returns:
        ``None`` for a one-rank trace, else ``{"ranks", "compared", "first": {"step", "name",
        "what", "rank", "stat", "value", "rank0"} | None, "differing": n}``; ``what`` is
        ``gradient`` (after all-reduce) or ``parameter`` (after the update); ``first`` is the
        earliest step, gradients before parameters, in rank 0's order.

    Example:
        >>> rank_consistency("runs/ddp")["first"]        # doctest: +SKIP
        {'step': 0, 'name': '2.weight', 'what': 'gradient', 'rank': 1, 'stat': 'norm', ...}
    """
    tr = _open(trace)
    ranks = tr.ranks
    if len(ranks) < 2:
        return None
    cols = ["step", "module", "call"] + [f"s_{k}" for k in STAT_FIELDS]
    kinds = (("gradient", {"kind": "custom", "op": "grad_synced"}), ("parameter",
                                                                       {"kind": "param"}))

    def table(rank: int) -> dict[tuple[int, int, str, int], np.ndarray]:
        out: dict[tuple[int, int, str, int], np.ndarray] = {}
        for w, (_, flt) in enumerate(kinds):
            c = tr.scan(cols, rank=rank, **flt)
            names = c["module"].objects()
            vals = np.stack([np.asarray(c[f"s_{k}"], dtype=np.float64) for k in STAT_FIELDS],
                            axis=1) if c.n else np.zeros((0, len(STAT_FIELDS)))
            out.update({(int(s), w, n, int(k)): vals[i] for i, (s, n, k) in
                        enumerate(zip(c["step"], names, c["call"]))})
        return out

    base = table(ranks[0])
    # steps in order, gradients before parameters; rank 0's execution order within
    order = sorted(base, key=lambda key: key[:2])
    first: tuple[int, dict[str, Any]] | None = None  # (position in order, what differs)
    differing = 0
    compared = 0
    for r in ranks[1:]:
        other = table(r)
        for pos, key in enumerate(order):
            v = other.get(key)
            if v is None:
                continue
            compared += 1
            a = base[key]
            same = np.isclose(v, a, rtol=rtol, atol=0.0, equal_nan=True)
            if same.all():
                continue
            differing += 1
            if first is None or pos < first[0]:
                j = int(np.argmin(same))
                first = (pos, {"step": key[0], "name": key[2], "what": kinds[key[1]][0],
                               "rank": r, "stat": STAT_FIELDS[j], "value": float(v[j]),
                               "rank0": float(a[j])})
    return {"ranks": ranks, "compared": compared, "first": first[1] if first else None,
            "differing": differing}
