"""Reading a trace index for alignment: every record of a query (:func:`load_records`), and
the records of calls read on first access (:class:`LazyCall`).

:func:`~netparity.align.core.align_traces` reads only what alignment looks at
(:mod:`netparity.align.tableread`); the comparison engine then asks for the records of the calls
it compares, and :class:`RecordSource` reads them all at once with :func:`load_records`, so a
caller that never looks at records (``netparity align``) never pays for them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import fields
from typing import Any

from netparity.align.model import Call, calls_from_records
from netparity.errors import UsageError
from netparity.gcpause import paused_gc
from netparity.trace.reader import Trace
from netparity.trace.schema import Record


def load_records(
    trace: Trace,
    *,
    rank: int = 0,
    step: int | Iterable[int] | None = None,
    direction: str | Iterable[str] | None = None,
    kinds: Iterable[str] | None = None,
) -> list[Record]:
    """Records of one rank in execution order (what alignment uses: about twice as
    fast as :meth:`Trace.records <netparity.trace.reader.Trace.records>`).

    Example:
        >>> recs = load_records(open_trace("runs/ref"), kinds=("module",))   # doctest: +SKIP
    """
    check_rank(trace, rank)
    return trace.load_records(rank=rank, step=step, direction=direction,
                              kind=None if kinds is None else list(kinds))


def count_records(trace: Trace, *, rank: int = 0, step: int | Iterable[int] | None = None,
                  direction: str | Iterable[str] | None = None) -> int:
    """How many records of a rank a query selects, of any kind (SQLite counts them on the
    step index without reading the table)."""
    check_rank(trace, rank)
    return trace.count(rank=rank, step=step, direction=direction)


def check_rank(trace: Trace, rank: int) -> None:
    if rank not in trace.ranks:
        raise UsageError(f"{trace.path}: no rank {rank} (ranks: {trace.ranks})")


# ---- calls whose records are read on first access ----------------------------------------------

class RecordSource:
    """Reads the records of one side's calls, all at once, when the first of them is asked for
    (the comparison engine asks for nearly all; ``netparity align`` for none)."""

    def __init__(self, trace: Trace, rank: int, step: Any, direction: Any, kinds: Any):
        self.trace, self.rank, self.step, self.direction = trace, rank, step, direction
        self.kinds = tuple(kinds)
        self.lock = threading.Lock()
        self.calls: dict[tuple[int, int, int], Call] | None = None

    def get(self, key: tuple[int, int, int]) -> tuple[list[Record], list[Record]]:
        with self.lock:
            if self.calls is None:
                self.calls = self._read()
        c = self.calls.get(key)
        return (c.inputs, c.outputs) if c is not None else ([], [])

    def _read(self) -> dict[tuple[int, int, int], Call]:
        with paused_gc():  # hundreds of thousands of objects and no garbage
            recs = load_records(self.trace, rank=self.rank, step=self.step,
                                direction=self.direction, kinds=self.kinds)
            return {(c.rank, c.step, c.event): c for c in calls_from_records(recs)}


class _RecordsField:
    """``inputs`` / ``outputs`` of a :class:`LazyCall`: read on first access, then kept."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: LazyCall | None, owner: type) -> Any:
        if obj is None:
            return self
        d = obj.__dict__
        if self.name not in d:
            obj._load()
        return d[self.name]

    def __set__(self, obj: LazyCall, value: list[Record]) -> None:
        obj.__dict__[self.name] = value


class LazyCall(Call):
    """A :class:`~netparity.align.model.Call` of :func:`~netparity.align.tableread.read_table`:
    ``inputs`` and ``outputs`` are read from the trace on first access (the trace directory must
    still exist then); ``seq`` and ``to_json`` need no records. Pickles and copies as a plain
    ``Call``."""

    inputs = _RecordsField()  # type: ignore[assignment]
    outputs = _RecordsField()  # type: ignore[assignment]

    def _load(self) -> None:
        d = self.__dict__
        ins, outs = d["_source"].get((d["rank"], d["step"], d["event"]))
        d.setdefault("inputs", ins)
        d.setdefault("outputs", outs)

    @property
    def seq(self) -> int:
        return int(self.__dict__["_seq"])

    def _io_shapes(self) -> tuple[list[list[int]], list[list[int]]]:
        if "inputs" in self.__dict__:
            return super()._io_shapes()
        ins, outs = self.__dict__["_shapes"]
        return [list(s) for s in ins], [list(s) for s in outs]

    def __reduce__(self) -> tuple[Any, ...]:
        return (Call, tuple(getattr(self, f.name) for f in fields(Call)))
