"""Statistics-basis pairs judged as whole arrays give exactly the per-pair metrics and verdicts."""

from __future__ import annotations

import json

import numpy as np

from netparity.compare.metrics import stats_metrics, stats_metrics_many
from netparity.compare.verdicts import judge
from netparity.stats import compute_stats
from netparity.trace import Record


def _rec(a: np.ndarray, **over: object) -> Record:
    st = {**compute_stats(a), **over}
    return Record(kind="module", dtype=str(a.dtype), shape=a.shape, stats=st)


def _pairs() -> list[tuple[Record, Record]]:
    rng = np.random.default_rng(5)
    out = []
    for k in range(200):
        a = rng.standard_normal((3, 1 + k % 7)).astype(np.float32) * 10.0 ** rng.integers(-6, 4)
        b = a + rng.standard_normal(a.shape).astype(np.float32) * 10.0 ** rng.integers(-9, 0)
        out.append((_rec(a), _rec(b)))
    z = np.zeros((4,), np.float32)
    out.append((_rec(z), _rec(z)))                                  # all zeros: rms 0, scale 1
    out.append((_rec(z), _rec(z + 1e-3)))                           # mag 0, fails
    out.append((_rec(z, min=-0.0, max=-0.0), _rec(z)))              # signed zeros
    nan = np.array([np.nan, 1.0, 2.0], np.float32)
    out.append((_rec(nan), _rec(nan)))                              # NaN counts agree
    out.append((_rec(nan), _rec(np.array([0.0, 1.0, 2.0], np.float32))))  # NaN mismatch
    out.append((_rec(z, mean=None), _rec(z)))                       # missing statistic
    out.append((_rec(z, std=float("nan")), _rec(z)))                # NaN statistic
    c = (rng.standard_normal(4) + 1j * rng.standard_normal(4)).astype(np.complex64)
    out.append((_rec(c), _rec(c * 1.001)))                          # complex: 2n real values
    out.append((_rec(np.ones(5, np.float32), nan=1), _rec(np.ones(5, np.float32))))
    return out


def test_batch_equals_scalar_metrics_and_verdicts():
    pairs = _pairs()
    rtol = [1e-4 if k % 2 else 0 for k in range(len(pairs))]  # an int tolerance stays an int
    atol = [1e-5] * len(pairs)
    got = stats_metrics_many(pairs, rtol, atol)
    handled = 0
    for (a, b), rt, at, m in zip(pairs, rtol, atol, got):
        want = stats_metrics(a, b, rtol=rt, atol=at)
        if m is None:  # left to the scalar path: only pairs with missing/non-finite statistics
            assert not all(isinstance(v, (int, float)) and np.isfinite(v)
                           for r in (a, b) for k, v in r.stats.items()
                           if k in ("min", "max", "mean", "std", "norm"))
            continue
        handled += 1
        # same keys, same order, same values bit for bit (JSON text shows ints vs floats, -0.0)
        assert json.dumps(m) == json.dumps(want)
        assert judge(m, rt, at) == judge(want, rt, at)
    assert handled >= len(pairs) - 3
    statuses = {judge(m, rt, at)[0] for m, rt, at in zip(got, rtol, atol) if m is not None}
    assert {"pass", "fail"} <= statuses


def _scanned(tmp_path, pairs: list[tuple[Record, Record]]) -> list[tuple[Record, Record]]:
    """The same pairs written to a trace (one call per pair) and read back as the comparison
    engine reads them: ScannedRecords whose statistics live in shared arrays."""
    from netparity.align.reading import RecordSource
    from netparity.trace import TraceWriter, open_trace

    with TraceWriter(tmp_path / "t", manifest={"framework": "numpy"}) as w:
        for a, b in pairs:
            ev = w.next_event()
            for role, r in (("input", a), ("output", b)):
                w.add(Record(kind="module", module="m", op="op", event=ev, role=role,
                             dtype=r.dtype, shape=r.shape, stats=r.stats))
    src = RecordSource(open_trace(tmp_path / "t"), 0, None, None, ("module",))
    src.get((0, 0, 0))
    assert src.calls is not None
    calls = sorted((src.get(k) for k in src.calls), key=lambda io: io[0][0].seq)
    return [(ins[0], outs[0]) for ins, outs in calls]


def test_scanned_records_batch_equals_scalar(tmp_path):
    """Records read from a trace: the array paths (statistics, RMS, 'has a norm') give what
    the per-record functions give on the same records, and never make their stats dicts."""
    from netparity.compare.metrics import record_rms, records_rms, stats_present, stats_ready
    from netparity.trace.fastrows import ScannedRecord

    pairs = _scanned(tmp_path, _pairs())
    assert all(type(a) is ScannedRecord for a, _ in pairs)
    rtol = [1e-4] * len(pairs)
    atol = [1e-5] * len(pairs)
    got = stats_metrics_many(pairs, rtol, atol)
    refs = [a for a, _ in pairs]
    rms = records_rms(refs)
    ready = [stats_ready(a) for a in refs]
    assert all(stats_present(a) for a in refs)
    assert all("_stats" not in a.__dict__ for a in refs)  # nothing above made a dict
    for (a, b), m, r, ok in zip(pairs, got, rms, ready):
        assert json.dumps(r) == json.dumps(record_rms(a))
        assert ok == (bool(a.stats) and a.stats.get("norm") is not None)
        if m is not None:
            assert json.dumps(m) == json.dumps(stats_metrics(a, b, rtol=1e-4, atol=1e-5))
    assert sum(m is not None for m in got) >= len(pairs) - 3
    # a scanned record equals, pickles and copies as the plain record it stands for
    import copy
    import pickle

    plain = refs[0].plain()
    assert refs[0] == plain and plain == refs[0]
    assert type(pickle.loads(pickle.dumps(refs[0]))) is Record
    assert copy.copy(refs[0]) == plain


def _kept_bytes(b: object) -> int:
    """The bytes a batch's columns hold (arrays; lists and object arrays: a slot each)."""
    import sys

    n = 0
    for v in vars(b).values() if hasattr(b, "__dict__") else ():
        if isinstance(v, np.ndarray):
            n += v.nbytes
        elif isinstance(v, list):
            n += sys.getsizeof(v) + sum(sys.getsizeof(x) for x in v
                                       if isinstance(x, int) and not -5 <= x <= 256)
    return n


def test_batch_keeps_few_bytes_per_pair_and_the_same_metrics():
    """Issue 33: a 1M-op comparison's batch holds ~3M pairs. Of clean pairs with no NaN/Inf,
    it keeps the columns its metrics need, no float copies of the tolerances, no count
    columns of zeros, no Python int per numel (<= 128 bytes a pair, was ~230), and every
    pair's metrics and verdict stay the scalar path's; with counts, they are kept."""
    from netparity.compare.metrics import _STAT_ALL, stats_batch_arrays

    rng = np.random.default_rng(1)
    n = 2000
    x = np.abs(rng.standard_normal((n, len(_STAT_ALL)))) + 1.0
    x[:, 0] *= -1
    x[:, 5:] = 0.0
    y = x * (1 + 1e-4 * rng.standard_normal(x.shape))
    y[:, 5:] = 0.0
    ok = np.ones(n, dtype=bool)
    numels = (rng.integers(1, 10**6, n)).tolist()
    rtol = np.empty(n, dtype=object)
    rtol[:] = [1e-4] * n
    atol = np.empty(n, dtype=object)
    atol[:] = [1e-5 * (1 + k % 3) for k in range(n)]
    b = stats_batch_arrays(x, ok, y, ok, numels, np.zeros(n, bool), rtol, atol)
    assert _kept_bytes(b) <= 128 * n
    y[7, 5] = 2.0  # a NaN count differs: kept, and the pair fails
    c = stats_batch_arrays(x, ok, y, ok, numels, np.zeros(n, bool), rtol, atol)
    for batch in (b, c):
        st = batch.status().tolist()
        for j in (0, 7, 1999):
            m = batch.metrics(j)
            assert m["numel"] == numels[j] and type(m["numel"]) is int
            assert m["rtol"] is rtol[j] and m["atol"] is atol[j]
            assert st[j] == {"pass": 0, "warn": 1, "fail": 2}[judge(m, rtol[j], atol[j])[0]]
    assert c.metrics(7)["nan_mismatch"] == 2 and c.status()[7] == 2
    assert b.metrics(7)["nonfinite_counts"] == {"nan": [0, 0], "posinf": [0, 0],
                                                "neginf": [0, 0]}


def test_a_batch_made_in_parts_equals_one_made_whole():
    """The engine judges a large comparison's statistics pairs in parts (bounded memory) and
    joins them: every pair's metrics and status are those of one batch over all pairs."""
    from netparity.compare.metrics import StatsBatch, stats_batch

    pairs = _pairs()
    refs, cands = [a for a, _ in pairs], [b for _, b in pairs]
    rtol = [1e-4 if k % 2 else 0 for k in range(len(pairs))]
    atol = [1e-5] * len(pairs)
    whole = stats_batch(refs, cands, rtol, atol)
    for size in (1, 7, 64, len(pairs)):
        parts = [stats_batch(refs[s:s + size], cands[s:s + size], rtol[s:s + size],
                             atol[s:s + size]) for s in range(0, len(pairs), size)]
        got = StatsBatch.join(parts)
        assert got.ok.tolist() == whole.ok.tolist() and got.at.tolist() == whole.at.tolist()
        assert got.status().tolist() == whole.status().tolist()
        assert [json.dumps(got.metrics(j)) for j in range(len(got))] == \
            [json.dumps(whole.metrics(j)) for j in range(len(whole))]
        assert got.nonfinite_mismatch()[0].tolist() == whole.nonfinite_mismatch()[0].tolist()
