"""Trace store: round trips, filters, payload dtypes, back-pressure, bad input."""

from __future__ import annotations

import json
import sqlite3
import time

import numpy as np
import pytest

from netparity.dtypes import encode_bf16
from netparity.errors import SchemaError, TraceError
from netparity.stats import compute_stats
from netparity.trace import Record, TraceWriter, open_trace
from netparity.trace.schema import SCHEMA_VERSION


def _rec(**kw):
    a = kw.pop("arr")
    kw.setdefault("kind", "module")
    return Record(dtype=str(a.dtype), shape=a.shape, stats=compute_stats(a), **kw), a


def test_round_trip_records_and_payloads(tmp_path):
    rng = np.random.default_rng(0)
    written = []
    with TraceWriter(tmp_path / "t", manifest={"framework": "numpy", "seeds": {"seed": 3}}) as w:
        for step in range(3):
            for i, mod in enumerate(["conv1", "layer1.0.conv1", "fc"]):
                a = rng.standard_normal((2, 3, i + 1)).astype(np.float32)
                r, a = _rec(arr=a, module=mod, step=step, call=0, arg=str(i), event=w.next_event())
                w.add(r, payload=a)
                written.append((r, a))
    tr = open_trace(tmp_path / "t")
    assert tr.manifest["schema_version"] == SCHEMA_VERSION
    assert tr.manifest["framework"] == "numpy" and tr.manifest["seeds"] == {"seed": 3}
    assert tr.steps() == [0, 1, 2] and tr.ranks == [0]
    recs = tr.records()
    assert [r.seq for r in recs] == list(range(9))  # execution order
    for (w_rec, a), r in zip(written, recs):
        assert r.module == w_rec.module and r.shape == a.shape and r.arg == w_rec.arg
        np.testing.assert_array_equal(tr.tensor(r), a)
        assert r.stats["norm"] == pytest.approx(float(np.linalg.norm(a.astype(np.float64))))
    assert [r.module for r in tr.records(step=1, module="layer1.*")] == ["layer1.0.conv1"]
    assert len(tr.records(step=[0, 2])) == 6
    assert tr.records(name="fc")[0].module == "fc"
    assert tr.counts() == {"module": 9}


def test_add_many_keeps_execution_order_between_payload_records(tmp_path):
    # a capture hands payload-free records over in runs (one wake-up of the writer thread per
    # run); sequence numbers must still follow the order the records were made in
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    nan = np.array([np.nan, 1.0], dtype=np.float32)
    with TraceWriter(tmp_path / "t", manifest={"framework": "numpy"}) as w:
        w.add_many([_rec(arr=a, module="m0")[0], _rec(arr=nan, module="m1")[0]])
        w.add(_rec(arr=a, module="m2")[0], payload=a)
        w.add_many([])
        w.add_many([_rec(arr=a, module=f"m{i}")[0] for i in (3, 4)])
        # a NaN statistic (SQLite would turn it into NULL) survives as NaN
        w.add_many([Record(kind="custom", module="m5", dtype="float32", shape=(1,),
                           stats={"mean": float("nan"), "nan": 1})])
        # a shape of NumPy integers (a framework's shape tuple) is stored as plain ints
        w.add_many([Record(kind="custom", module="m6", dtype="float32",
                           shape=(np.int64(2), np.int64(3)))])
    recs = open_trace(tmp_path / "t").records()
    last = recs.pop()
    assert last.shape == (2, 3) and last.numel == 6
    assert np.isnan(recs.pop().stats["mean"])
    assert [(r.seq, r.module) for r in recs] == [(i, f"m{i}") for i in range(5)]
    assert recs[1].stats == compute_stats(nan)  # finite-masked, NaN counted
    assert [r.has_payload for r in recs] == [False, False, True, False, False]
    assert recs[0].stats == pytest.approx(compute_stats(a))


def test_rows_are_inserted_on_arrival_but_seen_only_once_committed(tmp_path):
    # the writer thread inserts each run of rows as it arrives (so a flush waits only for the
    # commit); until that commit a reader -- or a run killed now -- sees none of them
    a = np.arange(6, dtype=np.float32)
    with TraceWriter(tmp_path / "t", batch_records=10**6, commit_seconds=3600.0) as w:
        w.add_many([_rec(arr=a, module="m0")[0], _rec(arr=a, module="m1")[0]])
        w.add(_rec(arr=a, module="m2")[0], payload=a)
        for _ in range(500):  # until the writer thread has taken them and begun inserting
            if w._q.empty() and w._db.in_transaction:
                break
            time.sleep(0.01)
        assert w._db.in_transaction  # inserted, not committed
        db = tmp_path / "t" / "rank0" / "index.sqlite"
        with sqlite3.connect(db) as con:
            assert con.execute("SELECT COUNT(*) FROM records").fetchone() == (0,)
        w.flush()
        assert not w._db.in_transaction and w.records_written == 3
        with sqlite3.connect(db) as con:
            assert con.execute("SELECT COUNT(*) FROM records").fetchone() == (3,)
    assert [r.module for r in open_trace(tmp_path / "t").records()] == ["m0", "m1", "m2"]


def test_payload_dtypes_round_trip(tmp_path):
    f32 = np.array([1.0, -2.5, np.inf, np.nan, 3.0e38], dtype=np.float32)
    cases = {
        "float64": np.arange(6, dtype=np.float64).reshape(2, 3),
        "float16": np.array([1.5, -65504, 0], dtype=np.float16),
        "bfloat16": encode_bf16(f32),
        "int64": np.array([[1, -2], [3, 4]], dtype=np.int64),
        "bool": np.array([True, False, True]),
        "complex64": np.array([1 + 2j, -3j], dtype=np.complex64),
        "uint8": np.array([], dtype=np.uint8),
    }
    with TraceWriter(tmp_path / "t") as w:
        for name, raw in cases.items():
            w.add(Record(kind="custom", op=name, dtype=name, shape=raw.shape,
                         stats=compute_stats(raw, name)), payload=raw)
    tr = open_trace(tmp_path / "t")
    got = {r.op: r for r in tr.records()}
    for name, raw in cases.items():
        np.testing.assert_array_equal(tr.raw_tensor(got[name]), raw)
    bf = tr.tensor(got["bfloat16"])
    assert bf.dtype == np.float32 and bf[0] == 1.0 and bf[1] == -2.5 and np.isinf(bf[2])
    assert np.isnan(bf[3])
    assert got["bfloat16"].stats["nan"] == 1 and got["bfloat16"].stats["posinf"] == 1


def test_shards_roll_and_stay_valid_safetensors(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    with TraceWriter(tmp_path / "t", shard_bytes=4096) as w:
        for i in range(10):
            a = np.full((256,), i, dtype=np.float32)  # 1 KiB each -> rolls every 4
            w.add(Record(kind="custom", op=f"x{i}", dtype="float32", shape=a.shape), payload=a)
    shards = sorted((tmp_path / "t" / "rank0").glob("tensors-*.safetensors"))
    assert len(shards) >= 3
    loaded = {}
    for s in shards:
        loaded.update(st.load_file(str(s)))
    assert len(loaded) == 10
    tr = open_trace(tmp_path / "t")
    for r in tr.records():
        np.testing.assert_array_equal(loaded[str(r.seq)], tr.tensor(r))


def test_backpressure_keeps_queue_bounded(tmp_path):
    big = np.ones((1 << 18,), dtype=np.float32)  # 1 MiB
    peak = 0
    with TraceWriter(tmp_path / "t", max_queue_bytes=4 << 20) as w:
        for _ in range(40):
            w.add(Record(kind="custom", dtype="float32", shape=big.shape), payload=big)
            peak = max(peak, w._pending_bytes)
    assert peak <= 4 << 20
    assert len(open_trace(tmp_path / "t")) == 40


def test_hash_only_mode_stores_no_payload(tmp_path):
    a = np.arange(4, dtype=np.float32)
    with TraceWriter(tmp_path / "t") as w:
        w.add(Record(kind="custom", dtype="float32", shape=(4,)), payload=a, want_hash=True,
              store=False)
        w.add(Record(kind="custom", dtype="float32", shape=(4,)), payload=a.copy(),
              want_hash=True, store=False)
    r1, r2 = open_trace(tmp_path / "t").records()
    assert r1.hash and r1.hash == r2.hash and not r1.has_payload


def test_refuses_to_overwrite_existing_trace(tmp_path):
    TraceWriter(tmp_path / "t").close()
    with pytest.raises(TraceError, match="already holds a trace"):
        TraceWriter(tmp_path / "t")
    TraceWriter(tmp_path / "t", overwrite=True).close()


def test_bad_inputs_raise_one_line_errors(tmp_path):
    with pytest.raises(TraceError, match="no such trace"):
        open_trace(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(TraceError, match="not a netparity trace"):
        open_trace(tmp_path / "plain")
    a = np.zeros(3, np.float32)
    with TraceWriter(tmp_path / "t") as w:
        w.add(Record(kind="custom", dtype="float32", shape=(3,)), payload=a)
    m = json.loads((tmp_path / "t" / "manifest.json").read_text())
    m["schema_version"] = SCHEMA_VERSION + 1
    (tmp_path / "t" / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(SchemaError, match="newer"):
        open_trace(tmp_path / "t")
    m["schema_version"] = SCHEMA_VERSION
    (tmp_path / "t" / "manifest.json").write_text(json.dumps(m))
    shard = next((tmp_path / "t" / "rank0").glob("*.safetensors"))
    shard.unlink()
    tr = open_trace(tmp_path / "t")
    with pytest.raises(TraceError, match="shard is missing"):
        tr.tensor(tr.records()[0])
    (tmp_path / "t" / "rank0" / "index.sqlite").write_bytes(b"this is not sqlite" * 100)
    for f in (tmp_path / "t" / "rank0").glob("index.sqlite-*"):
        f.unlink()
    with pytest.raises(TraceError, match="corrupt trace index"):
        open_trace(tmp_path / "t")
    (tmp_path / "t" / "manifest.json").write_text("{not json")
    with pytest.raises(TraceError, match="corrupt manifest"):
        open_trace(tmp_path / "t")


def test_reader_handles_older_rows_without_optional_fields(tmp_path):
    with TraceWriter(tmp_path / "t") as w:
        w.add(Record(kind="loss", dtype="float32", shape=()))
    db = sqlite3.connect(tmp_path / "t" / "rank0" / "index.sqlite")
    assert db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == \
        str(SCHEMA_VERSION)
    db.close()
    (r,) = open_trace(tmp_path / "t").records()
    assert r.kind == "loss" and not r.has_payload and r.stats["nan"] is None
