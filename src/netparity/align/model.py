"""Result types of alignment (:class:`Call`, :class:`Match`, :class:`ParamPair`,
:class:`Alignment`) and :func:`calls_from_records`, which turns trace records into calls.

A *call* is one module or op invocation: every record sharing ``(rank, step, event)``. Its inputs
and outputs are ordered by argument path (``0`` < ``1`` < ``1.0`` < ``kw.mask``) so that two calls
of the same op line up argument by argument.

Example:
    >>> from netparity.trace import Record
    >>> recs = [Record(kind="op", op="add", event=1, role="input", arg="1", shape=(2,)),
    ...         Record(kind="op", op="add", event=1, role="input", arg="0", shape=(2,)),
    ...         Record(kind="op", op="add", event=1, role="output", shape=(2,))]
    >>> [c.op for c in calls_from_records(recs)], [r.arg for r in calls_from_records(recs)[0].inputs]
    (['add'], ['0', '1'])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from netparity.trace.schema import Record

#: record kinds that form calls; the rest (param, grad, loss, data, custom) pair by name
CALL_KINDS = ("module", "op")
#: methods a :class:`Match` can carry, strongest evidence first
METHODS = ("path", "mapping", "anchor", "dp", "structure", "stats")


@dataclass
class Call:
    """One module or op call, built from the records that share an event."""

    event: int
    kind: str
    module: str
    op: str
    native: str
    call: int
    module_call: int
    direction: str
    step: int
    rank: int
    source: str
    inputs: list[Record] = field(default_factory=list)
    outputs: list[Record] = field(default_factory=list)

    @property
    def name(self) -> str:
        """A readable name: the module path for modules, ``module/op#call`` for ops."""
        if self.kind == "module":
            return self.module or "<root>"
        return f"{self.module or '<root>'}/{self.op}#{self.call}"

    @property
    def seq(self) -> int:
        """Sequence number of the call's first record (its position in execution order)."""
        recs = self.inputs or self.outputs
        return recs[0].seq if recs else -1

    def to_json(self) -> dict[str, Any]:
        ins, outs = self._io_shapes()
        return {
            "kind": self.kind,
            "module": self.module,
            "op": self.op,
            "native": self.native,
            "call": self.call,
            "module_call": self.module_call,
            "direction": self.direction,
            "step": self.step,
            "rank": self.rank,
            "event": self.event,
            "source": self.source,
            "inputs": ins,
            "outputs": outs,
        }

    def _io_shapes(self) -> tuple[list[list[int]], list[list[int]]]:
        """Shapes of the inputs and of the outputs."""
        return [list(r.shape) for r in self.inputs], [list(r.shape) for r in self.outputs]


@dataclass
class Match:
    """Calls paired between the two traces: 1:1 when both sides hold one call, else N:M."""

    ref: list[Call]
    cand: list[Call]
    method: str
    confidence: float
    note: str = ""

    @property
    def is_group(self) -> bool:
        return len(self.ref) != 1 or len(self.cand) != 1

    def to_json(self) -> dict[str, Any]:
        return {
            "ref": [c.name for c in self.ref],
            "cand": [c.name for c in self.cand],
            "method": self.method,
            "confidence": round(self.confidence, 4),
            "note": self.note,
        }


@dataclass
class ParamPair:
    """A param / grad / loss / data record paired by name (after name rules)."""

    ref: Record
    cand: Record
    method: str


@dataclass
class Alignment:
    """Everything paired between two traces, and everything left over (never dropped)."""

    matches: list[Match] = field(default_factory=list)
    unmatched_ref: list[Call] = field(default_factory=list)
    unmatched_cand: list[Call] = field(default_factory=list)
    params: list[ParamPair] = field(default_factory=list)
    unmatched_params_ref: list[Record] = field(default_factory=list)
    unmatched_params_cand: list[Record] = field(default_factory=list)
    module_map: dict[str, str] = field(default_factory=dict)
    #: op-name groups found (N:M), as ``(ref names, cand names)``; feeds :meth:`to_mapping`
    op_groups: list[tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=list)

    def __bool__(self) -> bool:
        """True when nothing on either side was left unmatched."""
        return not (
            self.unmatched_ref
            or self.unmatched_cand
            or self.unmatched_params_ref
            or self.unmatched_params_cand
        )

    @property
    def groups(self) -> list[Match]:
        """The N:M matches."""
        return [m for m in self.matches if m.is_group]

    def to_mapping(self) -> dict[str, Any]:
        """The mapping-file form of what was found; write it, correct it, pass it back.

        Only pairs whose names differ are listed (equal paths pair by themselves), so the file
        stays short.

        Example:
            >>> Alignment(module_map={"fc": "classifier", "conv1": "conv1"}).to_mapping()
            {'modules': {'fc': 'classifier'}, 'rules': [], 'ops': [], 'params': {}}
        """
        modules = {r: c for r, c in self.module_map.items() if r != c}
        params: dict[str, str] = {}
        for p in self.params:
            if p.ref.kind in ("param", "grad") and p.ref.module != p.cand.module:
                params[p.ref.module] = p.cand.module
        ops: list[dict[str, list[str]]] = []
        seen: set[tuple[tuple[str, ...], tuple[str, ...]]] = set()
        for g in self.op_groups:
            if g not in seen:
                seen.add(g)
                ops.append({"ref": list(g[0]), "cand": list(g[1])})
        return {"modules": modules, "rules": [], "ops": ops, "params": params}

    def summary(self) -> dict[str, int]:
        """Counts: matched (1:1), groups (N:M), unmatched per side, params paired/unpaired."""
        return {
            "matched": sum(1 for m in self.matches if not m.is_group),
            "groups": sum(1 for m in self.matches if m.is_group),
            "unmatched_ref": len(self.unmatched_ref),
            "unmatched_cand": len(self.unmatched_cand),
            "params": len(self.params),
            "unmatched_params_ref": len(self.unmatched_params_ref),
            "unmatched_params_cand": len(self.unmatched_params_cand),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": self.summary(),
            "matches": [m.to_json() for m in self.matches],
            "unmatched_ref": [c.name for c in self.unmatched_ref],
            "unmatched_cand": [c.name for c in self.unmatched_cand],
            "params": [
                {"ref": p.ref.module or p.ref.op, "cand": p.cand.module or p.cand.op,
                 "kind": p.ref.kind, "method": p.method}
                for p in self.params
            ],
            "unmatched_params_ref": [r.module or r.op for r in self.unmatched_params_ref],
            "unmatched_params_cand": [r.module or r.op for r in self.unmatched_params_cand],
            "module_map": dict(self.module_map),
        }


def _arg_key(arg: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key of an argument path: positional numbers first, numerically; then names."""
    if not arg:
        return ()
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in arg.split("."))


def calls_from_records(records: list[Record]) -> list[Call]:
    """Group module/op records by ``(rank, step, event)`` into calls, in execution order.

    Records of other kinds (param, grad, loss, data, custom) are ignored: they pair by name (see
    :func:`netparity.align.align_traces`). A call's position is that of its first record, so a
    module call comes before the ops it runs (its inputs are recorded on entry).

    Example:
        >>> from netparity.trace import Record
        >>> recs = [Record(kind="module", module="fc", op="linear", event=3, role="input", seq=0),
        ...         Record(kind="module", module="fc", op="linear", event=3, role="output", seq=1)]
        >>> c = calls_from_records(recs)[0]
        >>> (c.module, c.op, len(c.inputs), len(c.outputs))
        ('fc', 'linear', 1, 1)
    """
    calls: dict[tuple[int, int, int], Call] = {}
    get = calls.get
    new = object.__new__
    for r in records:
        kind = r.kind
        if kind != "module" and kind != "op":  # CALL_KINDS, spelled out: this loop is hot
            continue
        key = (r.rank, r.step, r.event)
        c = get(key)
        if c is None:
            # the dataclass __init__ is skipped (a third of this function's time on large
            # traces); the attributes are exactly those it would set
            c = new(Call)
            c.__dict__ = {
                "event": r.event, "kind": kind, "module": r.module, "op": r.op,
                "native": r.native, "call": r.call, "module_call": r.module_call,
                "direction": r.direction, "step": r.step, "rank": r.rank, "source": r.source,
                "inputs": [], "outputs": [],
            }
            calls[key] = c
        elif not c.source and r.source:
            c.source = r.source
        if r.role == "input":
            c.inputs.append(r)
        else:
            c.outputs.append(r)
    out = list(calls.values())  # dicts keep insertion order: first-record execution order
    for c in out:
        if len(c.inputs) > 1 and not _in_order(c.inputs):
            c.inputs.sort(key=lambda r: _arg_key(r.arg))
        if len(c.outputs) > 1 and not _in_order(c.outputs):
            c.outputs.sort(key=lambda r: _arg_key(r.arg))
    return out


def _in_order(recs: list[Record]) -> bool:
    """Cheap check for the usual case: single-character positional args already ascending."""
    prev = ""
    for r in recs:
        a = r.arg
        if len(a) != 1 or a < prev:
            return False
        prev = a
    return True
