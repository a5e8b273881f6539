"""A compacted trace's index is Apache Parquet (netparity.trace.parquet): DuckDB and pyarrow
open it directly (pandas and polars read it through pyarrow), with the schema docs/trace-format.md gives, and the rows netparity reads."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "align"))
from test_align_table_read import _Odd  # noqa: E402

from netparity.trace import open_trace  # noqa: E402
from netparity.trace.columnar import DISABLE_ENV, compact, store  # noqa: E402
from netparity.trace.parquet import PARQUET_FILE, arrow_types  # noqa: E402

duckdb = pytest.importorskip("duckdb")

#: the query the README shows: operators per module and direction of one rank
QUERY = ("SELECT module, direction, count(*) AS n, max(s_max) AS max "
         "FROM read_parquet(?) WHERE kind = 'op' GROUP BY ALL ORDER BY n DESC, module, direction")


def test_duckdb_and_pyarrow_read_a_compacted_trace(tmp_path, monkeypatch):
    monkeypatch.delenv(DISABLE_ENV, raising=False)
    t = tmp_path / "t"
    _Odd(t, "torch", 1.0).write()  # NULL and NaN statistics, odd names
    compact(t)
    p = t / "rank0" / PARQUET_FILE
    assert store(open_trace(t), 0) is not None  # netparity reads the same file
    tr = open_trace(t)
    want: dict[tuple[str, str], int] = {}
    for r in tr.load_records(kind="op"):
        want[r.module, r.direction] = want.get((r.module, r.direction), 0) + 1
    got = duckdb.connect().execute(QUERY, [str(p)]).fetchall()
    assert {(m, d): n for m, d, n, _ in got} == want and got
    # the schema is the index's, column for column (text as dictionary-encoded strings)
    import pyarrow.parquet as pq

    assert {f.name: str(f.type) for f in pq.read_schema(p)} == arrow_types()
    seq = pq.read_table(p, columns=["seq"]).column(0).to_pylist()
    assert seq == sorted(seq) and len(seq) == len(tr.load_records())
