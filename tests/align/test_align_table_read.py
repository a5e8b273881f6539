"""``align_traces`` reads call tables column-wise from the index (netparity.align.tableread);
the result must equal aligning the eagerly loaded records (``align_records``), odd records
included, and the calls' records must be the same when read on first access."""

from __future__ import annotations

import copy
import json
import math
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from align_speed import Gen  # noqa: E402

from netparity.align import Call, align_traces  # noqa: E402
from netparity.align.core import align_records, load_records  # noqa: E402
from netparity.align.model import calls_from_records  # noqa: E402
from netparity.align.table import Pools, table_from_calls  # noqa: E402
from netparity.align.tableread import read_table  # noqa: E402
from netparity.trace import Record, TraceWriter, open_trace  # noqa: E402


def _call(c: Call) -> dict[str, Any]:
    return {**c.to_json(), "seq": c.seq, "records": [r.seq for r in c.inputs + c.outputs]}


def _snapshot(al: Any) -> dict[str, Any]:
    """Everything an alignment says, records of its calls included (by sequence number)."""
    return {
        "matches": [([_call(c) for c in m.ref], [_call(c) for c in m.cand], m.method,
                     m.confidence, m.note) for m in al.matches],
        "unmatched": ([_call(c) for c in al.unmatched_ref],
                      [_call(c) for c in al.unmatched_cand]),
        "params": [(p.ref.seq, p.cand.seq, p.method) for p in al.params],
        "unmatched_params": ([r.seq for r in al.unmatched_params_ref],
                             [r.seq for r in al.unmatched_params_cand]),
        "module_map": list(al.module_map.items()),
        "op_groups": al.op_groups,
    }


def _both_ways(ref: Path, cand: Path, level: str) -> tuple[dict[str, Any], dict[str, Any]]:
    tr, tc = open_trace(ref), open_trace(cand)
    fast = align_traces(tr, tc, level=level)
    kinds = None if level != "module" else ("module", "param", "grad", "loss", "data", "custom")
    eager = align_records(load_records(tr, kinds=kinds), load_records(tc, kinds=kinds),
                          level=level, cross_framework=tr.framework != tc.framework)
    return _snapshot(fast), _snapshot(eager)


@pytest.mark.parametrize("level", ["op", "module", "both"])
def test_benchmark_traces_align_as_from_records(tmp_path, level):
    ref, cand = tmp_path / "ref", tmp_path / "cand"
    Gen(ref, "torch", 1500, flat=False).run()
    Gen(cand, "mindspore", 1500, flat=False).run()
    fast, eager = _both_ways(ref, cand, level)
    assert fast == eager
    assert fast["op_groups"] or level == "module"  # the N:M path was exercised


class _Odd:
    """Writes calls the capture never writes in this shape, to reach every fallback."""

    def __init__(self, path: Path, fw: str, scale: float):
        self.w = TraceWriter(path, manifest={"framework": fw})
        self.scale = scale
        self.rng = np.random.default_rng(7)

    def stats(self, shape: tuple[int, ...], kind: str = "") -> dict[str, Any]:
        if kind == "empty":  # no min/max/mean/std: NULL in the index
            return {"min": None, "max": None, "mean": None, "std": None, "norm": 0.0}
        m = float(self.rng.normal()) * self.scale
        s = abs(float(self.rng.normal())) + 0.5
        n = math.prod(shape)
        st = {"min": m - 3 * s, "max": m + 3 * s, "mean": m, "std": s,
              "norm": math.sqrt(n * (m * m + s * s)), "nan": 0}
        if kind == "nan":
            st["mean"] = math.nan
        return st

    def call(self, kind: str, module: str, op: str, records: list[tuple[str, str, tuple, str]],
             step: int = 0, direction: str = "forward", call: int = 0, mcall: int = 0,
             source: list[str] | None = None) -> None:
        ev = self.w.next_event()
        for k, (role, arg, shape, st) in enumerate(records):
            self.w.add(Record(kind=kind, module=module, op=op, native=op.title(), call=call,
                              module_call=mcall, direction=direction, role=role, arg=arg,
                              dtype="float32", shape=shape, step=step, event=ev,
                              stats=self.stats(shape, st),
                              source=(source or [""] * len(records))[k]))

    def write(self) -> None:
        for step in (0, 1):
            for direction in ("forward", "backward"):
                self.block(step, direction)
        self.w.add(Record(kind="param", module="fc.weight", op="param", role="param",
                          dtype="float32", shape=(4, 4), step=1, direction="update",
                          stats=self.stats((4, 4))))
        self.w.close()

    def block(self, step: int, direction: str) -> None:
        kw: dict[str, Any] = {"step": step, "direction": direction}
        self.call("module", "net", "net", [("input", "", (2, 4), "")], **kw)
        # inputs written out of argument order, nested and keyword arguments
        self.call("op", "net", "add", [("input", "1", (2, 4), ""), ("input", "0", (2, 4), ""),
                                       ("output", "", (2, 4), "")], **kw)
        self.call("op", "net", "mul", [("input", "kw.x", (4,), ""), ("input", "0.1", (2, 4), ""),
                                       ("input", "0", (2, 4), "empty"),
                                       ("output", "", (2, 4), "nan")], call=1, **kw)
        # no inputs: the first record is an output; outputs that are not argument 0
        self.call("op", "net", "randn", [("output", "0", (2, 4), "")], call=2, **kw)
        self.call("op", "net", "split", [("input", "", (2, 4), ""), ("output", "1", (1, 4), ""),
                                         ("output", "2", (1, 4), "empty")], call=3, **kw)
        # a source on the second record only; a module path holding the separator character
        self.call("module", "net.odd\x1ename", "linear",
                  [("input", "", (2, 4), ""), ("output", "", (2, 4), "")], mcall=0,
                  source=["", "model.py:12"], **kw)
        self.call("op", "net", "relu", [("input", "", (2, 4), "nan"), ("output", "", (2, 4), "")],
                  call=4, source=["model.py:30", "model.py:31"], **kw)
        self.call("module", "net", "net", [("output", "", (2, 4), "")], **kw)


@pytest.mark.parametrize("level", ["op", "module", "both"])
def test_odd_records_align_as_from_records(tmp_path, level):
    _Odd(tmp_path / "a", "torch", 1.0).write()
    _Odd(tmp_path / "b", "mindspore", 1.0001).write()
    fast, eager = _both_ways(tmp_path / "a", tmp_path / "b", level)
    assert fast == eager
    assert fast["matches"]


def test_table_read_from_index_equals_table_of_records(tmp_path):
    _Odd(tmp_path / "a", "torch", 1.0).write()
    tr = open_trace(tmp_path / "a")
    eager = table_from_calls(calls_from_records(load_records(tr, kinds=("module", "op"))),
                             Pools())
    fast = read_table(tr, Pools())
    n = len(eager)
    assert len(fast) == n
    for col in ("is_module", "step", "call", "module_call", "seq"):
        assert np.array_equal(getattr(fast, col), getattr(eager, col)), col
    idx = np.arange(n)
    for a, b in ((fast.feats.stats, eager.feats.stats),
                 (fast.feats.in_stats(idx), eager.feats.in_stats(idx))):
        assert np.array_equal(a, b, equal_nan=True)
    for col in ("name", "sig", "shp", "out_shape", "in_shape", "leaf"):
        # ids are interned in another order: compare which calls share a value
        x, y = getattr(fast.feats, col), getattr(eager.feats, col)
        assert np.array_equal(x[:, None] == x[None, :], y[:, None] == y[None, :]), col
    assert [fast.call_obj(i).to_json() for i in idx] == [eager.call_obj(i).to_json() for i in idx]
    assert [fast.call_obj(i).source for i in idx] == [eager.call_obj(i).source for i in idx]


def test_calls_read_their_records_on_first_access(tmp_path):
    _Odd(tmp_path / "a", "torch", 1.0).write()
    _Odd(tmp_path / "b", "torch", 1.0001).write()
    tr, tc = open_trace(tmp_path / "a"), open_trace(tmp_path / "b")
    al = align_traces(tr, tc, level="both")
    call = al.matches[1].ref[0]
    source = call._source
    assert source.calls is None
    shapes = call.to_json()  # shapes come from the table, no records read
    assert source.calls is None
    eager = {(c.step, c.event): c for c in calls_from_records(load_records(tr))}
    want = eager[(call.step, call.event)]
    assert [r.to_dict() for r in call.inputs] == [r.to_dict() for r in want.inputs]
    assert [r.to_dict() for r in call.outputs] == [r.to_dict() for r in want.outputs]
    assert call.to_json() == shapes == want.to_json()
    assert (call.seq, call.kind, call.source, repr(call).split("(")[0]) == (
        want.seq, want.kind, want.source, "LazyCall")
    for twin in (pickle.loads(pickle.dumps(call)), copy.copy(call)):
        assert type(twin) is Call
        assert twin == want


def test_positional_reader_equals_schema_reader(tmp_path, monkeypatch):
    """The positional row reader gives what the schema's own row conversion gives (the latter
    is also the fallback if the schema's columns ever change under it)."""
    from netparity.trace import fastrows

    _Odd(tmp_path / "a", "torch", 1.0).write()
    tr = open_trace(tmp_path / "a")
    fast = [r.to_dict() for r in load_records(tr)]
    monkeypatch.setattr(fastrows, "FAST_OK", False)
    slow = [r.to_dict() for r in load_records(tr)]
    assert len(fast) == len(slow) > 0
    # NaN != NaN: compare the JSON text, where NaN prints as NaN
    assert json.dumps(fast, sort_keys=True) == json.dumps(slow, sort_keys=True)
    assert any(math.isnan(r["stats"]["mean"]) for r in fast
               if isinstance(r["stats"].get("mean"), float))


@pytest.mark.parametrize("big", [False, True])
def test_call_spans_look_up_as_a_dict(big):
    """CallSpans answers as the dict of key -> span it replaces, with keys that pack into one
    int64 and with keys that do not (a step past 2^20: the dict fallback)."""
    from netparity.align.reading import CallSpans

    rng = np.random.default_rng(3)
    step_hi = (1 << 22) if big else 50
    keys = sorted({(int(r), int(s), int(e)) for r, s, e in zip(
        rng.integers(0, 3, 300), rng.integers(0, step_hi, 300), rng.integers(0, 10**6, 300))})
    spans = [(3 * i, 3 * i + 1, 3 * i + 3) for i in range(len(keys))]
    cs = CallSpans(np.array(keys, dtype=np.int64), np.array(spans, dtype=np.int64),
                   np.zeros(len(keys), dtype=np.int64))
    want = dict(zip(keys, spans))
    assert (cs.packed() is None) == big
    assert len(cs) == len(want) and list(cs) == list(want) and list(cs.items()) == list(want.items())
    for k in keys[::7]:
        assert cs.get(k) == want[k] and k in cs and cs[k] == want[k]
    for k in [(0, 0, -1), (5, 1, 1), (keys[0][0], keys[0][1], keys[0][2] + 10**7), (None, 0, 0)]:
        assert cs.get(k) is None and k not in cs
        with pytest.raises(KeyError):
            cs[k]


#: sizes measured on CPython 3.11 (objects' attributes inline under shared keys from 3.11 on)
_SIZES = pytest.mark.skipif(sys.implementation.name != "cpython" or sys.version_info < (3, 11),
                            reason="object sizes of CPython 3.11+")


def _with_sources(path: Path, n: int) -> None:
    """``n`` op calls in one module, each with its own source (a call of a captured module)."""
    w = TraceWriter(path, manifest={"framework": "torch"})
    st = {"min": -1.0, "max": 1.0, "mean": 0.0, "std": 0.5, "norm": 1.0, "nan": 0}
    for k in range(n):
        ev = w.next_event()
        for role, arg in (("input", "0"), ("output", "")):
            w.add(Record(kind="op", module="net", op="add", native="Add", call=k, role=role,
                         arg=arg, dtype="float32", shape=(2,), event=ev, stats=st,
                         source=f"model.py:{k}"))
    w.close()


@_SIZES
@pytest.mark.parametrize("sources", [False, True])
def test_calls_of_a_table_are_small(tmp_path, sources):
    """An alignment keeps every call it pairs (2 x 10^5 at 100k ops, through the whole
    comparison): a table's calls keep their attributes inline under keys their class shares,
    not in a dict each (~230 bytes a call, ints included, instead of ~400), and read as before:
    attributes, ``__dict__`` (the engine reads a call's key there), ``seq``, ``to_json``."""
    import gc
    import tracemalloc

    if sources:
        _with_sources(tmp_path / "a", 2500)
    else:
        Gen(tmp_path / "a", "torch", 1500, flat=False).run()
    tr = open_trace(tmp_path / "a")
    table = read_table(tr, Pools())
    idx = np.arange(len(table))
    table.call_objs(idx[:1])  # the classes' shared keys made
    gc.collect()
    tracemalloc.start()
    try:
        calls = table.call_objs(idx)
        size = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(calls) > 2000
    assert size / len(calls) < 300
    eager = calls_from_records(load_records(tr, kinds=("module", "op")))
    assert [c.to_json() for c in calls] == [c.to_json() for c in eager]
    assert [c.seq for c in calls] == [c.seq for c in eager]
    assert [(c.__dict__["rank"], c.__dict__["step"], c.__dict__["event"]) for c in calls] == [
        (c.rank, c.step, c.event) for c in eager]
    assert any(c.source for c in calls) == sources


@_SIZES
def test_an_alignment_keeps_little_per_match(tmp_path):
    """What an op-level alignment keeps (its matches and their calls) is ~890 bytes a 1:1
    match: the matches too keep their attributes inline (a dict per match: ~1020 bytes; and a
    dict per call: ~1350)."""
    import gc
    import tracemalloc

    Gen(tmp_path / "a", "torch", 1500, flat=False).run()
    Gen(tmp_path / "b", "torch", 1500, flat=False).run()
    tr, tc = open_trace(tmp_path / "a"), open_trace(tmp_path / "b")
    align_traces(tr, tc, level="op")  # the classes' shared keys made
    gc.collect()
    tracemalloc.start()
    try:
        al = align_traces(tr, tc, level="op")
        gc.collect()
        size = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(al.matches) > 1000
    assert size / len(al.matches) < 950
    m = al.matches[0]
    assert (m.method, m.note, m.ref[0].op, m.cand[0].op) == (
        m.__dict__["method"], m.__dict__["note"], m.__dict__["ref"][0].op, m.cand[0].op)


@_SIZES
def test_a_table_keeps_little_per_record(tmp_path):
    """A call table lives while both sides are aligned: it keeps ~120 bytes per index record
    (the calls' features and the columns a later look-up needs), not every per-record column
    of the read (~180: N:M detection's look-ups held all of them)."""
    import gc
    import tracemalloc

    Gen(tmp_path / "a", "torch", 3000, flat=False).run()
    tr = open_trace(tmp_path / "a")
    read_table(tr, Pools())  # what is made once per process, made
    gc.collect()
    tracemalloc.start()
    try:
        table = read_table(tr, Pools())
        gc.collect()
        size = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    n = tr.count(rank=0)
    assert n > 10000 and len(table) > 5000
    assert size / n < 150
    # the look-ups still answer: first-input statistics of calls, as read from the records
    idx = np.arange(len(table))
    eager = table_from_calls(calls_from_records(load_records(tr, kinds=("module", "op"))),
                             Pools())
    assert np.array_equal(table.feats.in_stats(idx), eager.feats.in_stats(idx), equal_nan=True)
