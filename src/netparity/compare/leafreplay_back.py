"""Plain ``compare`` calibrated in the backward direction: leaf ``torch.nn`` modules' gradients
judged by float64 replay of the reference module's backward (issue 28, deliver 0/1).

The forward half (:mod:`netparity.compare.leafreplay`) replays a leaf's forward on each side's
captured inputs. A leaf can also compute its *backward* differently (a hand-written activation
whose gradient uses another approximation, a port whose LayerNorm backward differs) while its
forward agrees; the fixed table then says WARN at best. Here, for each backward call of a leaf
``torch.nn`` module (module records: the gradient w.r.t. its output is the call's ``input``,
the gradient w.r.t. each of its inputs through it the call's ``output``, both named by the
forward tensor's ``arg``), the reference module is rebuilt in float64
(:func:`~netparity.frameworks.torch.leafmods.build_leaf`), run forward on the captured forward
inputs of the same call and differentiated with the captured output gradient
(:func:`~netparity.frameworks.torch.leafmods.vjp_leaf`):

* ``ref_local``  = normwise error of the reference's captured gradient against that replay on
  the reference's tensors (a replay that misses it by more than ``SELF_TOLERANCE`` is no
  evidence, the pair is left to the table);
* ``cand_local`` = the candidate's captured gradient against the same module's replay on the
  candidate's forward inputs and output gradient (with the candidate's weights and with the
  reference's: the smaller).

Judged: every gradient w.r.t. an input, and the leaf's parameter gradients when the module ran
once in the step (a parameter's gradient sums every call of the step). Bound and rules are the
forward's: :func:`~netparity.compare.noise.replay_bound`; above it the leaf **introduces** a
difference in backward (its pair FAILs), except that a leaf with weights is only called so beyond
``PORT_FACTOR`` x its bound (between the two the table's verdict stands: the weights a call used
are not certain); within it a table-only WARN/FAIL is cleared "within the replayed noise".
Weights before a step's update are the previous step's post-update parameters, so leaves with
weights are not replayed at step 0. The culprits are listed from the loss backwards (the order
backward runs).

Pairing a backward call with its forward call: the trace numbers each separately (backward call
``k`` of a module is its ``k``-th backward to run), so for a module called ``n`` times in a step
the reversed forward call ``n - 1 - k`` is tried first, then ``k``; a pairing whose replay does
not make the reference's own gradients again is not used.

Speed: a call is replayed only when the table warned or failed one of its gradient pairs, or a
pair's own error exceeds ``PORT_FACTOR`` x the smallest bound of its dtypes (``FLOOR_EPS`` units):
a gradient the table passes that close to the reference is not a port difference beyond
``PORT_FACTOR`` x the noise.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from netparity.compare.leafreplay import PORT_FACTOR, _Params, leaf_notes, self_tolerance
from netparity.compare.noise import replay_bound
from netparity.compare.results import CompareResult, PairResult

#: one judged gradient: (pair, what, the reference's captured array, the candidate's)
_Judged = tuple[PairResult, str, Any, Any]


def _worth(pr: PairResult) -> bool:
    """Whether a gradient pair needs the replay (module docstring, "Speed")."""
    if pr.status in ("warn", "fail"):
        return True
    rmse, rms = pr.metrics.get("rmse"), pr.metrics.get("ref_rms")
    if not isinstance(rmse, float) or not isinstance(rms, float):
        return True
    floor = PORT_FACTOR * replay_bound(0.0, pr.ref_dtype, pr.cand_dtype)
    return rmse > floor * rms if rms > 0 else rmse > 0


class _Ctx:
    """What every backward call's replay reads: the traces, their parameters and gradients."""

    def __init__(self, result: CompareResult, ref_tr: Any, cand_tr: Any, rank: int) -> None:
        self.table = result.table
        self.ref_tr, self.cand_tr = ref_tr, cand_tr
        self.rows: dict[int, list[int]] = {}
        for i, c in enumerate(self.table.call.tolist()):
            self.rows.setdefault(c, []).append(i)
        self.grads = {(p.step, p.module): p for p in result.params if p.kind == "grad"}
        self.cand_name = {p.module: p.cand_module for p in result.params if p.kind == "param"}
        self.rp, self.cp = _Params(ref_tr, rank), _Params(cand_tr, rank)
        self.rg, self.cg = _Params(ref_tr, rank, "grad"), _Params(cand_tr, rank, "grad")

    def split(self, pos: int) -> tuple[list[int], list[int]]:
        rows = self.rows.get(pos, [])
        return ([i for i in rows if not self.table.is_out[i]],
                [i for i in rows if self.table.is_out[i]])


def _replay_call(x: _Ctx, meta: dict[str, Any], module: str, step: int, bpos: int, fpos: int,
                 whole: bool) -> list[tuple[_Judged, float, float]] | None:
    """The judged gradients of backward call ``bpos`` (forward call ``fpos``) with their
    ``ref_local`` and ``cand_local``; None when it cannot be replayed, ``[]`` when no pair needs
    it or the replay does not make the reference's own gradients again."""
    from netparity.precision.engine import normwise

    t = x.table
    g_out, g_in = x.split(bpos)
    f_in, f_out = x.split(fpos)
    f_in.sort(key=lambda i: t.idx[i])
    args = [t.refs[i].arg for i in f_in]
    if (len(g_out) != 1 or len(f_out) != 1 or not f_in or not all(a.isdigit() for a in args)
            or any(t.refs[i].arg not in args for i in g_in)):
        return None
    if not all(t.refs[i].has_payload and t.cands[i].has_payload
               and list(t.refs[i].shape) == list(t.cands[i].shape)
               for i in (*f_in, *g_out, *g_in)):
        return None  # (another layout, NHWC or transposed, is not replayed element-wise)
    names = meta.get("params") or []
    wanted = [args.index(t.refs[i].arg) for i in g_in]
    judged: list[_Judged] = [(t.get(i), f"input {t.refs[i].arg}", t.refs[i], t.cands[i])
                             for i in g_in]
    if whole:
        for n in names:
            pr = x.grads.get((step, f"{module}.{n}"))
            if pr is not None and pr.ref_shape == pr.cand_shape:
                judged.append((pr, n, None, None))
    if not any(_worth(j[0]) for j in judged):
        return []
    # (imported only now: importing torch costs more than most replays)
    from netparity.frameworks.torch.leafmods import build_leaf, vjp_leaf

    wr: dict[str, np.ndarray] = {}
    wc: dict[str, np.ndarray] = {}
    for n in names:
        full = f"{module}.{n}"
        a = x.rp.get(step - 1, full)
        if a is None:
            return None
        b = x.cp.get(step - 1, x.cand_name.get(full, full))
        wr[n], wc[n] = a, (b if b is not None and b.shape == a.shape else a)
    mr, mc = build_leaf(meta, wr), build_leaf(meta, wc)
    if mr is None or mc is None:
        return None
    r_in = [np.asarray(x.ref_tr.tensor(t.refs[i])) for i in f_in]
    c_in = [np.asarray(x.cand_tr.tensor(t.cands[i])).reshape(r.shape) for i, r in zip(f_in, r_in)]
    r_go, c_go = x.ref_tr.tensor(t.refs[g_out[0]]), x.cand_tr.tensor(t.cands[g_out[0]])
    rep_r = vjp_leaf(mr, r_in, r_go, wanted)
    reps = [vjp_leaf(mc, c_in, c_go, wanted)]
    if names:  # the weights the candidate's call used are not certain: try both sides'
        reps.append(vjp_leaf(mr, c_in, c_go, wanted))
    if rep_r is None or reps[0] is None:
        return None
    out: list[tuple[_Judged, float, float]] = []
    tol = self_tolerance(meta, judged[0][0].ref_dtype)
    for k, j in enumerate(judged):
        pr, what = j[0], j[1]
        ref_cap: np.ndarray | None
        cand_cap: np.ndarray | None
        if k < len(wanted):
            ref_cap = np.asarray(x.ref_tr.tensor(j[2]), np.float64)
            cand_cap = np.asarray(x.cand_tr.tensor(j[3]), np.float64)
            r64, c64s = rep_r[0][k], [r[0][k] for r in reps if r is not None]
        else:
            ref_cap, cand_cap = x.rg.get(step, pr.module), x.cg.get(step, pr.cand_module)
            r64, c64s = rep_r[1][what], [r[1][what] for r in reps if r is not None]
        if ref_cap is None or cand_cap is None or ref_cap.size != r64.size \
                or cand_cap.size != r64.size:
            continue
        ref_local = normwise(ref_cap.reshape(r64.shape), r64)
        if not ref_local <= tol:
            continue  # the replay does not make the reference's own gradient again
        cand_local = min(normwise(cand_cap.reshape(c.shape), c) for c in c64s)
        out.append((j, ref_local, cand_local))
    return out


def replay_leaves_backward(result: CompareResult, ref_tr: Any, cand_tr: Any,
                           rank: int = 0) -> int:
    """Judge the gradients of leaf ``torch.nn`` calls by float64 replay of the reference
    module's backward (module docstring), in place; returns how many backward calls were
    replayed. Nothing happens without the reference's ``modules`` notes, a PyTorch reference,
    PyTorch here, or a pair table."""
    table = result.table
    meta = leaf_notes(result, ref_tr, rank)
    if meta is None:
        return 0
    fwd: dict[tuple[int, str], dict[int, int]] = {}
    bwd: dict[tuple[int, str], list[int]] = {}
    for pos, c in enumerate(result.calls):
        m = meta.get(c.module)
        if c.level != "module" or c.rank != rank or not isinstance(m, dict) or not m:
            continue
        if c.direction == "forward":
            fwd.setdefault((c.step, c.module), {})[c.module_call] = pos
        elif c.direction == "backward":
            bwd.setdefault((c.step, c.module), []).append(pos)
    x = _Ctx(result, ref_tr, cand_tr, rank)
    introduced: list[tuple[int, int, str, str, str]] = []
    replayed = 0
    for (step, module), bposs in bwd.items():
        m = meta[module]
        names = m.get("params") or []
        if not isinstance(names, list) or (names and step == 0):
            continue  # the weights before the first update are not in the trace
        f = fwd.get((step, module), {})
        whole = len(bposs) == 1 and len(f) == 1
        for bpos in bposs:
            c = result.calls[bpos]
            k = c.module_call
            got = None
            for j in dict.fromkeys((len(f) - 1 - k, k)):
                if j not in f:
                    continue
                try:
                    got = _replay_call(x, m, module, step, bpos, f[j], whole)
                except Exception:  # noqa: BLE001 -- an attribute or tensor the replay cannot use
                    got = None
                if got:
                    break
            if not got:
                continue
            replayed += 1
            bad = [_verdict(pr, what, ref_local, cand_local, bool(names))
                   for (pr, what, _, _), ref_local, cand_local in got]
            for what in (w for w in bad if w):
                introduced.append((step, c.order, module, c.cand_module, what))
    if replayed:
        table.refresh()
        result.settings["leaf_replay_backward"] = {
            "calls": replayed, "method": "float64 replay of the backward of the reference's "
            "leaf torch.nn modules"}
        result.notes.append(f"{replayed} leaf module backward call(s) judged by float64 replay "
                            "of the reference module's backward on each side's tensors")
    if introduced:
        introduced.sort()
        result.settings["leaf_replay_backward"]["introduced"] = [
            {"step": s, "module": mod, "cand_module": cm, "gradient": w}
            for s, _, mod, cm, w in introduced]
        seen = list(dict.fromkeys(f"{mod} (step {s})" for s, _, mod, _, _ in introduced))
        result.notes.append(
            "introducing a difference of its own in backward, by float64 replay of the "
            f"reference module's backward on the candidate's tensors: {seen[0]} first (nearest "
            "the loss)" + (f"; also introducing: {', '.join(seen[1:])}" if seen[1:] else ""))
    return replayed


def _verdict(pr: PairResult, what: str, ref_local: float, cand_local: float,
             weights: bool) -> str:
    """Judge one gradient pair in place; returns ``what`` when the leaf introduces it."""
    bound = replay_bound(ref_local, pr.ref_dtype, pr.cand_dtype)
    ev: dict[str, Any] = {"direction": "backward", "gradient": what, "ref_local": ref_local,
                          "cand_local": cand_local, "bound": bound,
                          "weights": "the candidate's or the reference's" if weights
                          else "none"}
    pr.metrics["leaf_replay"] = ev
    if bound < cand_local <= PORT_FACTOR * bound and weights:
        ev["verdict"] = (f"not judged: a leaf with weights over its bound but within "
                         f"{PORT_FACTOR:g}x it")
    elif cand_local > bound:
        pr.status = "fail"
        pr.reason = (f"introduced in backward: by float64 replay of the reference module's "
                     f"backward on the candidate's inputs and output gradient, the candidate's "
                     f"gradient ({what}) differs by {cand_local:.3g} (normwise), "
                     f"{cand_local / max(bound, 1e-300):.3g}x its noise bound {bound:.3g} (the "
                     f"reference's own error {ref_local:.3g})")
        return what
    elif pr.status in ("warn", "fail") and not pr.fp64 and "noise run" not in pr.tol_source:
        pr.status = "pass"
        pr.reason = (f"within the replayed noise: the candidate's gradient ({what}) is "
                     f"{cand_local:.3g} from the float64 replay of the reference module's "
                     f"backward on its tensors (bound {bound:.3g})")
    return ""
