"""Memory of large comparisons (issue 33 item 1): the look-ups a comparison makes on the side
read only what they need, not every record of a trace."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from netparity.trace import open_trace


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from align_speed import Gen

    d = tmp_path_factory.mktemp("pair")
    Gen(d / "ref", "torch", 130, False, steps=2).run()
    Gen(d / "cand", "mindspore", 130, False, steps=2).run()
    return d / "ref", d / "cand"


def test_iter_records_limit(pair):
    """``limit`` gives the first records of the unlimited answer, with and without filters."""
    tr = open_trace(pair[0])
    for filters in ({}, {"kind": "op", "step": 1}, {"module": "layer1.0*"}, {"op": "conv*"}):
        every = [r.seq for r in tr.iter_records(**filters)]
        assert len(every) > 20
        for n in (0, 1, 7, len(every), len(every) + 5):
            assert [r.seq for r in tr.iter_records(limit=n, **filters)] == every[:n]


def test_op_noise_probe_reads_few_records(pair, monkeypatch):
    """Whether the traces hold op tensors (to judge op pairs by float64 replays) is decided
    from the first op records of each side, without making a record of every op of the first
    step (a 200k-op comparison's peak memory fell by a third)."""
    from netparity.precision.opnoise import OpNoise
    from netparity.trace import reader

    made = []
    real = reader.row_to_record

    def counting(row):
        made.append(1)
        return real(row)

    monkeypatch.setattr(reader, "row_to_record", counting)
    tr, tc = open_trace(pair[0]), open_trace(pair[1])
    assert tr.count(kind="op") > 400
    assert OpNoise.for_traces(tr, tc) is None  # statistics only
    assert len(made) <= 50  # the first side's look answers it


def test_a_frozen_comparison_leaves_nothing_of_its_alignment(pair, monkeypatch):
    """A large comparison freezes its objects for the garbage collector when it ends; what its
    alignment made (one call class per table and kind, whose attributes hold the tables' arrays
    and record sources: each its own reference cycle) is collected first, not frozen with them
    for good (~0.5 GB of a 1M-op comparison stayed alive after it returned)."""
    import gc

    from netparity.align.tableread import _TableCall
    from netparity.compare import engine

    monkeypatch.setattr(engine, "_FREEZE_PAIRS", 1)  # this small pair freezes too
    gc.collect()
    before = len(_TableCall.__subclasses__())
    try:
        for level in ("op", "module"):
            res = engine.compare(pair[0], pair[1], level=level)
            assert res.n_pairs() > 100 and gc.get_freeze_count() > 0
            del res
            gc.collect()
            assert len(_TableCall.__subclasses__()) == before, level
    finally:
        gc.unfreeze()
