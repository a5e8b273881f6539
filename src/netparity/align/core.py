"""align_traces: first version (same-framework path + call index); cross-framework follows."""

from __future__ import annotations

from typing import Any

from netparity.align.mapping import Mapping
from netparity.align.model import Alignment, Call, Match, ParamPair, calls_from_records
from netparity.trace.reader import Trace


def align_traces(
    ref: Trace,
    cand: Trace,
    *,
    level: str = "module",
    step: int | None = None,
    rank: int = 0,
    direction: str | None = None,
    mapping: Mapping | None = None,
) -> Alignment:
    """Pair the calls of two traces (simple version: module path + call index, op order)."""
    kinds = ["module"] if level == "module" else ["op"]
    out = Alignment()
    rr = ref.records(step=step, rank=rank, direction=direction)
    cr = cand.records(step=step, rank=rank, direction=direction)
    rc = [c for c in calls_from_records(rr) if c.kind in kinds]
    cc = [c for c in calls_from_records(cr) if c.kind in kinds]
    index: dict[Any, Call] = {}
    for c in cc:
        index[(c.step, c.direction, c.kind, c.module, c.module_call if c.kind == "op" else c.call,
               c.call)] = c
    used: set[int] = set()
    for c in rc:
        k = (c.step, c.direction, c.kind, c.module, c.module_call if c.kind == "op" else c.call,
             c.call)
        m = index.get(k)
        if m is not None and id(m) not in used:
            used.add(id(m))
            out.matches.append(Match([c], [m], "path", 1.0))
            if c.kind == "module":
                out.module_map[c.module] = m.module
        else:
            out.unmatched_ref.append(c)
    out.unmatched_cand = [c for c in cc if id(c) not in used]
    pk = ("param", "grad", "loss", "data", "custom")
    rp = [r for r in rr if r.kind in pk]
    cp = {(r.step, r.kind, r.direction, r.module, r.op, r.role, r.arg): r for r in cr if r.kind in pk}
    usedp: set[int] = set()
    for r in rp:
        m2 = cp.get((r.step, r.kind, r.direction, r.module, r.op, r.role, r.arg))
        if m2 is not None:
            usedp.add(id(m2))
            out.params.append(ParamPair(r, m2, "name"))
        else:
            out.unmatched_params_ref.append(r)
    out.unmatched_params_cand = [r for r in cr if r.kind in pk and id(r) not in usedp]
    return out
