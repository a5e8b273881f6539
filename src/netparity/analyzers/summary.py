"""Trace summary: what ``netparity inspect`` shows, as data.

A stateless analyzer (Holistic-Trace-Analysis style): takes a :class:`~netparity.trace.Trace`,
returns a small dataclass; the CLI renders it.

Example:
    >>> from netparity.trace import open_trace                  # doctest: +SKIP
    >>> s = summarize(open_trace("runs/ref"))                    # doctest: +SKIP
    >>> s.first_nonfinite[0].module if s.first_nonfinite else None   # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from netparity.trace.reader import Trace
from netparity.trace.schema import Record


@dataclass
class NonFinite:
    """A record holding NaN or Inf values (earliest first)."""

    step: int
    rank: int
    seq: int
    kind: str
    direction: str
    module: str
    op: str
    role: str
    arg: str
    nan: int
    posinf: int
    neginf: int
    numel: int
    source: str

    @property
    def where(self) -> str:
        name = self.module or self.op or self.kind
        if self.kind == "op" and self.module:
            name = f"{self.module} / {self.op}"
        return name


@dataclass
class ModuleRow:
    """One module's forward output statistics (first output, first call) in the summary step."""

    module: str
    depth: int
    native: str
    calls: int
    dtype: str
    shape: tuple[int, ...]
    stats: dict[str, Any]


@dataclass
class TraceSummary:
    path: str
    manifest: dict[str, Any]
    ranks: list[int]
    steps: list[int]
    counts: dict[str, int]
    counts_by_direction: dict[str, int]
    payload_bytes: int
    step: int | None
    modules: list[ModuleRow] = field(default_factory=list)
    first_nonfinite: list[NonFinite] = field(default_factory=list)
    nonfinite_records: int = 0
    fp16_overflow_records: int = 0
    losses: list[tuple[int, float | None]] = field(default_factory=list)

    def __bool__(self) -> bool:  # a trace "passes" inspection when it holds no NaN/Inf
        return self.nonfinite_records == 0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["healthy"] = bool(self)
        return d


def _nonfinite(r: Record) -> NonFinite:
    s = r.stats
    return NonFinite(
        step=r.step,
        rank=r.rank,
        seq=r.seq,
        kind=r.kind,
        direction=r.direction,
        module=r.module,
        op=r.op,
        role=r.role,
        arg=r.arg,
        nan=int(s.get("nan") or 0),
        posinf=int(s.get("posinf") or 0),
        neginf=int(s.get("neginf") or 0),
        numel=r.numel,
        source=r.source,
    )


def summarize(trace: Trace, *, step: int | None = None, rank: int | None = None,
              max_nonfinite: int = 10) -> TraceSummary:
    """Summarise a trace: run facts, counts, module tree of one step, first NaN/Inf records."""
    steps = trace.steps()
    ranks = [rank] if rank is not None else trace.ranks
    if step is None and steps:
        step = steps[0]
    counts = trace.counts()
    by_dir: dict[str, int] = {}
    payload = 0
    nonfinite: list[NonFinite] = []
    n_nonfinite = 0
    n_overflow = 0
    losses: list[tuple[int, float | None]] = []
    modules: dict[str, ModuleRow] = {}
    for r in trace.iter_records(rank=ranks):
        by_dir[r.direction] = by_dir.get(r.direction, 0) + 1
        payload += r.nbytes or 0
        s = r.stats
        if (s.get("nan") or 0) or (s.get("posinf") or 0) or (s.get("neginf") or 0):
            n_nonfinite += 1
            if len(nonfinite) < max_nonfinite:
                nonfinite.append(_nonfinite(r))
        if s.get("fp16_overflow"):
            n_overflow += 1
        if r.kind == "loss":
            losses.append((r.step, s.get("mean")))
        if (
            r.kind == "module"
            and r.step == step
            and r.direction == "forward"
            and r.role == "output"
        ):
            row = modules.get(r.module)
            if row is None:
                modules[r.module] = ModuleRow(
                    module=r.module,
                    depth=0 if not r.module else r.module.count(".") + 1,
                    native=r.native,
                    calls=r.call + 1,
                    dtype=r.dtype,
                    shape=r.shape,
                    stats=dict(s),
                )
            else:
                row.calls = max(row.calls, r.call + 1)
    # Execution order puts children before parents (a module's output is recorded when it
    # returns); a tree reads better in path order with parents first.
    rows = sorted(modules.values(), key=lambda m: _path_key(m.module))
    return TraceSummary(
        path=str(trace.path),
        manifest=trace.manifest,
        ranks=ranks,
        steps=steps,
        counts=counts,
        counts_by_direction=by_dir,
        payload_bytes=payload,
        step=step,
        modules=rows,
        first_nonfinite=nonfinite,
        nonfinite_records=n_nonfinite,
        fp16_overflow_records=n_overflow,
        losses=losses,
    )


def _path_key(path: str) -> tuple[Any, ...]:
    """Sort key that keeps numeric path parts in numeric order (layer1.10 after layer1.9)."""
    if not path:
        return ()
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in path.split("."))
