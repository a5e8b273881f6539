"""Column scans and the payload reader: the only way into a trace from outside netparity.trace."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from netparity.errors import TraceError, UsageError
from netparity.stats import compute_stats
from netparity.trace import Record, TraceWriter, holds_trace, open_trace
from netparity.trace.scan import Strings


def _write(path: Path) -> list[tuple[Record, np.ndarray | None]]:
    """Two steps of three module calls (inputs and outputs), an empty tensor, a NaN statistic."""
    rng = np.random.default_rng(1)
    out: list[tuple[Record, np.ndarray | None]] = []
    with TraceWriter(path, manifest={"framework": "numpy"}) as w:
        for step in range(2):
            for mod in ("conv1", "layer1.0.bn1", "fc"):
                ev = w.next_event()
                for role in ("input", "output"):
                    a = rng.standard_normal((2, 3)).astype(np.float32)
                    r = Record(kind="module", module=mod, op="conv2d", native="Conv2d",
                               step=step, event=ev, role=role, dtype="float32", shape=a.shape,
                               stats=compute_stats(a), source=f"{mod}.py:1" if role == "input" else "")
                    w.add(r, payload=a if mod == "fc" else None)
                    out.append((r, a))
        e = np.zeros((0,), np.float32)
        w.add(Record(kind="custom", op="empty", dtype="float32", shape=(0,),
                     stats=compute_stats(e), event=w.next_event()))
        out.append((out[-1][0], None))
        nan = np.array([np.nan, 1.0], np.float32)
        st = {**compute_stats(nan), "mean": float("nan")}  # a NaN statistic, stored as 'nan'
        w.add(Record(kind="custom", op="nan", dtype="float32", shape=(2,), stats=st,
                     event=w.next_event()))
    return out


def test_scan_returns_arrays_equal_to_records(tmp_path):
    _write(tmp_path / "t")
    tr = open_trace(tmp_path / "t")
    recs = tr.records()
    cols = tr.scan(["seq", "step", "event", "module", "role", "shape", "s_mean", "s_norm",
                    "offset", "source"])
    assert isinstance(cols["module"], Strings) and cols["seq"].dtype == np.int64
    assert cols["seq"].tolist() == [r.seq for r in recs]
    assert cols["module"].tolist() == [r.module for r in recs]
    assert cols["source"].tolist() == [r.source for r in recs]
    assert cols["shape"].map(lambda s: tuple(eval(s))).tolist() == [r.shape for r in recs]
    assert (cols["role"] == "input").tolist() == [r.role == "input" for r in recs]
    assert len(cols["module"].values) == 4  # distinct strings once: conv1, bn1, fc, ""
    means = [r.stats["mean"] for r in recs]
    got = cols["s_mean"]
    for g, m, null in zip(got.tolist(), means, cols.null("s_mean").tolist()):
        assert (m is None) == null
        assert (math.isnan(g) if m is None or m != m else g == m)
    # NULL (empty tensor) and NaN statistics are told apart
    kinds = [(r.op, r.stats["mean"]) for r in recs if r.kind == "custom"]
    assert kinds[0][1] is None and math.isnan(kinds[1][1])
    assert cols.null("s_mean").sum() == 1
    assert cols.null("offset").tolist() == [r.offset is None for r in recs]


def test_scan_filters_and_count(tmp_path):
    _write(tmp_path / "t")
    tr = open_trace(tmp_path / "t")
    c = tr.scan(["seq", "module"], step=1, kind="module", role=["output"])
    want = [r.seq for r in tr.records(step=1, kind="module", role="output")]
    assert c["seq"].tolist() == want and len(want) == 3
    assert tr.count(step=1, kind="module", role="output") == 3
    assert tr.scan(["seq"], module="layer1.*")["seq"].tolist() == [
        r.seq for r in tr.records(module="layer1.*")]
    by_seq = tr.scan(["seq", "module"], seq=[want[2], want[0]] + list(range(100, 1700)))
    assert by_seq["seq"].tolist() == [want[0], want[2]]  # chunked IN lists, sequence order
    assert by_seq["module"].tolist() == ["conv1", "fc"]
    assert tr.scan(["seq"], step=7).n == 0
    src = tr.scan(["seq", "source"], nonempty="source")
    assert src["source"].tolist() == [r.source for r in tr.records() if r.source]
    assert src.n == 6


def test_scan_refuses_unknown_columns_and_filters(tmp_path):
    _write(tmp_path / "t")
    tr = open_trace(tmp_path / "t")
    with pytest.raises(UsageError, match="no column 'timing'"):
        tr.scan(["seq", "timing"])
    with pytest.raises(UsageError, match="cannot filter"):
        tr.scan(["seq"], shard="x")
    with pytest.raises(UsageError, match="no rank 3"):
        tr.scan(["seq"], rank=3)
    with pytest.raises(UsageError, match="not scanned"):
        tr.scan(["seq"])["step"]


def test_load_records_equals_records(tmp_path):
    _write(tmp_path / "t")
    tr = open_trace(tmp_path / "t")
    a = [r.to_dict() for r in tr.load_records(kind=["module"], step=0)]
    b = [r.to_dict() for r in tr.records(kind="module", step=0)]
    assert a == b and len(a) == 6


def test_payload_reader_streams_chunks(tmp_path):
    written = _write(tmp_path / "t")
    tr = open_trace(tmp_path / "t")
    fc = [r for r in tr.records() if r.has_payload]
    assert len(fc) == 4
    want = [a for r, a in written if r.module == "fc"]
    for rec, a in zip(fc, want):
        with tr.payload_reader(rec) as rd:
            assert rd.count == 6
            got = np.concatenate([rd.read(0, 4).copy(), rd.read(4, 2).copy()])
        np.testing.assert_array_equal(got, a.reshape(-1))
    with pytest.raises(TraceError, match="no tensor payload"):
        tr.payload_reader(tr.records(module="conv1")[0])


def test_payload_reader_reports_truncated_shard(tmp_path):
    _write(tmp_path / "t")
    tr = open_trace(tmp_path / "t")
    rec = [r for r in tr.records() if r.has_payload][-1]
    shard = next((tmp_path / "t" / "rank0").glob(f"{rec.shard}"))
    with open(shard, "r+b") as f:
        f.truncate(rec.offset + 2)
    with pytest.raises(TraceError, match="truncated"):
        tr.payload_reader(rec)


def test_holds_trace(tmp_path):
    assert not holds_trace(tmp_path)
    _write(tmp_path / "t")
    assert holds_trace(tmp_path / "t")

