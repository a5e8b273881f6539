"""Reading a trace index for alignment: every record of a query (:func:`load_records`), and
the records of calls read on first access (:class:`LazyCall`).

:func:`~netparity.align.core.align_traces` reads only what alignment looks at
(:mod:`netparity.align.tableread`); the comparison engine then asks for the records of the calls
it compares, and :class:`RecordSource` reads one side's index once (one scan of every
column) and makes the records of a kind of call (module or op) when a call of that kind is
first asked for, so a caller that never looks at records (``netparity align``) never pays for
them, and a comparison only for the level it compares.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from dataclasses import fields
from typing import Any

import numpy as np

from netparity.align.model import Call, _arg_key, calls_from_records
from netparity.errors import UsageError
from netparity.gcpause import paused_gc
from netparity.trace import fastrows
from netparity.trace.reader import Trace
from netparity.trace.scan import Columns
from netparity.trace.schema import COLUMN_NAMES, Record


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

#: the share of a kind's calls whose records are made call by call, when asked for (the
#: comparison engine pairs most calls from the rows and asks for the records of N:M groups and
#: odd calls: ~20 % of an op-level trace); past it, the next call asked for makes those of
#: every call of that kind at once (a caller that reads them all)
_ALONE = 0.5


class CallSpans:
    """Each call's span in a grouped order of a scan's rows (:func:`group_calls`), as arrays:
    ``keys`` (the calls' ``(rank, step, event)``, sorted), ``spans`` (``(start, first output,
    end)``) and ``kinds`` (the kind code of each call's first row in the scan's ``kind``
    column). Looks a call up like a dict of ``key -> span`` (:meth:`get`, ``in``, ``[]``;
    the dict is made only when a key is looked up one at a time and the keys do not pack
    into one integer each)."""

    __slots__ = ("keys", "spans", "kinds", "_packed", "_dict")

    def __init__(self, keys: np.ndarray, spans: np.ndarray, kinds: np.ndarray):
        self.keys, self.spans, self.kinds = keys, spans, kinds
        self._packed: np.ndarray | None | bool = None
        self._dict: dict[tuple[int, int, int], int] | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def __iter__(self) -> Iterator[tuple[int, int, int]]:
        """The calls' keys, in order (as tuples)."""
        return map(tuple, self.keys.tolist())  # type: ignore[arg-type]

    def items(self) -> Iterator[tuple[tuple[int, int, int], tuple[int, int, int]]]:
        """``(key, span)`` of every call, in order (as tuples)."""
        return zip(iter(self), map(tuple, self.spans.tolist()))  # type: ignore[arg-type]

    def packed(self) -> np.ndarray | None:
        """The keys as one int64 each (:func:`pack_keys`; sorted as the keys are); None when
        a key does not pack."""
        if self._packed is None:
            got = pack_keys(self.keys)
            self._packed = False if got is None else got
        return self._packed if isinstance(self._packed, np.ndarray) else None

    def index(self, key: tuple[int, int, int]) -> int:
        """The position of call ``key`` (-1: no such call)."""
        pk = self.packed()
        if pk is not None:
            try:
                rk, st, ev = (int(v) for v in key)
            except (TypeError, ValueError):
                return -1
            if rk < 0 or st < 0 or ev < 0 or rk >= 1 << 10 or st >= 1 << 20 or ev >= 1 << 33:
                return -1
            want = (rk << 53) | (st << 33) | ev
            at = int(np.searchsorted(pk, want))
            return at if at < len(pk) and int(pk[at]) == want else -1
        if self._dict is None:
            self._dict = {k: i for i, k in enumerate(map(tuple, self.keys.tolist()))}
        return self._dict.get(key, -1)  # type: ignore[arg-type]

    def get(self, key: tuple[int, int, int]) -> tuple[int, int, int] | None:
        i = self.index(key)
        return None if i < 0 else tuple(self.spans[i].tolist())  # type: ignore[return-value]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and self.index(key) >= 0  # type: ignore[arg-type]

    def __getitem__(self, key: tuple[int, int, int]) -> tuple[int, int, int]:
        got = self.get(key)
        if got is None:
            raise KeyError(key)
        return got


def pack_keys(keys: np.ndarray) -> np.ndarray | None:
    """``(rank, step, event)`` rows as one int64 each (order-preserving), None when a value
    does not fit (negative, or past 10 / 20 / 33 bits)."""
    if not len(keys):
        return np.zeros(0, dtype=np.int64)
    if keys.min() < 0 or keys[:, 0].max() >= 1 << 10 or keys[:, 1].max() >= 1 << 20 \
            or keys[:, 2].max() >= 1 << 33:
        return None
    return (keys[:, 0] << 53) | (keys[:, 1] << 33) | keys[:, 2]  # type: ignore[no-any-return]


class RecordSource:
    """Reads the records of one side's calls: the index once, when the first call is asked for
    (the comparison engine asks for nearly all; ``netparity align`` for none), then each call's
    records, all calls of one kind at once, when a call of that kind is first asked for (at op
    level the module calls' records are never made)."""

    def __init__(self, trace: Trace, rank: int, step: Any, direction: Any, kinds: Any):
        self.trace, self.rank, self.step, self.direction = trace, rank, step, direction
        self.kinds = tuple(kinds)
        self.lock = threading.Lock()
        #: each call's span in ``order`` (:class:`CallSpans`); None until the index is read
        self.calls: CallSpans | None = None
        self._made: dict[tuple[int, int, int], tuple[list[Record], list[Record]]] = {}
        self._rows: fastrows.ScannedRows | None = None
        self._order = np.zeros(0, dtype=np.int64)
        self._kind_names: list[str] = []  # the scan's kind values (CallSpans.kinds: codes)
        self._one_by_one: dict[int, int] = {}  # per kind code: calls whose records were made alone
        self._n_kind: dict[int, int] = {}  # per kind code: how many calls

    def get(self, key: tuple[int, int, int]) -> tuple[list[Record], list[Record]]:
        with self.lock:
            if self.calls is None:
                self._read()
            got = self._made.get(key)
            if got is None:
                calls = self.calls
                assert calls is not None
                at = calls.index(key) if self._rows is not None else -1
                if at < 0:
                    return [], []
                kind = int(calls.kinds[at])
                alone = self._one_by_one.get(kind, 0)
                if alone < _ALONE * self._n_kind.get(kind, 0):  # one call: alone
                    self._one_by_one[kind] = alone + 1
                    self._make(np.array([at], dtype=np.int64))
                else:
                    with paused_gc():  # ~10^5 records and no garbage (as in _read)
                        self._make_kind(kind)
                got = self._made[key]
            return got

    def prefetch(self, keys: list[tuple[int, int, int]]) -> None:
        """Make the records of the calls ``keys`` now, in one pass (the comparison engine's
        N:M groups and odd calls: a minority of the calls, whose rows are then picked from
        the scan's arrays at once instead of call by call)."""
        with self.lock:
            if self.calls is None:
                self._read()
            if self._rows is None:
                return
            calls = self.calls
            assert calls is not None
            made = self._made
            todo = [i for i in dict.fromkeys(map(calls.index, (k for k in keys if k not in made)))
                    if i >= 0]
            if todo:
                with paused_gc():
                    self._make(np.array(todo, dtype=np.int64))

    def rows(self) -> tuple[fastrows.ScannedRows, np.ndarray, CallSpans] | None:
        """The scan every record of this side is a row of, the grouped order of its rows (an
        int64 array) and each call's span in that order (see :func:`group_calls`); None
        where records are not read by a column scan (the schema has columns the fast loader
        does not know)."""
        with self.lock:
            if self.calls is None:
                self._read()
            if self._rows is None:
                return None
            return self._rows, self._order, self.calls  # type: ignore[return-value]

    def _make_kind(self, kind: int) -> None:
        """Make the records of every call of kind code ``kind`` at once (one pass; a
        comparison that asks for most calls of its level) and hand each call its slices."""
        calls = self.calls
        assert calls is not None
        at = np.nonzero(calls.kinds == kind)[0]
        if self._made:
            keys = calls.keys[at].tolist()
            made = self._made
            at = at[np.fromiter((tuple(k) not in made for k in keys), dtype=bool,
                                count=len(keys))]
        self._make(at)

    def _make(self, at: np.ndarray) -> None:
        """Make the records of the calls at positions ``at`` of ``self.calls``."""
        assert self.calls is not None and self._rows is not None
        if not len(at):
            return
        sp = self.calls.spans[at]
        s, m, e = sp[:, 0], sp[:, 1], sp[:, 2]
        lens = e - s
        pos = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
        recs = self._rows.records(self._order[np.repeat(s, lens) + pos].tolist())
        made = self._made
        b = 0
        for k, n_in, n in zip(map(tuple, self.calls.keys[at].tolist()), (m - s).tolist(),
                              lens.tolist()):
            made[k] = (recs[b : b + n_in], recs[b + n_in : b + n])
            b += n

    def _read(self) -> None:
        with paused_gc():  # hundreds of thousands of objects and no garbage
            check_rank(self.trace, self.rank)
            if not fastrows.FAST_OK:
                recs = load_records(self.trace, rank=self.rank, step=self.step,
                                    direction=self.direction, kinds=self.kinds)
                self._made = {(c.rank, c.step, c.event): (c.inputs, c.outputs)
                              for c in calls_from_records(recs)}
                keys = np.array(list(self._made) or np.zeros((0, 3)), dtype=np.int64)
                self.calls = CallSpans(keys.reshape(-1, 3), np.zeros((len(keys), 3),
                                                                     dtype=np.int64),
                                       np.zeros(len(keys), dtype=np.int64))
                return
            cols = self.trace.scan(COLUMN_NAMES, rank=self.rank, step=self.step,
                                   direction=self.direction, kind=list(self.kinds))
            self._rows = fastrows.ScannedRows(cols)
            self._order, self.calls = group_calls(cols)
            self._kind_names = list(cols["kind"].values)
            codes, counts = np.unique(self.calls.kinds, return_counts=True)
            self._n_kind = dict(zip(codes.tolist(), counts.tolist()))


def group_calls(cols: Columns) -> tuple[np.ndarray, CallSpans]:
    """The rows of a scan (call kinds only; ``rank``, ``step``, ``event``, ``role``, ``arg``)
    grouped by ``(rank, step, event)``: an order of the rows (int64) and each call's span in
    it ``(start, first output, end)`` (:class:`CallSpans`, calls sorted by key). Inputs come
    before outputs, each run ordered as :func:`~netparity.align.model.calls_from_records`
    orders it: execution order, unless the arguments are not single characters in ascending
    order -- then sorted by argument path.

    Everything runs in NumPy (Python touches only the distinct argument paths).
    """
    n = cols.n
    if not n:
        z = np.zeros((0, 3), dtype=np.int64)
        return np.zeros(0, dtype=np.int64), CallSpans(z, z.copy(), np.zeros(0, dtype=np.int64))
    rank, step, event = cols["rank"], cols["step"], cols["event"]
    is_out = (cols["role"] != "input").astype(np.int64)
    arg = cols["arg"]
    argc = arg.map(lambda a: ord(a) if len(a) == 1 else -1, dtype=np.int64)
    pos = np.arange(n)
    g = np.lexsort((pos, is_out, event, step, rank))
    run_keys = (rank[g], step[g], event[g], is_out[g])
    new_run = np.zeros(n, dtype=bool)
    new_run[0] = True
    for k in run_keys:
        new_run[1:] |= k[1:] != k[:-1]
    run = np.cumsum(new_run) - 1
    a = argc[g]
    bad = ~new_run[1:] & ((a[1:] < a[:-1]) | (a[1:] < 0) | (a[:-1] < 0))
    if bad.any():  # runs out of order: by argument path (stable: ties keep execution order)
        values = arg.values
        by_key = sorted(range(len(values)), key=lambda i: _arg_key(values[i]))
        arg_rank = np.zeros(len(values), dtype=np.int64)
        r = 0
        for j, i in enumerate(by_key):
            if j and _arg_key(values[i]) != _arg_key(values[by_key[j - 1]]):
                r += 1
            arg_rank[i] = r
        sort_run = np.zeros(int(run[-1]) + 1, dtype=bool)
        sort_run[run[1:][bad]] = True
        key2 = np.zeros(n, dtype=np.int64)
        sel = sort_run[run]  # positions (in g order) of runs to sort
        key2[g[sel]] = arg_rank[arg.codes[g[sel]]]
        g = np.lexsort((pos, key2, is_out, event, step, rank))
    new_call = new_run.copy()
    new_call[1:] = False
    for k in run_keys[:3]:
        new_call[1:] |= k[1:] != k[:-1]
    starts = np.nonzero(new_call)[0]
    ends = np.append(starts[1:], n)
    n_out = np.add.reduceat(is_out[g], starts)
    mids = ends - n_out
    first = g[starts]
    keys = np.stack([np.asarray(rank, dtype=np.int64)[first],
                     np.asarray(step, dtype=np.int64)[first],
                     np.asarray(event, dtype=np.int64)[first]], axis=1)
    spans = np.stack([starts, mids, ends], axis=1).astype(np.int64)
    return g.astype(np.int64), CallSpans(keys, spans, cols["kind"].codes[first].astype(np.int64))


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
