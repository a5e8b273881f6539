"""Plain ``compare`` calibrated at module level: leaf ``torch.nn`` modules replayed from the trace
(issue 28, deliver 0).

A PyTorch capture records, once per leaf module of ``torch.nn`` (``capture_notes.json``,
section ``modules``), its class name and plain constructor attributes (eps, stride,
approximate, ...). For each forward call of such a leaf with tensors on both sides, the
reference module is rebuilt in float64 (``cls.__new__`` + ``nn.Module.__init__`` + the recorded
attributes + the weights the forward used) and:

* ``ref_local``  = normwise error of the reference's captured output against that replay on the
  reference's captured inputs (its own rounding; a replay that misses it by more than
  ``SELF_TOLERANCE`` is not evidence: the call is left to the table);
* ``cand_local`` = normwise error of the candidate's captured output against the same module
  replayed on the *candidate's* inputs (with the candidate's own weights, and with the
  reference's: the smaller): what the candidate's layer computes differently, free of what
  its inputs carried in.

The bound is step's replay bound (:func:`netparity.compare.noise.replay_bound`): ``NOISE_K`` x
``ref_local`` (scaled to a coarser candidate dtype) + ``FLOOR_EPS`` units of the coarser dtype.
Above it the leaf **introduces** a difference: its output pairs FAIL, every such leaf named in
forward order. Within it, output pairs the fixed table warned or failed are cleared ("within the
replayed noise"). A container keeps the table's verdict: its own code between its children (an
attention's scaling of its logits) is not replayed, so its leaves agreeing does not clear it.

Weights: the trace holds parameters after each update, so a step's forward used the previous
step's; parametrised leaves at step 0 are not replayed (parameter-free ones are). Even then the
weights a forward used are not certain (``netparity step`` starts the candidate's later steps
from the reference's state; a loop may update between calls), so a leaf with weights over its
bound is judged only beyond :data:`PORT_FACTOR` x it with either side's weights, and left to
the table between the two (measured on a faithful PyTorch -> MindSpore ViT: linears 4-11x with
the wrong side's weights, at most 0.12x with the better; LayerNorm eps 1e-7: 115x). A subclass from another library
(timm's ``LayerNorm``) is recorded as its nearest ``torch.nn`` base and replayed as that base only
when the replay makes the reference's own output again to ``FLOOR_EPS`` units. Not replayed
either: classes outside ``torch.nn`` (a name from a trace is looked up in ``torch.nn.modules``
and nothing is ever imported), random ones (dropout in training), batch norm in eval mode (the
running statistics are not in the trace). A MindSpore reference's leaf Cells are replayed as
float64 PyTorch math (:func:`netparity.frameworks.torch.leafmods.build_leaf`), held to the
same strict self-check as a subclass (:func:`self_tolerance`). Backward:
:mod:`netparity.compare.leafreplay_back`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from netparity.capture.notes import read_notes
from netparity.compare.noise import FLOOR_EPS, replay_bound, unit_roundoff
from netparity.compare.results import CompareResult

#: a leaf with weights is held to ``PORT_FACTOR`` x its bound, not 1x: its trace may not hold
#: the weights its forward used (module docstring), so only a difference this far beyond
#: the noise with either side's weights is called the module's own (issue 28: "a port
#: difference 100x above the noise is a FAIL in every command")
PORT_FACTOR = 100.0
#: a reference replay that misses its own captured output by more than this is no evidence
SELF_TOLERANCE = 1e-3


def could_change(pr: Any, ref_dtype: str, cand_dtype: str, weights: bool) -> bool:
    """Whether replaying the leaf call whose output pair is ``pr`` could change its verdict.

    Replay changes a pair's verdict in two ways only: it clears a pair the table warned or
    failed (so those are always replayed), or it calls the leaf *introducing* because its local
    error ``cand_local`` exceeds the replay bound (``PORT_FACTOR`` x it for a leaf with weights).
    That bound is never below ``replay_bound(0, ...)`` (``FLOOR_EPS`` units of the coarser
    dtype), so a passing pair is replayed only when its end-to-end normwise error ``e``
    (candidate's output against the reference's) exceeds that smallest bound times the factor
    the leaf is judged at (``PORT_FACTOR`` with weights, 1 without).

    Why a passing pair below it cannot be introducing in practice: with ``R`` the float64
    replay, ``x_r``/``x_c`` each side's inputs and ``y_c`` the candidate's output, the
    reference's output is ``R(x_r)`` to within its own rounding (``ref_local``, which the bound
    already allows ``NOISE_K`` x), so ``e ~ |y_c - R(x_r)|`` while ``cand_local = |y_c - R(x_c)|``.
    ``cand_local`` above the threshold with ``e`` under it means the candidate's output is
    *closer* to the reference's result on the reference's inputs than to the exact result on its
    own inputs: the leaf's own difference would have to cancel the difference its inputs carried
    in. An independent wrong default (an eps, an approximation) does not do that; its own error
    adds to the output's (the ViT's LayerNorm eps 1e-7 and tanh GELU both show up in ``e``).

    The saving: a faithful port's leaves nearly all pass below the threshold, so a conv that
    agrees is neither read twice nor rebuilt and re-run in float64. Pairs without an
    element-wise error (statistics only) are replayed.
    """
    if pr.status != "pass" or "rmse" not in pr.metrics or "ref_rms" not in pr.metrics:
        return True
    from netparity.compare.verdicts import norm_error

    floor = replay_bound(0.0, ref_dtype, cand_dtype) * (PORT_FACTOR if weights else 1.0)
    return bool(norm_error(pr.metrics) > floor)


class _Params:
    """Parameter payloads of one trace after each step (``kind="grad"``: the gradients of
    each step): (step, name) -> float64 array."""

    def __init__(self, tr: Any, rank: int, kind: str = "param") -> None:
        self.tr, self.rank, self.kind = tr, rank, kind
        self.by_step: dict[int, dict[str, Any]] = {}

    def get(self, step: int, name: str) -> np.ndarray | None:
        by = self.by_step.get(step)
        if by is None:
            by = self.by_step[step] = {r.module: r for r in self.tr.records(
                kind=self.kind, step=step, rank=self.rank) if r.has_payload}
        r = by.get(name)
        return None if r is None else np.asarray(self.tr.tensor(r), np.float64)


def self_tolerance(meta: dict[str, Any], dtype: str) -> float:
    """How closely a replay must make the reference's own tensor again to count as evidence:
    a subclass, or a MindSpore Cell replayed as PyTorch math, to ``FLOOR_EPS`` units of its
    precision (the same computation, not a kin); a ``torch.nn`` class to ``SELF_TOLERANCE``."""
    strict = meta.get("subclass") or meta.get("framework") == "mindspore"
    return FLOOR_EPS * unit_roundoff(dtype) if strict else SELF_TOLERANCE


def leaf_notes(result: CompareResult, ref_tr: Any, rank: int) -> dict[str, Any] | None:
    """The reference's ``modules`` notes when its leaves can be replayed (a PyTorch or
    MindSpore reference with notes, a pair table), else None."""
    table = result.table
    if ref_tr.framework not in ("torch", "mindspore") or table is None or not len(table):
        return None
    meta = read_notes(Path(ref_tr.path) / f"rank{rank}").get("modules")
    if not isinstance(meta, dict) or not meta:
        return None
    return meta  # (PyTorch is imported by the first call that needs replaying)


def replay_leaves(result: CompareResult, ref_tr: Any, cand_tr: Any, rank: int = 0) -> int:
    """Judge the forward pairs of leaf ``torch.nn`` calls by float64 replay (module docstring),
    in place; returns how many calls were replayed. Nothing happens without the reference's
    ``modules`` notes, a PyTorch reference, or a pair table."""
    from netparity.precision.engine import normwise

    table = result.table
    meta = leaf_notes(result, ref_tr, rank)
    if meta is None:
        return 0
    by_call: dict[int, list[int]] = {}
    for i, c in enumerate(table.call.tolist()):
        by_call.setdefault(c, []).append(i)
    cand_name = {p.module: p.cand_module for p in result.params if p.kind == "param"}
    rp, cp = _Params(ref_tr, rank), _Params(cand_tr, rank)
    introduced: list[tuple[int, int, str, str]] = []
    replayed = 0
    for pos, c in enumerate(result.calls):
        m = meta.get(c.module)
        if (c.level != "module" or c.direction != "forward" or c.rank != rank
                or not isinstance(m, dict)):
            continue
        if not m:
            continue
        rows = by_call.get(pos, [])
        ins = sorted((i for i in rows if not table.is_out[i]), key=lambda i: table.idx[i])
        outs = [i for i in rows if table.is_out[i]]
        if len(outs) != 1 or not ins or any(not table.idx[i][2:].isdigit() for i in ins):
            continue
        recs = [(table.refs[i], table.cands[i]) for i in (*ins, *outs)]
        if not all(a.has_payload and b.has_payload for a, b in recs):
            continue
        names = m.get("params") or []
        if not isinstance(names, list):
            continue
        if not could_change(table.get(outs[0]), recs[-1][0].dtype, recs[-1][1].dtype,
                            bool(names)):
            continue  # a passing output too close to be called introducing: not replayed
        try:  # imported on the first call replayed: importing torch costs more than most replays
            from netparity.frameworks.torch.leafmods import build_leaf, run_leaf
        except ImportError:  # no PyTorch here: nothing to replay with
            return 0
        try:
            wr: dict[str, np.ndarray] = {}
            wc: dict[str, np.ndarray] = {}
            if names:
                if c.step == 0:
                    continue  # the weights before the first update are not in the trace
                for n in names:
                    full = f"{c.module}.{n}"
                    a = rp.get(c.step - 1, full)
                    if a is None:
                        raise KeyError(full)
                    wr[n] = a
                    b = cp.get(c.step - 1, cand_name.get(full, full))
                    wc[n] = b if b is not None and b.shape == a.shape else a
            mr, mc = build_leaf(m, wr), build_leaf(m, wc)
            if mr is None or mc is None:
                continue
            r_in = [np.asarray(ref_tr.tensor(a)) for a, _ in recs[:-1]]
            c_in = [np.asarray(cand_tr.tensor(b)) for _, b in recs[:-1]]
            r64, c64 = run_leaf(mr, r_in), run_leaf(mc, [x.reshape(y.shape) for x, y in
                                                 zip(c_in, r_in)])
            ref_out = np.asarray(ref_tr.tensor(recs[-1][0]), np.float64)
            cand_out = np.asarray(cand_tr.tensor(recs[-1][1]), np.float64)
        except Exception:  # noqa: BLE001 -- an attribute or weight the replay cannot use
            continue
        if r64 is None or c64 is None or r64.size != ref_out.size or c64.size != cand_out.size:
            continue
        ref_local = normwise(ref_out.reshape(r64.shape), r64)
        a, b = recs[-1]
        if not ref_local <= self_tolerance(m, a.dtype):
            continue  # the replay does not make the reference's own output again
        cand_local = normwise(cand_out.reshape(c64.shape), c64)
        if names:  # the weights its output was made with are not certain: try both sides'
            alt = run_leaf(mr, [x.reshape(y.shape) for x, y in zip(c_in, r_in)])
            if alt is not None and alt.size == cand_out.size:
                cand_local = min(cand_local, normwise(cand_out.reshape(alt.shape), alt))
        bound = replay_bound(ref_local, a.dtype, b.dtype)  # step's replay bound
        replayed += 1
        ev = {"ref_local": ref_local, "cand_local": cand_local, "bound": bound,
              "weights": "none" if not names else "the candidate's or the reference's"}
        pr = table.get(outs[0])
        pr.metrics["leaf_replay"] = ev
        if bound < cand_local <= PORT_FACTOR * bound and names:
            # a leaf with weights: the trace holds each side's weights after every update,
            # but not always the ones the forward used (`netparity step` resynchronises the
            # candidate to the reference's state; a user's loop may update between calls), so
            # a weight difference could pass for a code difference: not judged, the table's
            # verdict stands (a faithful torch -> MindSpore ViT's linears measured 4-11x with
            # the wrong side's weights, 0.12x with the right ones); beyond PORT_FACTOR x with
            # either side's weights it is the module's code (ViT LayerNorm eps 1e-7: 115x)
            ev["verdict"] = (f"not judged: a leaf with weights over its bound but within "
                             f"{PORT_FACTOR:g}x it")
        elif cand_local > bound:
            introduced.append((c.step, c.order, c.module, c.cand_module))
            ratio = cand_local / max(bound, 1e-300)
            pr.status = "fail"
            pr.reason = (f"introduced: by float64 replay of the reference module on the "
                         f"candidate's inputs, the candidate's output differs by "
                         f"{cand_local:.3g} (normwise), {ratio:.3g}x its noise bound "
                         f"{bound:.3g} (the reference's own error {ref_local:.3g})")
        else:
            if pr.status in ("warn", "fail") and not pr.fp64 \
                    and "noise run" not in pr.tol_source:
                pr.status = "pass"
                pr.reason = (f"within the replayed noise: the candidate's output is "
                             f"{cand_local:.3g} from the float64 replay of the reference module "
                             f"on its inputs (bound {bound:.3g})")
    if replayed:
        table.refresh()
        result.settings["leaf_replay"] = {"calls": replayed, "method": "float64 replay of the "
                                          "reference's leaf torch.nn modules"}
        result.notes.append(f"{replayed} leaf module call(s) judged by float64 replay of the "
                            "reference module on each side's inputs")
    if introduced:
        introduced.sort()
        result.settings["leaf_replay"]["introduced"] = [
            {"step": s, "module": mod, "cand_module": cm} for s, _, mod, cm in introduced]
        first = introduced[0]
        also = [f"{mod} (step {s})" for s, _, mod, _ in introduced[1:]]
        result.notes.append(
            f"introducing a difference of its own, by float64 replay of the reference module on "
            f"the candidate's inputs: {first[2]} (step {first[0]}) first"
            + (f"; also introducing: {', '.join(also)}" if also else ""))
    return replayed

