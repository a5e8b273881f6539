"""One side's module and op calls as columns (:class:`CallTable`), the form alignment works on.

Alignment looks at every call of both traces several times (bucketing by step and direction,
module paths and call indices, op partitions, features); on 100k-op traces doing that through
:class:`~netparity.align.model.Call` objects costs seconds of Python attribute access. A
:class:`CallTable` holds the same facts as NumPy arrays, one row per call in execution order,
and makes the :class:`Call` objects only for the calls a result names.

Two builders give the same table: :func:`table_from_calls` from :class:`Call` objects (what
:func:`~netparity.align.core.align_records` has), and
:func:`netparity.align.reading.read_table` straight from a trace index (what
:func:`~netparity.align.core.align_traces` uses; its calls read their records on first access).

Example:
    >>> from netparity.trace import Record
    >>> from netparity.align.model import calls_from_records
    >>> recs = [Record(kind="module", module="fc", op="linear", event=1, role="input", seq=0),
    ...         Record(kind="op", module="fc", op="matmul", event=2, role="output", seq=1),
    ...         Record(kind="module", module="fc", op="linear", event=1, role="output", seq=2)]
    >>> t = table_from_calls(calls_from_records(recs), Pools())
    >>> t.is_module.tolist(), [t.call_obj(i).op for i in range(len(t))]
    ([True, False], ['linear', 'matmul'])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from netparity.align.features import Feats, Interner, build_feats
from netparity.align.model import Call


class StringPool:
    """Ids for strings shared by both sides (equal ids mean equal strings), and back."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.strs: list[str] = []

    def __call__(self, s: str) -> int:
        i = self.ids.get(s)
        if i is None:
            i = self.ids[s] = len(self.strs)
            self.strs.append(s)
        return i

    def many(self, values: list[str]) -> np.ndarray:
        """Ids of ``values`` as an int64 array."""
        for s in dict.fromkeys(values):
            self(s)
        return np.fromiter(map(self.ids.__getitem__, values), dtype=np.int64, count=len(values))


@dataclass
class Pools:
    """Interners shared by the two sides of one alignment."""

    ids: Interner = field(default_factory=Interner)  # feature ids (ops, shapes, signatures)
    paths: StringPool = field(default_factory=StringPool)  # module paths
    directions: StringPool = field(default_factory=StringPool)


@dataclass
class CallTable:
    """Module/op calls of one side in execution order; row ``i`` of every array is call ``i``."""

    feats: Feats
    is_module: np.ndarray  # bool
    step: np.ndarray
    direction: np.ndarray  # ids in Pools.directions
    module: np.ndarray  # ids in Pools.paths
    call: np.ndarray
    module_call: np.ndarray
    seq: np.ndarray  # Call.seq: sequence number of the first input (else output) record
    make_call: Callable[[int], Call]  # builds call i (only for calls a result names)
    n_records: int = -1  # index records the calls were read from (-1: built from calls)
    _calls: list[Call | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.seq)

    def call_obj(self, i: int) -> Call:
        """The :class:`Call` of row ``i`` (the same object on every request)."""
        return self.call_objs([i])[0]

    def call_objs(self, idx: list[int]) -> list[Call]:
        """The :class:`Call` objects of rows ``idx``, made on first request."""
        cache = self._calls
        if not cache:
            cache.extend([None] * len(self))
        make = self.make_call
        out = []
        for i in idx:
            c = cache[i]
            if c is None:
                c = cache[i] = make(i)
            out.append(c)
        return out


def table_from_calls(calls: list[Call], pools: Pools) -> CallTable:
    """The table of ``calls`` (already in execution order, e.g. from ``calls_from_records``)."""
    paths, dirs = pools.paths, pools.directions
    return CallTable(
        feats=build_feats(calls, pools.ids),
        is_module=np.array([c.kind == "module" for c in calls], dtype=bool),
        step=np.array([c.step for c in calls], dtype=np.int64),
        direction=dirs.many([c.direction for c in calls]),
        module=paths.many([c.module for c in calls]),
        call=np.array([c.call for c in calls], dtype=np.int64),
        module_call=np.array([c.module_call for c in calls], dtype=np.int64),
        seq=np.array([c.seq for c in calls], dtype=np.int64),
        make_call=calls.__getitem__,
    )
