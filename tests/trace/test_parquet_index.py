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


_POOL_CHILD = r"""
import sys
from pathlib import Path
import numpy as np
import pyarrow as pa
from netparity.trace.parquet import ParquetMembers, write_index
from netparity.trace.scan import Strings
from netparity.trace.schema import COLUMNS

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024

n, d = 200_000, Path(sys.argv[1])
data = {}
for c, t in COLUMNS:
    t = t.split()[0]
    if t == "TEXT":  # module: one distinct path per row (a large model's module column)
        data[c] = (Strings(np.arange(n, dtype=np.int32), [f"model.layers.{i}.mlp.fc" for i in
                                                           range(n)])
                   if c == "module" else Strings(np.zeros(n, np.int32), ["x"]))
    else:
        data[c] = np.arange(n, dtype=np.int64) if t == "INTEGER" else np.linspace(0, 1, n)
with open(d / "index.parquet", "wb") as f:
    write_index(f, data, {}, {"n": n})
del data
pa.default_memory_pool().release_unused()
m = ParquetMembers(d / "index.parquet", d)
for read in (lambda: m.text("module"), lambda: m["i.seq"], lambda: m["f.s_mean"]):
    got = read()
    before = rss()
    pa.default_memory_pool().release_unused()
    print(f"{before - rss():.1f}")
"""


def test_reading_a_column_leaves_no_unused_memory_in_arrows_pool(tmp_path):
    """Decoding a Parquet column allocates scratch (~55 MB for 200k distinct strings) that
    Arrow's pool (mimalloc) keeps after it is freed, for the process's life: every way a
    copy's column is read (text, integer, real) hands it back, so nothing is left to free."""
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", _POOL_CHILD, str(tmp_path)], env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    assert [float(x) < 8 for x in out] == [True] * 3, out


_PAGES_CHILD = _POOL_CHILD.split("m = ParquetMembers")[0] + r"""
def file_rss_kb(path):
    got, cur = 0, None
    for line in open("/proc/self/smaps"):
        head = line.split()
        if "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
            cur = head[5] if len(head) > 5 else ""
        elif head[0] == "Rss:" and cur == str(path):
            got += int(head[1])
    return got

p = (d / "index.parquet").resolve()
m = ParquetMembers(p, d)
print(p.stat().st_size // 1024)
for read in (lambda: m.text("module"), lambda: m["i.seq"], lambda: m["f.s_mean"]):
    got = read()
    print(file_rss_kb(p))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps")
def test_reading_a_column_leaves_no_page_of_the_file_resident(tmp_path):
    """A copy is read through a map of its file: the pages a read touched counted as the
    process's memory for as long as the trace was open (~0.37 GB of a 1M-op comparison's
    peak), though the columns are decoded copies. Every way a column is read hands them back."""
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    size, *after = (int(x) for x in subprocess.run(
        [sys.executable, "-c", _PAGES_CHILD, str(tmp_path)], env=env, capture_output=True,
        text=True, check=True).stdout.split())
    assert size > 1000  # a file of some MB, whose pages would show
    assert max(after) < 64, (size, after)  # KiB: none of its pages left mapped
