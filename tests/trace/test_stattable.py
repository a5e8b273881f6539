"""The stat table a comparison reads statistics from (:class:`netparity.trace.fastrows.StatTable`):
the same values as a dense float64 matrix of the scan's ``s_*`` columns, without making one."""

from __future__ import annotations

import tracemalloc

import numpy as np

from netparity.trace.fastrows import StatTable
from netparity.trace.scan import Columns
from netparity.trace.schema import COUNT_STATS, STAT_FIELDS


def _columns(n: int, seed: int = 0, with_nulls: bool = True) -> Columns:
    rng = np.random.default_rng(seed)
    data: dict[str, np.ndarray] = {"numel": rng.integers(1, 100, n)}
    nulls: dict[str, np.ndarray] = {}
    for k in STAT_FIELDS:
        if k in COUNT_STATS:
            v = rng.integers(0, 5, n).astype(np.int64)
        else:
            v = rng.standard_normal(n)
            v[rng.random(n) < 0.05] = np.nan  # a NaN statistic (not NULL)
        if with_nulls and k in ("norm", "nan", "min"):
            m = rng.random(n) < 0.1
            v = v.copy()
            v[m] = -1 if k in COUNT_STATS else np.nan
            nulls[f"s_{k}"] = m
        data[f"s_{k}"] = v
    return Columns(data, nulls, n)


def _dense(cols: Columns) -> tuple[np.ndarray, np.ndarray]:
    """What the table stands for: the (n, 11) float64 matrix and NULL mask."""
    fl = np.stack([np.asarray(cols[f"s_{k}"], dtype=np.float64) for k in STAT_FIELDS], axis=1)
    nl = np.stack([cols.null(f"s_{k}") for k in STAT_FIELDS], axis=1)
    return fl, nl


def test_stat_table_reads_the_scan_columns_values() -> None:
    cols = _columns(500)
    t = StatTable(cols)
    fl, nl = _dense(cols)
    rows = np.array([3, 0, 499, 3, 17, 250], dtype=np.intp)
    np.testing.assert_array_equal(t.floats[rows], fl[rows])
    np.testing.assert_array_equal(t.null[rows], nl[rows])
    np.testing.assert_array_equal(t.null[rows, 4], nl[rows, 4])
    np.testing.assert_array_equal(t.floats[rows, 2], fl[rows, 2])
    np.testing.assert_array_equal(t.floats[7], fl[7])
    np.testing.assert_array_equal(t.floats[np.zeros(0, np.intp)], fl[:0])
    np.testing.assert_array_equal(t.null[[]], nl[[]])
    np.testing.assert_array_equal(t.floats[[2, 5]], fl[[2, 5]])
    np.testing.assert_array_equal(t.floats[fl[:, 0] > 0], fl[fl[:, 0] > 0])
    np.testing.assert_array_equal(t.floats[10:20], fl[10:20])
    assert t.null[np.array([1, 2]), 4].dtype == np.bool_
    assert t.floats[rows].dtype == np.float64 and t.null[rows].dtype == np.bool_
    norm = STAT_FIELDS.index("norm")
    for i in range(len(fl)):
        assert t.norm_ok[i] is (not nl[i, norm])
        want = {k: (None if nl[i, j] else int(fl[i, j]) if k in COUNT_STATS
                    else float(fl[i, j])) for j, k in enumerate(STAT_FIELDS)}
        got = t.row_stats(i)
        assert list(got) == list(want)
        for k in want:  # NaN statistics equal as NaN, types as row_to_record makes them
            assert type(got[k]) is type(want[k])
            assert got[k] == want[k] or got[k] != got[k] and want[k] != want[k]
    # no NULL anywhere: nothing masked
    t2 = StatTable(_columns(50, with_nulls=False))
    assert not t2.null[np.arange(50)].any() and all(t2.norm_ok[i] for i in range(50))


def test_stat_table_makes_no_copy_of_the_statistics() -> None:
    """A comparison's stat table held a dense (n, 11) float64 copy of the statistics plus a
    mask and a list of n bools (~110 B a row on top of the scan's own columns): now it reads
    the columns, so building it allocates next to nothing whatever n is."""
    n = 400_000
    cols = _columns(n)
    tracemalloc.start()
    try:
        t = StatTable(cols)
        built = tracemalloc.get_traced_memory()[0]
        t.floats[np.arange(1000)]
    finally:
        tracemalloc.stop()
    assert built < 100_000, f"{built} bytes allocated for a {n}-row stat table"
