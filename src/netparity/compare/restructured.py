"""Op level is never worse than module level: ops organised differently inside a module whose
outputs agree are *restructured*, not a divergence.

Two faithful implementations of one module may run different operators: PyTorch's GRU projects
every time step's input in one matmul (``[20, 48]``), a port projects each step (``[2, 48]``);
a fused attention against its MatMuls. Pairing such ops can only pair unlike tensors, and judging
them reported hundreds of failures inside a module whose output agrees to 1e-7. So, in a
comparison that holds both levels (``level="both"``), every op call with a failing or warning
pair whose module call was compared at module level and passes there is taken out of the
judged pairs and listed under ``result.unmatched["restructured"]`` (information: it counts
neither as a pass nor as a failure), with a note. An op inside a module that diverges, or
without a module-level record (ops outside every module), is judged as before: an op-level
culprit is only named inside a diverging module.

The module call of an op is its reference record's (module path, ``module_call``); where that
module has no module-level pair, the innermost enclosing module call that has one (same step,
rank and direction, an ancestor path, the first to finish after the op).

Inputs laid out differently (:func:`settle_reordered`): a port may feed a module the same
values in another order -- a skip concatenated the other way round, the consuming conv's input
channels swapped to match -- so the module's input differs while its output agrees; the
gradient with respect to that input is laid out the same way. A module's input, and the
gradient its backward hands on for that input, are taken out of the judged pairs (listed as
restructured, "input laid out differently") when the module's outputs agree at that call and
both pairs hold the same values in another order (equal RMS within the pair's own bound, equal
shapes). A mistake that reorders values is still found where the values are *used*: at the
consumer's outputs, and at the producers' incoming gradients.

Example:
    >>> from netparity.compare.results import CompareResult
    >>> settle(CompareResult())
    0
    >>> settle_reordered(CompareResult())
    0
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from netparity.compare.results import CallResult, CompareResult, PairResult
from netparity.compare.verdicts import norm_error

#: the note a comparison with restructured ops carries (followed by the modules)
NOTE = ("{n} op call(s) inside modules whose outputs agree are organised differently on the two "
        "sides (restructured, outputs agree; not judged): {where}")
_BAD = ("fail", "warn")
#: the note of inputs laid out differently (followed by the modules)
REORDERED_NOTE = ("{n} module input(s) and the gradient(s) handed back for them hold the same "
                  "values in another order while the modules' outputs agree (input laid out "
                  "differently, e.g. a concatenation in the other order; not judged): {where}")


def _bad_calls(result: CompareResult) -> tuple[set[int], np.ndarray]:
    """Positions of the calls with a failing/warning pair (inputs or outputs), and each call's
    worst output status as a rank (0 pass, 1 warn, 2 fail; 3: no output compared, which is
    not an agreement)."""
    calls = result.calls
    n = len(calls)
    out_rank = np.full(n, 3, dtype=np.int8)
    table = result.table
    if table is not None:
        from netparity.compare.pairtable import CODE_RANK

        table.refresh()
        rank = CODE_RANK[table.code]
        cp = table.call
        bad = set(np.unique(cp[rank > 0]).tolist())
        o = table.is_out
        out_rank[cp[o]] = 0
        np.maximum.at(out_rank, cp[o], rank[o])
        return bad, out_rank
    at = {c.key: i for i, c in enumerate(calls)}
    ranks = {"warn": 1, "fail": 2}
    badset: set[int] = set()
    for p in result.pairs:
        i = at.get(p.call, -1)
        if i < 0:
            continue
        r = ranks.get(p.status, 0)
        if r:
            badset.add(i)
        if p.role == "output":
            out_rank[i] = max(0 if out_rank[i] == 3 else out_rank[i], r)
    return badset, out_rank


def _enclosing(c: CallResult, exact: dict[tuple[Any, ...], int],
               scope: dict[tuple[Any, ...], list[int]], calls: list[CallResult]) -> int:
    """Position of the module-level call running op call ``c``, or -1."""
    k = (c.step, c.rank, c.direction, c.module, c.module_call)
    hit = exact.get(k)
    if hit is not None:
        return hit
    best, best_key = -1, (-1, 0)
    for i in scope.get((c.step, c.rank, c.direction), ()):
        a = calls[i]
        m = a.module
        if a.order <= c.order or not (m == "" or c.module == m or c.module.startswith(m + ".")):
            continue
        key = (len(m), -a.order)  # the innermost, then the first to finish after the op
        if key > best_key:
            best, best_key = i, key
    return best


def _grads_agree(m: CallResult, result: CompareResult) -> bool:
    """A backward module call with no gradient to hand on (its inputs need none) agrees when
    what it makes, its parameters' gradients, all agree (and there is one). Its incoming
    gradient has already been judged at the module that made it."""
    if m.direction != "backward":
        return False
    pre = m.module + "." if m.module else ""
    mine = [p for p in result.params if p.kind == "grad" and p.step == m.step
            and p.rank == m.rank and p.module.startswith(pre)]
    return bool(mine) and all(p.status not in _BAD for p in mine)


def settle(result: CompareResult) -> int:
    """Take the restructured op calls out of ``result`` (see the module docstring); returns
    how many. Only a comparison holding module- and op-level calls has any."""
    calls = result.calls
    levels = {c.level for c in calls}
    if not {"module", "op"} <= levels:
        return 0
    bad, out_rank = _bad_calls(result)
    if not bad:
        return 0
    exact: dict[tuple[Any, ...], int] = {}
    scope: dict[tuple[Any, ...], list[int]] = {}
    for i, c in enumerate(calls):
        if c.level == "module":
            exact.setdefault((c.step, c.rank, c.direction, c.module, c.module_call), i)
            scope.setdefault((c.step, c.rank, c.direction), []).append(i)
    gone: list[int] = []
    where: dict[str, None] = {}
    for i in sorted(bad):
        c = calls[i]
        if c.level != "op" or c.module_call < 0 and not c.module:
            continue
        j = _enclosing(c, exact, scope, calls)
        if j >= 0 and (out_rank[j] == 0 or out_rank[j] == 3 and _grads_agree(calls[j], result)):
            gone.append(i)
            where[calls[j].module or "<root>"] = None
    if not gone:
        return 0
    _drop(result, gone)
    names = list(where)
    result.notes.append(NOTE.format(n=len(gone), where=", ".join(names[:5])
                                    + (f" and {len(names) - 5} more" if len(names) > 5 else "")))
    return len(gone)


def set_aside(p: PairResult, note: str) -> None:
    """Mark pair ``p`` not judged (status ``unknown``, reason ``note``, ``metrics
    ["restructured"]``): it stays a pair -- the pair set is decided before any judge runs and
    never depends on which judges ran (issue 28) -- but counts neither as a pass nor as a
    failure, and ``recheck`` leaves it so."""
    p.status = "unknown"
    p.reason = f"not judged: {note}"
    p.metrics["restructured"] = note


def _drop(result: CompareResult, gone: list[int]) -> None:
    """Set the pairs of calls ``gone`` (positions) aside (:func:`set_aside`); list the calls
    as restructured."""
    calls = result.calls
    listed = result.unmatched.setdefault("restructured", [])
    for i in gone:
        c = calls[i]
        listed.append({"name": c.name, "kind": "op", "module": c.module, "op": c.op,
                       "cand_module": c.cand_module, "cand_op": c.cand_op,
                       "direction": c.direction, "step": c.step, "rank": c.rank,
                       "note": "restructured, outputs agree"})
    table = result.table
    if table is not None:
        hit = np.isin(table.call, np.asarray(gone, dtype=table.call.dtype))
        for i in np.nonzero(hit)[0].tolist():
            set_aside(table.get(i), "restructured, outputs agree")
        table.refresh()
    else:
        keys = {calls[i].key for i in gone}
        for p in result.pairs:
            if p.call in keys:
                set_aside(p, "restructured, outputs agree")


#: a pair is values moved to other places only when its normwise error is at least this many
#: times its bound, and at least :data:`_MOVED_MIN` (a permutation of values that are not all
#: alike moves them by a sizeable part of their RMS: two concatenated feature maps swapped
#: ~1; rounding a bfloat16 candidate ~4e-3)
_MOVED_FACTOR, _MOVED_MIN = 10.0, 0.05


def _same_values_reordered(p: PairResult) -> bool:
    """Whether pair ``p`` (tensors basis) can be the same values in another order: equal shapes,
    RMS equal within the bound the pair was judged by (its noise bound, normwise tolerance
    or rtol; a permutation keeps the RMS), and an error far beyond that bound
    (:data:`_MOVED_FACTOR`): the values moved, they were not rounded."""
    m = p.metrics
    if m.get("basis") != "tensors" or list(p.ref_shape) != list(p.cand_shape):
        return False
    r, c = m.get("ref_rms"), m.get("cand_rms")
    if not r or c is None or m.get("nan_mismatch") or m.get("inf_mismatch"):
        return False
    bound = float(m.get("noise_bound") or m.get("norm_tol") or p.rtol)
    # values moved to other places differ by a sizeable part of their RMS; a pair failing
    # by rounding (a bfloat16 candidate's activations) keeps its RMS too, but is not moved
    return (abs(float(c) - float(r)) <= bound * float(r)
            and norm_error(m) >= max(_MOVED_FACTOR * bound, _MOVED_MIN))


def settle_reordered(result: CompareResult) -> int:
    """Take module inputs laid out differently out of ``result`` (see the module docstring):
    the failing forward input and the failing backward input-gradient of one argument of a
    module call whose forward outputs all pass, when both hold the same values in another
    order. Returns how many pairs were taken out."""
    bad = [p for s in _BAD for p in result.pairs_with_status(s, level="module")
           if p.kind == "module" and p.call]
    if not bad:
        return 0
    calls = {c.key: c for c in result.calls}

    def where(p: PairResult) -> tuple[Any, ...] | None:
        c = calls.get(p.call)
        if c is None or c.level != "module" or c.module_call < 0:
            return None
        return (p.step, p.rank, p.module, c.module_call, p.arg)

    fwd_in = {w: p for p in bad if p.direction == "forward" and p.role == "input"
              and (w := where(p)) is not None}
    if not fwd_in:
        return 0
    out_bad = {p.call for p in bad if p.direction == "forward" and p.role == "output"}
    has_out = {c.key for c in result.calls if c.direction == "forward" and c.outputs} \
        if result.table is None else _calls_with_outputs(result)
    gone: dict[str, str] = {}
    for p in bad:
        if p.direction != "backward" or p.role != "output":
            continue
        w = where(p)
        f = fwd_in.get(w) if w is not None else None
        if f is None or f.call in out_bad or f.call not in has_out:
            continue
        if _same_values_reordered(f) and _same_values_reordered(p):
            gone[f.key] = gone[p.key] = p.module
    if not gone:
        return 0
    _drop_pairs(result, gone)
    names = list(dict.fromkeys(gone.values()))
    result.notes.append(REORDERED_NOTE.format(
        n=len(gone) // 2, where=", ".join(names[:5])
        + (f" and {len(names) - 5} more" if len(names) > 5 else "")))
    return len(gone)


def _calls_with_outputs(result: CompareResult) -> set[str]:
    """Keys of the calls holding at least one output pair (table mode)."""
    t = result.table
    return {result.calls[i].key for i in np.unique(t.call[t.is_out]).tolist()}


def _drop_pairs(result: CompareResult, gone: dict[str, str]) -> None:
    """Set the pairs whose keys are in ``gone`` aside (:func:`set_aside`); list them as
    restructured."""
    note = "input laid out differently (the same values in another order), outputs agree"
    listed = result.unmatched.setdefault("restructured", [])
    table = result.table
    pairs = ([table.get(i) for i, k in enumerate(table.keys) if k in gone]
             if table is not None else [p for p in result.pairs if p.key in gone])
    for p in pairs:
        listed.append({"name": p.name, "kind": "module", "module": p.module, "op": p.op,
                       "cand_module": p.cand_module, "cand_op": p.cand_op,
                       "direction": p.direction, "step": p.step, "rank": p.rank,
                       "note": note})
        set_aside(p, note)
    if table is not None:
        table.refresh()


# ---- parameter-free ops moved across a module boundary --------------------------------------

def _erf(x: np.ndarray) -> np.ndarray:
    """``erf`` to 1.5e-7 (Abramowitz and Stegun 7.1.26; NumPy has none)."""
    s, a = np.sign(x), np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027
                                                                          + t * 1.061405429))))
    return s * (1.0 - poly * np.exp(-a * a))


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))


#: parameter-free elementwise ops a port may apply on the other side of a container boundary
#: (torchvision's DenseNet: the final ReLU after ``features``; mindcv's: inside it)
MOVABLE: dict[str, Any] = {
    "relu": lambda x: np.maximum(x, 0.0),
    "relu6": lambda x: np.clip(x, 0.0, 6.0),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "gelu": _gelu,
    "gelu_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(0.7978845608028654
                                                    * (x + 0.044715 * x ** 3))),
    "hardswish": lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0,
    "hardsigmoid": lambda x: np.clip(x + 3.0, 0.0, 6.0) / 6.0,
}
#: at most this many failing module outputs are tried, each up to this many elements
_MOVED_PAIRS, _MOVED_NUMEL = 64, 1 << 24
MOVED_NOTE = ("{n} module output(s) agree once a parameter-free op is applied: the op runs "
              "on the other side of the module's boundary on one side (moved, not a "
              "divergence; the enclosing module's outputs agree): {where}")


def _moved_op(ref: np.ndarray, cand: np.ndarray, bound: float) -> str | None:
    """``"<op> on the reference"`` / ``"... on the candidate"`` when applying a
    :data:`MOVABLE` op to one side's output makes the two agree within ``bound`` (normwise
    relative error against the other side), else ``None``."""
    a = np.asarray(ref, dtype=np.float64).reshape(-1)
    b = np.asarray(cand, dtype=np.float64).reshape(-1)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return None
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for name, f in MOVABLE.items():
            for side, x, y in (("reference", a, b), ("candidate", b, a)):
                fx = f(x)
                scale = float(np.sqrt(np.mean(y * y))) if y.size else 0.0
                if scale > 0 and float(np.sqrt(np.mean((fx - y) ** 2))) <= bound * scale:
                    return f"{name} on the {side}"
    return None


def _ancestor_call(c: CallResult, scope: dict[str, tuple[list[int], list[int]]]) -> int:
    """Position of the innermost module call strictly enclosing ``c`` (an ancestor path that
    finishes after it, the first to finish among equals), or -1. ``scope``: module path ->
    (orders ascending, positions) of the calls of ``c``'s step, rank and direction; the
    enclosing paths are the dotted prefixes of ``c.module`` and ``""``, tried innermost first
    (a bisection each: a failing run with thousands of module calls stays linear)."""
    m = c.module
    prefixes = [m[:i] for i in range(len(m) - 1, 0, -1) if m[i] == "."] + [""]
    for p in prefixes:
        got = scope.get(p)
        if got is None:
            continue
        orders, where = got
        k = bisect.bisect_right(orders, c.order)
        if k < len(orders):
            return where[k]
    return -1


def settle_moved_ops(result: CompareResult, ref_tr: Any, cand_tr: Any) -> int:
    """Re-judge forward module outputs that differ only by a parameter-free op moved across
    the module's boundary (torchvision's DenseNet applies its final ReLU functionally after
    ``features``, mindcv's inside it): a failing/warning forward output pair of a module call
    (tensors on both sides, equal shapes) passes, with a reason, when one :data:`MOVABLE` op
    applied to one side's output makes it agree with the other within the pair's own bound,
    and the innermost enclosing module call (same step, rank, forward) has compared outputs
    that all agree -- the consumer sees the same values once the op is applied. A port that
    *adds* an activation the reference never applies makes the enclosing outputs differ, so
    it stays a failure. Returns how many pairs were re-judged."""
    table = result.table
    calls = result.calls
    if table is None or not table.n:
        return 0
    table.refresh()
    _, out_rank = _bad_calls(result)
    cand_at = np.nonzero((table.code == 1) | (table.code == 2))[0]
    scope: dict[tuple[Any, ...], dict[str, tuple[list[int], list[int]]]] = {}
    for i in sorted((i for i, c in enumerate(calls) if c.level == "module"),
                    key=lambda i: calls[i].order):
        c = calls[i]
        orders, where = scope.setdefault((c.step, c.rank, c.direction), {}).setdefault(
            c.module, ([], []))
        orders.append(c.order)
        where.append(i)
    done: dict[str, str] = {}
    tried = 0
    for i in cand_at.tolist():
        if not table.is_out[i] or tried >= _MOVED_PAIRS:
            continue
        ci = int(table.call[i])
        c = calls[ci]
        if c.level != "module" or c.direction != "forward" or not c.module:
            continue
        j = _ancestor_call(c, scope.get((c.step, c.rank, c.direction), {}))
        if j < 0 or out_rank[j] != 0:
            continue
        r, k = table.refs[i], table.cands[i]
        if (not (r.has_payload and k.has_payload) or list(r.shape) != list(k.shape)
                or r.numel > _MOVED_NUMEL):
            continue
        p = table.get(i)
        m = p.metrics
        bound = float(m.get("noise_bound") or m.get("norm_tol") or p.rtol)
        tried += 1
        how = _moved_op(ref_tr.tensor(r), cand_tr.tensor(k), bound)
        if how is None:
            continue
        p.status = "pass"
        op, side = how.split(" on the ")
        p.reason = (f"agrees once {op} is applied to the {side}'s output: a parameter-free op "
                    "moved across the module boundary")
        m["moved_op"] = how
        done[p.key] = c.module
    if not done:
        return 0
    table.refresh()
    names = list(dict.fromkeys(done.values()))
    result.notes.append(MOVED_NOTE.format(
        n=len(done), where=", ".join(names[:5])
        + (f" and {len(names) - 5} more" if len(names) > 5 else "")))
    return len(done)


# ---- operands of a commutative op in the other order ------------------------------------------

#: canonical ops whose two operands may be swapped without changing the result
COMMUTATIVE = frozenset({"add", "add_ext", "mul", "maximum", "minimum"})
#: at most this many op calls are tried (a real mistake fails their outputs: none qualify)
_COMMUTED_CALLS = 256
COMMUTED_NOTE = ("{n} op call(s) take their two operands in the other order (a commutative op; "
                 "its output agrees, e.g. gradient accumulation adding the micro-batches in "
                 "another order; operands paired crosswise): {where}")


def _close(a: np.ndarray, b: np.ndarray, bound: float) -> bool:
    """``b`` agrees with ``a`` within ``bound`` (normwise relative, equal shapes)."""
    if a.shape != b.shape:
        return False
    x = np.asarray(a, dtype=np.float64).reshape(-1)
    y = np.asarray(b, dtype=np.float64).reshape(-1)
    scale = float(np.sqrt(np.mean(x * x))) if x.size else 0.0
    err = float(np.sqrt(np.mean((x - y) ** 2))) if x.size else 0.0
    return bool(np.isfinite(err)) and err <= bound * scale if scale > 0 else err == 0.0


def settle_commuted(result: CompareResult, ref_tr: Any, cand_tr: Any) -> int:
    """Re-judge the operands of commutative op calls (:data:`COMMUTATIVE`) taken in the other
    order: a call with exactly two input pairs, at least one failing or warning, whose output
    pairs all pass, passes its inputs with a reason when the reference's first operand agrees
    with the candidate's second and the second with the first (tensors on both sides, each
    within the pair's own bound). A gradient accumulated over micro-batches run in another
    order adds the same partial sums the other way round. Returns how many pairs were
    re-judged."""
    table = result.table
    calls = result.calls
    if table is None or not table.n:
        return 0
    table.refresh()
    bad = (table.code == 1) | (table.code == 2)
    cand_calls = np.unique(table.call[bad & ~table.is_out]).tolist()
    if not cand_calls:
        return 0
    order = np.argsort(table.call, kind="stable")
    starts = np.searchsorted(table.call[order], np.arange(len(calls) + 1))
    done: dict[str, str] = {}
    tried = 0
    for ci in cand_calls:
        c = calls[ci]
        if c.level != "op" or c.op not in COMMUTATIVE or c.cand_op != c.op:
            continue
        if tried >= _COMMUTED_CALLS:
            break
        rows = order[starts[ci]:starts[ci + 1]]
        ins = [i for i in rows.tolist() if not table.is_out[i]]
        outs = [i for i in rows.tolist() if table.is_out[i]]
        if len(ins) != 2 or not outs or bad[outs].any():
            continue
        recs = [(table.refs[i], table.cands[i]) for i in ins]
        if not all(r.has_payload and k.has_payload and r.numel <= _MOVED_NUMEL
                   for r, k in recs):
            continue
        tried += 1
        ps = [table.get(i) for i in ins]
        bounds = [float(p.metrics.get("noise_bound") or p.metrics.get("norm_tol") or p.rtol)
                  for p in ps]
        (r0, k0), (r1, k1) = recs
        a0, a1 = ref_tr.tensor(r0), ref_tr.tensor(r1)
        b0, b1 = cand_tr.tensor(k0), cand_tr.tensor(k1)
        if not (_close(a0, b1, bounds[0]) and _close(a1, b0, bounds[1])):
            continue
        for p in ps:
            p.status = "pass"
            p.reason = ("the operands of a commutative op in the other order: agrees with the "
                        "candidate's other operand")
            p.metrics["commuted"] = True
            done[p.key] = c.module or "<root>"
    if not done:
        return 0
    table.refresh()
    names = list(dict.fromkeys(done.values()))
    result.notes.append(COMMUTED_NOTE.format(
        n=len(done) // 2, where=", ".join(names[:5])
        + (f" and {len(names) - 5} more" if len(names) > 5 else "")))
    return len(done)
