"""The writers that list every pair of a comparison (the JSON's pairs Parquet, the CSV) read a
pair table's columns (netparity.report.pair_columns): they make no pair object and write,
byte for byte, what the pair objects give; the result JSON is streamed (calls in chunks) and
is the text json.dumps gives of the whole."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import netparity
from netparity.compare.results import CallResult, CompareResult
from netparity.report.csv_report import write_csv
from netparity.report.json_report import write_result

#: every writer that lists every pair: name -> (write, the files it writes)
WRITERS = {
    "json": (lambda r, d: write_result(r, d / "r.json"), ("r.json", "r.pairs.parquet")),
    "csv": (lambda r, d: write_csv(r, d / "r.csv"), ("r.csv",)),
}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A statistics pair of two frameworks' traces (benchmarks/align_speed.py's generator):
    pairs that pass, warn and fail, N:M groups, pairs judged one by one."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from align_speed import Gen

    d = tmp_path_factory.mktemp("gen")
    Gen(d / "ref", "torch", 150, False).run()
    Gen(d / "cand", "mindspore", 150, False).run()
    return str(d / "ref"), str(d / "cand")


def _never_asked(r: CompareResult) -> None:
    """The table as if none of its batch-judged pairs had been made (localisation makes the
    failing ones): every such pair is then read from the columns, reasons included."""
    t = r.table
    for i in t.made:
        if t.brow[i] >= 0:
            t.obj[i] = None
    t.made = [i for i in t.made if t.brow[i] < 0]
    at = np.nonzero(t.brow >= 0)[0]
    t.code[at] = t.batch.status()[t.brow[at]]


@pytest.mark.parametrize("writer", list(WRITERS))
@pytest.mark.parametrize("made", ["localised", "none"])
def test_writers_read_the_pair_table_and_write_what_the_objects_give(pair, tmp_path, writer,
                                                                     made):
    write, files = WRITERS[writer]
    got = netparity.compare(*pair, level="op")
    want = netparity.compare(*pair, level="op")
    if made == "none":
        _never_asked(got)
        _never_asked(want)
    assert got.table is not None and got.table.batch is not None
    c = got.counts()
    assert c["pass"] and c["warn"] and c["fail"]
    want.pairs  # noqa: B018 -- every pair object made: what the writers wrote from before
    for name, r in (("got", got), ("want", want)):
        (tmp_path / name).mkdir()
        write(r, tmp_path / name)
    assert got.table is not None  # the writer asked for no pair object
    if made == "none":  # at most the handful the report's sections show (worst pairs)
        assert len(got.table.made) <= 16
    for f in files:
        assert (tmp_path / "got" / f).read_bytes() == (tmp_path / "want" / f).read_bytes(), f


def _call(k: int, err: float) -> CallResult:
    return CallResult(key=f"c{k}", level="op", module=f"m{k}", op="add", native="add",
                      cand_module=f"m{k}", cand_op="Add", direction="forward", step=0,
                      rank=0, source="", cand_source="", order=k, inputs=[f"i{k}"],
                      outputs=[f"o{k}"], in_error=err, out_error=0.5)


@pytest.mark.parametrize("bad", [None, math.inf, math.nan])
def test_the_streamed_json_is_the_whole_documents_text(tmp_path, bad):
    """Over several chunks of calls, one of them with a non-finite error (spelled as a
    string, as to_json spells it)."""
    from netparity.report import json_report

    n = 2 * json_report._CALLS_CHUNK + 5
    r = CompareResult(calls=[_call(k, bad if (bad is not None and k == n - 3) else k / 7)
                             for k in range(n)], notes=["a \u00e9 note"])
    write_result(r, tmp_path / "r.json")
    whole = r.to_json(pairs=False)
    whole["pairs_file"] = "r.pairs.parquet"
    text = (tmp_path / "r.json").read_text()
    assert text == json.dumps(whole, allow_nan=False) + "\n"
    assert len(json.loads(text)["calls"]) == n
