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

from collections.abc import Callable, Sequence
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

    def coded(self, codes: np.ndarray, values: Sequence[str]) -> np.ndarray:
        """Ids of the strings ``values[codes]`` (a scanned text column: codes into a table of
        distinct values), the same ids :meth:`many` gives that list of strings -- new strings
        get theirs in order of first appearance -- with Python touching each distinct value
        once instead of every row."""
        if not len(codes):
            return np.zeros(0, dtype=np.int64)
        u, first = np.unique(codes, return_index=True)
        seen = u[np.argsort(first, kind="stable")].tolist()
        vals = [values[k] for k in seen]  # distinct, in order of first appearance
        ids = self.ids
        new = [v for v in vals if v not in ids] if ids else vals  # (an empty pool: all new)
        ids.update(zip(new, range(len(self.strs), len(self.strs) + len(new))))
        self.strs.extend(new)
        table = np.zeros(len(values), dtype=np.int64)
        table[np.array(seen, dtype=np.int64)] = np.fromiter(map(ids.__getitem__, vals),
                                                            dtype=np.int64, count=len(vals))
        return table[codes]  # type: ignore[no-any-return]


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
    #: builds the calls of rows ``idx`` (an int64 array), in that order; asked only for the
    #: calls a result names, each row at most once
    make_calls: Callable[[np.ndarray], list[Call]]
    n_records: int = -1  # index records the calls were read from (-1: built from calls)
    _calls: list[Call | None] = field(default_factory=list)  # the calls made so far
    _made: np.ndarray | None = None  # bool: which rows of ``_calls`` are made

    def __len__(self) -> int:
        return len(self.seq)

    def release_feats(self) -> None:
        """Drop the features (the alignment passes read them; :func:`align_tables` calls this
        once they are done): ``feats`` is then empty."""
        self.feats = build_feats([], Interner())

    def call_obj(self, i: int) -> Call:
        """The :class:`Call` of row ``i`` (the same object on every request)."""
        return self.call_objs([i])[0]

    def call_objs(self, idx: list[int] | np.ndarray) -> list[Call]:
        """The :class:`Call` objects of rows ``idx``, made on first request (those not made
        yet all at once)."""
        cache = self._calls
        if self._made is None:
            cache.extend([None] * len(self))
            self._made = np.zeros(len(self), dtype=bool)
        rows = np.asarray(idx, dtype=np.int64).reshape(-1)
        need = rows[~self._made[rows]]
        # all new and distinct (a result's first request, the usual case): made in this
        # order and returned as made
        fresh = len(need) == len(rows) > 0 and rows.min() >= 0 and np.bincount(rows).max() == 1
        if len(need):
            if not fresh:
                need = np.unique(need)
            made = self.make_calls(need)
            if len(made) != len(need):
                raise ValueError("make_calls returned a different number of calls")
            # (a Python loop: NumPy would probe every object for the array protocols)
            for i, c in zip(need.tolist(), made):
                cache[i] = c
            self._made[need] = True
            if fresh:
                return made
        return [cache[i] for i in rows.tolist()]  # type: ignore[misc]


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
        make_calls=lambda idx: [calls[i] for i in idx.tolist()],
    )
