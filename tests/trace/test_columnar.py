"""The columnar copy of a trace index (netparity.trace.columnar): scans and records read from
it equal those read from SQLite, and a copy that does not match its index is never used."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "align"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_align_table_read import _Odd, _snapshot  # noqa: E402
from test_scan import _write  # noqa: E402

from netparity.align import align_traces  # noqa: E402
from netparity.trace import Record, TraceWriter, open_trace  # noqa: E402
from netparity.trace.columnar import COLUMNS_FILE, DISABLE_ENV, compact, store  # noqa: E402
from netparity.trace.parquet import PARQUET_FILE  # noqa: E402
from netparity.trace.scan import Strings  # noqa: E402
from netparity.trace.schema import COLUMN_NAMES  # noqa: E402

#: a columnar copy's file per format (Parquet: what compact writes; npz: older traces)
FILES = {"parquet": PARQUET_FILE, "npz": COLUMNS_FILE}

FILTERS = [
    {},
    {"kind": "module"},
    {"kind": ["op", "module"], "role": "input", "arg": ["", "0"]},
    {"step": 1, "direction": "backward"},
    {"nonempty": "source"},
    {"seq": [0, 3, 5, 999]},
    {"module": "net*"},
    {"op": "Add"},
    {"role": "nothing-has-this"},
]


def _plain(cols):
    out = {}
    for c in cols:
        v = cols[c]
        out[c] = v.tolist() if isinstance(v, Strings) else v.tolist()
        out[c + "/null"] = cols.null(c).tolist()
    return json.dumps(out, sort_keys=True)  # NaN prints as NaN: comparable text


def _scans(path: Path, monkeypatch, disabled: bool) -> list[str]:
    monkeypatch.setenv(DISABLE_ENV, "1" if disabled else "0")
    tr = open_trace(path)
    got = [_plain(tr.scan(COLUMN_NAMES, **f)) for f in FILTERS]
    got.append(json.dumps([r.to_dict() for r in tr.load_records()], sort_keys=True))
    got.append(json.dumps([r.to_dict() for r in tr.load_records(kind="op", step=0)],
                          sort_keys=True))
    return got


@pytest.mark.parametrize("fmt", list(FILES))
@pytest.mark.parametrize("writer", ["odd", "payloads"])
def test_scans_and_records_equal_sqlite(tmp_path, monkeypatch, writer, fmt):
    t = tmp_path / "t"
    if writer == "odd":  # NULL and NaN statistics, odd arguments, a separator in a path
        _Odd(t, "torch", 1.0).write()
    else:  # payload locations (NULL where there is none), an empty tensor
        _write(t)
    sqlite = _scans(t, monkeypatch, disabled=True)
    assert compact(t, fmt=fmt) == 1
    monkeypatch.setenv(DISABLE_ENV, "0")
    st = store(open_trace(t), 0)
    assert st is not None and st.path.name == FILES[fmt]  # the copy is current: scans read it
    assert _scans(t, monkeypatch, disabled=False) == sqlite


def test_alignment_from_columns_equals_sqlite(tmp_path, monkeypatch):
    for name, scale in (("a", 1.0), ("b", 1.0001)):
        _Odd(tmp_path / name, "torch" if name == "a" else "mindspore", scale).write()
    monkeypatch.setenv(DISABLE_ENV, "1")
    before = _snapshot(align_traces(open_trace(tmp_path / "a"), open_trace(tmp_path / "b"),
                                    level="both"))
    compact(tmp_path / "a")
    compact(tmp_path / "b")
    monkeypatch.setenv(DISABLE_ENV, "0")
    after = _snapshot(align_traces(open_trace(tmp_path / "a"), open_trace(tmp_path / "b"),
                                   level="both"))
    assert after == before


@pytest.mark.parametrize("fmt", list(FILES))
def test_a_copy_of_another_index_is_not_used(tmp_path, monkeypatch, fmt):
    """A copy whose row count or last sequence number differs from the index (the index grew
    after compaction, or the file came from elsewhere) is ignored: SQLite is read."""
    monkeypatch.delenv(DISABLE_ENV, raising=False)
    _write(tmp_path / "a")
    with TraceWriter(tmp_path / "b", manifest={"framework": "numpy"}) as w:
        w.add(Record(kind="loss", op="loss", dtype="float32", shape=(), stats={"mean": 1.0}))
    compact(tmp_path / "a", fmt=fmt)
    for f in FILES.values():  # b's own copy (its writer compacted it) is not what is tested
        (tmp_path / "b" / "rank0" / f).unlink(missing_ok=True)
    shutil.copy(tmp_path / "a" / "rank0" / FILES[fmt], tmp_path / "b" / "rank0" / FILES[fmt])
    tb = open_trace(tmp_path / "b")
    assert store(tb, 0) is None
    assert [r.op for r in tb.load_records()] == ["loss"]


def test_an_index_edited_after_compaction_is_read_from_sqlite(tmp_path, monkeypatch):
    """An edit of the SQLite index that keeps its row count and last sequence number (a hand
    repair, or tampering) must not be hidden by the older columnar copy."""
    import sqlite3

    monkeypatch.delenv(DISABLE_ENV, raising=False)
    _write(tmp_path / "a")
    compact(tmp_path / "a")
    assert store(open_trace(tmp_path / "a"), 0) is not None
    db = sqlite3.connect(tmp_path / "a" / "rank0" / "index.sqlite")
    db.execute("UPDATE records SET module = 'edited' WHERE seq = 0")
    db.commit()
    db.close()
    tr = open_trace(tmp_path / "a")
    assert store(tr, 0) is None
    assert tr.load_records()[0].module == "edited"


def test_an_index_grown_after_an_open_is_read_from_sqlite(tmp_path, monkeypatch):
    """The index's extent is queried once per state of its file in a process: a row added
    after a first open (same process, same path) makes the next open read SQLite."""
    import sqlite3

    monkeypatch.delenv(DISABLE_ENV, raising=False)
    _write(tmp_path / "a")
    compact(tmp_path / "a")
    n = len(open_trace(tmp_path / "a").load_records())
    assert store(open_trace(tmp_path / "a"), 0) is not None
    db = sqlite3.connect(tmp_path / "a" / "rank0" / "index.sqlite")
    db.execute("CREATE TEMP TABLE t AS SELECT * FROM records WHERE seq = "
               "(SELECT max(seq) FROM records)")
    db.execute("UPDATE t SET seq = seq + 1")
    db.execute("INSERT INTO records SELECT * FROM t")
    db.commit()
    db.close()
    tr = open_trace(tmp_path / "a")
    assert store(tr, 0) is None
    assert len(tr.load_records()) == n + 1


@pytest.mark.parametrize("fmt", list(FILES))
def test_a_damaged_copy_falls_back_or_says_so(tmp_path, monkeypatch, fmt):
    monkeypatch.delenv(DISABLE_ENV, raising=False)
    _write(tmp_path / "a")
    want = [r.to_dict() for r in open_trace(tmp_path / "a").load_records()]
    compact(tmp_path / "a", fmt=fmt)
    p = tmp_path / "a" / "rank0" / FILES[fmt]
    p.write_bytes(b"not a zip file")
    assert store(open_trace(tmp_path / "a"), 0) is None  # unreadable: SQLite
    assert json.dumps([r.to_dict() for r in open_trace(tmp_path / "a").load_records()],
                      sort_keys=True) == json.dumps(want, sort_keys=True)


def test_compact_refuses_what_is_not_a_trace(tmp_path):
    from netparity.errors import TraceError

    with pytest.raises(TraceError):
        compact(tmp_path)
    _write(tmp_path / "a")
    with pytest.raises(TraceError, match="no rank 3"):
        compact(tmp_path / "a", ranks=[3])
    assert compact(tmp_path / "a", ranks=[0]) == 1


@pytest.mark.parametrize("disable", ["0", "1"])  # the columnar copy's views, SQLite's rows
@pytest.mark.parametrize("filters", [{}, {"kind": "module"}])  # every row, some rows
def test_scanned_arrays_are_read_only(tmp_path, monkeypatch, disable, filters):
    """Scans hand out read-only arrays (views of the copy's memory map for a scan of every
    row): a caller cannot change what the next scan returns, or the trace."""
    monkeypatch.setenv(DISABLE_ENV, disable)
    _write(tmp_path / "a")
    compact(tmp_path / "a")
    tr = open_trace(tmp_path / "a")
    got = tr.scan(["seq", "module"], **filters)
    for arr in (got["seq"], got["module"].codes):
        if arr.size:
            with pytest.raises(ValueError, match="read-only"):
                arr[:] = -5
    assert np.all(tr.scan(["seq"])["seq"] >= 0)
    mine = got["seq"].copy()  # a copy is the caller's own
    mine[:] = -5


@pytest.mark.parametrize("fmt", list(FILES))
@pytest.mark.parametrize("filters", [{}, {"kind": "module"}, {"step": 1}])
def test_a_constant_column_costs_no_memory_per_row(tmp_path, monkeypatch, fmt, filters):
    """A column holding one value on every row (``rank``, the NaN/Inf counts, ``dtype`` ...:
    about half of a large side's column bytes) is kept as one value repeated (a stride-0
    view), whichever format the copy is and whether the scan reads every row or some; the
    values are those SQLite gives, and read-only as every scan's arrays are."""
    t = tmp_path / "t"
    _write(t)
    monkeypatch.setenv(DISABLE_ENV, "1")
    want = open_trace(t).scan(COLUMN_NAMES, **filters)
    every = open_trace(t).scan(COLUMN_NAMES)

    def arrays(cols, c):
        v = cols[c]
        return [v.codes if isinstance(v, Strings) else v,
                *([cols.nulls[c]] if c in cols.nulls else [])]

    constant = [c for c in COLUMN_NAMES
                if all(a.tobytes() == a[:1].tobytes() * len(a) for a in arrays(every, c))]
    # integer and text columns (reals and NULL masks: test_constant_view_is_bit_exact)
    assert {"rank", "s_posinf", "s_neginf", "dtype"} <= set(constant)
    compact(t, fmt=fmt)
    monkeypatch.setenv(DISABLE_ENV, "0")
    got = open_trace(t).scan(COLUMN_NAMES, **filters)
    assert _plain(got) == _plain(want) and got.n > 1
    for c in constant:
        for a in arrays(got, c):
            assert a.strides == (0,), (c, a)
            with pytest.raises(ValueError, match="read-only"):
                a[:] = a[0]


def test_constant_view_is_bit_exact():
    from netparity.trace.columnar import constant_view

    nan = np.array([np.nan] * 5)
    assert constant_view(nan).strides == (0,) and np.isnan(constant_view(nan)).all()
    signed = np.array([0.0, -0.0, 0.0])  # equal as numbers, not bit for bit: kept
    assert constant_view(signed) is signed
    for a in (np.zeros(0), np.ones(1), np.array([1, 2, 1])):
        assert constant_view(a) is a
    b = constant_view(np.full(4, 7, dtype=np.int32))
    assert b.strides == (0,) and b.dtype == np.int32 and b.tolist() == [7] * 4


def _steps_trace(path: Path, steps: int, calls: int) -> None:
    """``steps`` steps of ``calls`` module calls each (input and output records, varied
    statistics and names: no column is constant)."""
    from netparity.stats import compute_stats

    rng = np.random.default_rng(0)
    with TraceWriter(path, manifest={"framework": "numpy"}) as w:
        for step in range(steps):
            for k in range(calls):
                ev = w.next_event()
                for role in ("input", "output"):
                    a = rng.standard_normal(4).astype(np.float32)
                    w.add(Record(kind="module", module=f"m{k}", op="linear", native="Linear",
                                 step=step, event=ev, role=role, dtype="float32",
                                 shape=(4,), stats=compute_stats(a)))


@pytest.mark.parametrize("fmt", list(FILES))
def test_a_scan_of_some_steps_reads_only_their_rows(tmp_path, monkeypatch, fmt):
    """A copy too large to hold whole (more rows than ``CHECK_ROWS``) is checked part by part,
    and a scan of some steps then reads those steps' rows only: the same values as SQLite's,
    in a fraction of the memory of a scan of every step (Parquet: NumPy's and Arrow's
    allocations; an npz copy's columns are views of its memory map either way)."""
    import gc
    import tracemalloc

    import pyarrow as pa

    from netparity.trace import columnar

    t = tmp_path / "t"
    _steps_trace(t, steps=8, calls=300)
    monkeypatch.setenv(DISABLE_ENV, "1")
    sql = open_trace(t)
    filters = [{"step": 3}, {"step": [2, 5]}, {"step": 7, "role": "output"},
               {"step": 0, "seq": [0, 1, 4000]}, {"step": 9}]
    want = [_plain(sql.scan(COLUMN_NAMES, **f)) for f in filters]
    compact(t, fmt=fmt)
    monkeypatch.setenv(DISABLE_ENV, "0")
    monkeypatch.setattr(columnar, "CHECK_ROWS", 1000, raising=False)  # 4800 rows: 5 parts

    def kept(scan_filters):
        tr = open_trace(t)
        gc.collect()
        arrow = pa.total_allocated_bytes()
        tracemalloc.start()
        tr.check_rows()
        cols = tr.scan(COLUMN_NAMES, **scan_filters)
        gc.collect()
        got = tracemalloc.get_traced_memory()[0] + pa.total_allocated_bytes() - arrow
        tracemalloc.stop()
        return cols, got

    kept({"step": 1})  # once first: what the first scan of a process allocates for good
    one, one_bytes = kept({"step": 3})
    every, every_bytes = kept({})
    assert one.n == 600 and every.n == 4800
    if fmt == "parquet":
        assert one_bytes < every_bytes / 3, (one_bytes, every_bytes)
    tr = open_trace(t)
    tr.check_rows()
    assert [_plain(tr.scan(COLUMN_NAMES, **f)) for f in filters] == want
