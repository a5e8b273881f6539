"""The network view's model: both module trees of a comparison, aligned, each node with its
verdict per rank and direction -- what the interactive view (:mod:`netparity.report.view`)
draws, in the compare and step reports and from ``netparity view``.

A node is a module of the reference (its path; the candidate's name beside it), a module only
one side has (``match`` ``"ref"`` or ``"cand"``: unmatched), a container neither side captured
but whose children were (``"none"``), or an operator under its module (``type`` ``"op"``).
Per rank and direction (forward, backward, update) a node holds the worst of its calls over
the compared steps: status, origin (introduced / propagated), the output's error and the
input's, the steps it failed at, the source lines, the note of whoever judged it (replay) and
the metrics of its worst output pair (both sides' RMS, error, bound). A parameter's gradient
and its value after the update count for the module that owns it.

Example:
    >>> from netparity.compare.results import CompareResult
    >>> m = compare_tree(CompareResult())
    >>> [n["ref"] for n in m["nodes"]], m["first"]
    (['(root)'], None)
"""

from __future__ import annotations

import math
from typing import Any

#: verdict classes, least to most severe (the view colours them; filters name them)
CLASSES = ("pass", "noise", "propagated", "introduced", "nonfinite")
_SEVERITY = {"unknown": 0, "pass": 0, "warn": 1, "fail": 2}
_KEEP_METRICS = ("max_abs", "max_rel", "rmse", "cosine", "ref_rms", "cand_rms", "within",
                 "noise", "bound", "noise_err", "k", "local", "nan_mismatch", "inf_mismatch",
                 "numel", "finite", "min_rtol", "min_atol")


def _num(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def _metrics(pair: Any) -> dict[str, Any]:
    m = getattr(pair, "metrics", None) or {}
    out = {k: _num(m[k]) for k in _KEEP_METRICS if k in m and isinstance(m[k], (int, float))}
    out.update(rtol=_num(pair.rtol), atol=_num(pair.atol), tol=pair.tol_source,
               ref_dtype=pair.ref_dtype, cand_dtype=pair.cand_dtype,
               ref_shape=list(pair.ref_shape), cand_shape=list(pair.cand_shape))
    if pair.reason:
        out["reason"] = pair.reason
    return out


def _nonfinite(pair: Any) -> bool:
    m = getattr(pair, "metrics", None) or {}
    return bool(m.get("nan_mismatch") or m.get("inf_mismatch"))


class _Tree:
    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []
        self.by_ref: dict[str, int] = {}
        self.by_cand: dict[str, int] = {}
        self.ops: dict[tuple[str, str, int], int] = {}
        self.root = self.module("", match="both")

    def _new(self, ref: str, cand: str, parent: int, typ: str, match: str) -> int:
        i = len(self.nodes)
        depth = self.nodes[parent]["depth"] + 1 if parent >= 0 else 0
        self.nodes.append({"id": i, "parent": parent, "depth": depth, "ref": ref, "cand": cand,
                           "type": typ, "match": match, "kind": "", "r": {}})
        return i

    def module(self, path: str, *, match: str = "none", cand: str = "") -> int:
        """The node of reference module ``path``, made (with its ancestors) when missing."""
        if path in self.by_ref:
            i = self.by_ref[path]
            if match != "none" and self.nodes[i]["match"] == "none":
                self.nodes[i]["match"] = match
            if cand and not self.nodes[i]["cand"]:
                self.nodes[i]["cand"] = cand
                self.by_cand.setdefault(cand, i)
            return i
        if path == "":
            i = self._new("(root)", "(root)", -1, "module", match)
            self.by_ref[""] = i
            self.by_cand[""] = i
            return i
        parent = self.module(path.rsplit(".", 1)[0] if "." in path else "")
        i = self._new(path, cand, parent, "module", match)
        self.by_ref[path] = i
        if cand:
            self.by_cand.setdefault(cand, i)
        return i

    def cand_only(self, path: str) -> int:
        """A module only the candidate has, under the node its parent's name is paired with."""
        if path in self.by_cand:
            return self.by_cand[path]
        parent_path = path.rsplit(".", 1)[0] if "." in path else ""
        parent = self.by_cand.get(parent_path)
        if parent is None:
            parent = self.cand_only(parent_path) if parent_path else self.root
        i = self._new("", path, parent, "module", "cand")
        self.by_cand[path] = i
        return i

    def judge(self, i: int, rank: int, direction: str, entry: dict[str, Any]) -> None:
        """Keep the worse of ``entry`` and what node ``i`` holds for (rank, direction)."""
        slot = self.nodes[i]["r"].setdefault(str(rank), {})
        old = slot.get(direction)
        if old is None:
            slot[direction] = entry
            return
        steps = sorted(set(old.get("steps", [])) | set(entry.get("steps", [])))
        worse = (_SEVERITY.get(entry["s"], 0), entry.get("nf", False), entry.get("e", 0.0)) > \
            (_SEVERITY.get(old["s"], 0), old.get("nf", False), old.get("e", 0.0))
        if worse:
            slot[direction] = entry
        slot[direction]["steps"] = steps
        slot[direction]["n"] = old.get("n", 1) + entry.get("n", 1)


def _entry(status: str, origin: str, err: float, in_err: float, step: int, src: str,
           csrc: str, note: str, pair: Any | None) -> dict[str, Any]:
    e: dict[str, Any] = {"s": status, "e": _num(float(err)), "i": _num(float(in_err)),
                         "steps": [step] if status in ("fail", "warn") else [], "n": 1}
    if origin:
        e["o"] = origin
    if src:
        e["src"] = src
    if csrc and csrc != src:
        e["csrc"] = csrc
    if note:
        e["note"] = note
    if pair is not None:
        e["m"] = _metrics(pair)
        if _nonfinite(pair):
            e["nf"] = True
        if status == "pass" and pair.reason:
            e["cleared"] = True  # replay found it amplified rounding noise
    return e


def _worst_pair(keys: list[str], pairs: dict[str, Any]) -> Any | None:
    got = [pairs[k] for k in keys if k in pairs]
    if not got:
        return None
    return max(got, key=lambda p: (_SEVERITY.get(p.status, 0), _nonfinite(p),
                                   float((p.metrics or {}).get("max_rel", 0.0) or 0.0)
                                   if not isinstance((p.metrics or {}).get("max_rel"), str)
                                   else math.inf))


def compare_tree(*results: Any) -> dict[str, Any]:
    """The view's model of one or more :class:`~netparity.compare.results.CompareResult`
    (one per rank of a multi-rank comparison: their trees merge, each node keeping its
    verdicts per rank)."""
    t = _Tree()
    ranks: dict[str, dict[str, Any]] = {}
    first = None
    for result in results:
        fd = _add(t, result)
        rank_of = {str(c.rank) for c in result.calls} | {str(p.rank) for p in result.params}
        for r in sorted(rank_of) or ["0"]:
            ranks[r] = {"status": result.status, "first": None}
        if fd is not None:
            node = _first_node(t, fd)
            where = f"{fd.module or '(root)'}" + (f" / {fd.op}" if fd.level == "op" else "") \
                + f" ({fd.direction}, step {fd.step})"
            ranks[str(fd.rank)] = {"status": result.status, "first": where}
            if first is None and node is not None:
                first = {"id": node, "rank": str(fd.rank), "dir": fd.direction,
                         "step": fd.step, "verdict": fd.verdict}
    order = sorted(ranks, key=int) or ["0"]
    return {"nodes": t.nodes, "ranks": order, "directions": ["forward", "backward", "update"],
            "first": first, "summary": {r: ranks.get(r, {"status": "pass", "first": None})
                                        for r in order},
            "classes": list(CLASSES)}


def _first_node(t: _Tree, fd: Any) -> int | None:
    node = t.by_ref.get(fd.module)
    if fd.level == "op":
        node = next((i for (m, op, _), i in t.ops.items() if m == fd.module and op == fd.op),
                    node)
    return node


def _add(t: _Tree, result: Any) -> Any:
    """Put one comparison's calls, parameters and unmatched modules into ``t``; returns its
    first divergence (forward, else backward, else update)."""
    pairs = {p.key: p for p in result.all_pairs()} if result.calls else {}
    op_seen: dict[tuple[str, str, int, int, str], int] = {}
    for c in sorted(result.calls, key=lambda c: c.order):
        if c.level == "op":
            parent = t.module(c.module)
            k = (c.module, c.direction, c.step, c.rank, c.op)
            op_seen[k] = op_seen.get(k, -1) + 1
            key = (c.module, c.op, op_seen[k])
            if key not in t.ops:
                t.ops[key] = t._new(c.op + (f" #{op_seen[k] + 1}" if op_seen[k] else ""),
                                    c.cand_op, parent, "op", "both")
                t.nodes[t.ops[key]]["kind"] = c.native
            i = t.ops[key]
        else:
            i = t.module(c.module, match="both", cand=c.cand_module)
            t.nodes[i]["kind"] = t.nodes[i]["kind"] or c.op
        pair = _worst_pair(c.outputs, pairs)
        t.judge(i, c.rank, c.direction, _entry(c.status, c.origin, c.out_error, c.in_error,
                                               c.step, c.source, c.cand_source, c.note, pair))
    for p in result.params:  # gradients (backward) and values after the step (update)
        owner = p.module.rsplit(".", 1)[0] if "." in p.module else ""
        i = t.module(owner)
        direction = "update" if p.kind == "param" else "backward"
        err = (p.metrics or {}).get("max_rel", 0.0)
        e = _entry(p.status, "", err if isinstance(err, (int, float)) else math.inf, 0.0,
                   p.step, p.source, "", "", p)
        e["param"] = p.module
        t.judge(i, p.rank, direction, e)
    um = result.unmatched or {}
    for d in um.get("calls_ref", []):
        if d.get("kind", "module") == "module":
            t.module(d.get("module", ""), match="ref")
    for d in um.get("calls_cand", []):
        if d.get("kind", "module") == "module" and d.get("module", ""):
            t.cand_only(d["module"])
    return result.first_divergence or getattr(result, "first_backward", None) \
        or getattr(result, "first_update", None)


def focus(model: dict[str, Any], where: str, *, phase: str = "", step: int | None = None) -> bool:
    """Point the model's "first divergence" at module ``where`` (a reference path, or a
    parameter of one: ``layer1.0.bn1.weight``) -- what a step diagnosis named, which may be a
    later phase than the comparison's own first divergence. False when no node matches."""
    nodes = model["nodes"]
    by = {n["ref"]: n["id"] for n in nodes if n["type"] == "module"}
    path = where
    while path not in by and "." in path:
        path = path.rsplit(".", 1)[0]
    if path not in by:
        return False
    direction = {"update": "update", "later-steps": "update", "backward": "backward"}.get(
        phase, "forward")
    first = model.get("first") or {}
    model["first"] = {"id": by[path], "rank": first.get("rank", model["ranks"][0]),
                      "dir": direction, "step": step if step is not None else 0,
                      "verdict": phase or first.get("verdict", "")}
    return True


def overlay_replay(model: dict[str, Any], entries: list[dict[str, Any]], *,
                   rank: str | None = None) -> int:
    """Put replay's verdicts (``netparity step``: each replayed call's local error against
    its bound, ``introduced`` or ``reproduces``) on the model's nodes: replay decides who
    introduced a difference, over the comparison's accumulated-error guess. Returns how many
    nodes it changed."""
    by = {n["ref"]: n for n in model["nodes"] if n["type"] == "module"}
    r = rank if rank is not None else model["ranks"][0]
    n_changed = 0
    for e in entries:
        node = by.get(e.get("module", "") or "(root)") if e.get("module") else by.get("(root)")
        direction = e.get("direction", "forward")
        slot = node["r"].get(r, {}).get(direction) if node is not None else None
        if slot is None:
            continue
        slot["replay"] = {k: _num(e[k]) for k in ("verdict", "local", "noise", "bound",
                                                   "reason")
                          if k in e and e[k] not in (None, "")}
        if e.get("verdict") == "introduced":
            slot["o"] = "introduced"
            if slot["s"] == "pass":
                slot["s"] = "fail"
        elif e.get("verdict") == "reproduces" and slot.get("o") == "introduced":
            slot["o"] = "propagated"
        n_changed += 1
    return n_changed


def _single(modules: list[tuple[str, str]]) -> _Tree:
    """A one-run tree: every module of ``modules`` ((path, class)), its class beside it."""
    t = _Tree()
    for path, cls in modules:
        i = t.module(path, match="both")
        t.nodes[i]["cand"] = t.nodes[i]["kind"] = t.nodes[i]["kind"] or cls
    t.nodes[t.root]["cand"] = t.nodes[t.root]["kind"] or "(root)"
    return t


def _module_of(call: str) -> str:
    """``"2 / linear (forward)"`` or ``"(root) / mse_loss (forward)"`` -> the module path."""
    head = call.split(" / ", 1)[0].split(" (", 1)[0].strip()
    return "" if head in ("(root)", "<root>") else head


def numerics_tree(result: Any, modules: list[tuple[str, str]]) -> dict[str, Any]:
    """The view's model of one run's numerics (:class:`~netparity.analyzers.numerics.
    NumericsResult`): where the first NaN/Inf was introduced (``nonfinite``), the calls that
    carried it (``propagated``), tensors beyond float16's range (``noise``: a risk), parameters
    that do not update (the update direction of their module fails). ``modules``: the run's
    (path, class) pairs."""
    t = _single(modules)
    first = None
    for o in (result.first_nonfinite, getattr(result, "first_backward", None)):
        if o is None:
            continue
        i = t.module(o.module)
        if o.kind == "op" or (o.op and o.op != t.nodes[i]["kind"] and o.module):
            i = t._new(o.op, o.native, i, "op", "both")
        e = _entry("fail", "introduced" if o.verdict == "introduced" else "propagated",
                   0.0, 0.0, o.step, o.source, "", (o.cause or o.verdict), None)
        e["nf"] = True
        e["m"] = {"dtype": o.dtype, "verdict": o.verdict, "cause": o.cause,
                  **({"backward of": o.forward_op} if o.forward_op else {})}
        t.judge(i, o.rank, o.direction, e)
        if first is None:
            first = {"id": i, "rank": str(o.rank), "dir": o.direction, "step": o.step,
                     "verdict": o.verdict}
        for call in o.chain:
            j = t.module(_module_of(call))
            if j != i:
                direction = "backward" if "(backward" in call else "forward"
                t.judge(j, o.rank, direction, _entry("fail", "propagated", 0.0, 0.0, o.step,
                                                     "", "", "carries it on", None))
    ov = result.overflow
    for row in list(ov.top) + ([ov.first_fp16_overflow] if ov.first_fp16_overflow else []):
        if row.of_fp16_max >= 1.0:
            i = t.module(row.module)
            e = _entry("warn", "", 0.0, 0.0, row.step, "", "",
                       f"{row.amax:.4g} is beyond float16's 65504", None)
            e["m"] = {"max |x|": _num(row.amax), "of float16 max": _num(row.of_fp16_max),
                      "dtype": row.dtype, "tensor": f"{row.role} {row.arg}".strip()}
            t.judge(i, 0, row.direction, e)
    for p in result.not_updating:
        owner = p.name.rsplit(".", 1)[0] if "." in p.name else ""
        i = t.module(owner)
        e = _entry("fail" if p.severity == "fail" else "warn", "", 0.0, 0.0, 0, "", "",
                   p.reason, None)
        e["param"] = p.name
        e["m"] = {"update ratio": _num(p.ratio) if p.ratio is not None else "-",
                  "gradients arrived": p.grads, "steps": p.steps}
        t.judge(i, 0, "update", e)
    ranks = [str(r) for r in (result.ranks or [0])]
    return {"nodes": t.nodes, "ranks": ranks, "directions": ["forward", "backward", "update"],
            "first": first, "summary": {r: {"status": "pass" if result else "fail",
                                            "first": None} for r in ranks},
            "classes": list(CLASSES), "columns": ["module", "class"], "kind": "numerics",
            "labels": {"nonfinite": "NaN/Inf made here", "propagated": "carries it",
                       "noise": "range risk", "introduced": "introduced",
                       "unmatched": "-", "pass": "healthy"}}


def perf_tree(result: Any) -> dict[str, Any]:
    """The view's model of one run's time per module (:class:`~netparity.analyzers.perf.
    PerfResult`): each module's forward and backward self time per steady step, coloured by
    its share of the step (>= 10 %: ``introduced``, the hot ones; >= 2 %: ``propagated``;
    >= 0.5 %: ``noise``); the hot-module findings point "first" at the costliest."""
    step = float(result.steady.get("step", 0.0)) if result.steps else 0.0
    t = _single([(m.module, m.cls) for m in result.modules])
    worst, first = -1.0, None

    def status(sec: float) -> tuple[str, str]:
        share = sec / step if step > 0 else 0.0
        if share >= 0.10:
            return "fail", "introduced"
        if share >= 0.02:
            return "fail", "propagated"
        return ("warn", "") if share >= 0.005 else ("pass", "")

    for m in result.modules:
        i = t.module(m.module)
        for direction, sec, total in (("forward", m.self_time, m.total),
                                      ("backward", m.backward_self, m.backward)):
            if sec is None:
                continue
            s, o = status(sec)
            e = _entry(s, o, sec, 0.0, 0, "", "", "", None)
            e["m"] = {"self seconds per step": _num(sec),
                      "total seconds per step": _num(total) if total is not None else "-",
                      "share of the step": _num(sec / step) if step > 0 else "-",
                      "calls per step": _num(m.calls)}
            if m.mem_rise is not None and direction == "forward":
                e["m"]["memory rise (bytes)"] = m.mem_rise
            t.judge(i, 0, direction, e)
            if sec > worst:
                worst, first = sec, {"id": i, "rank": "0", "dir": direction, "step": 0,
                                     "verdict": "hot"}
    return {"nodes": t.nodes, "ranks": ["0"], "directions": ["forward", "backward", "update"],
            "first": first, "summary": {"0": {"status": "pass", "first": None}},
            "classes": list(CLASSES), "columns": ["module", "class"], "kind": "perf",
            "labels": {"introduced": ">= 10 % of the step", "propagated": ">= 2 %",
                       "noise": ">= 0.5 %", "pass": "< 0.5 %", "nonfinite": "-",
                       "unmatched": "-"},
            "jump": "jump to the costliest module"}
