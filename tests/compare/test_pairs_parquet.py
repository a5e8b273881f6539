"""A saved comparison keeps its per-pair table out of the JSON, in Apache Parquet beside it
(netparity.report.pairs_parquet): DuckDB reads it, recheck and view read the pairs back
exactly, and a pair file that is not what it should be is a one-line error."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

import netparity
from netparity.cli import main
from netparity.compare.results import CompareResult
from netparity.errors import UsageError
from netparity.report.json_report import read_json, write_result


def _same(a, b):
    """Two pair lists equal field by field (NaN equal to NaN)."""
    def norm(p):
        return json.dumps(dataclasses.asdict(p), sort_keys=True, default=str).replace(
            "NaN", "nan")
    return [norm(p) for p in a] == [norm(p) for p in b]


def test_json_names_its_pair_table_and_reads_back(net, tmp_path):
    ref, cand = net(), net(noise=1e-4, noise_seed=3)
    res = netparity.compare(str(ref), str(cand), level="both")
    want = list(res.pairs)
    assert want
    out = tmp_path / "r.json"
    write_result(res, out)
    saved = json.loads(out.read_text())
    assert saved["pairs"] == [] and saved["pairs_file"] == "r.pairs.parquet"
    back = read_json(out)
    assert _same(back.pairs, want) and back.status == res.status
    assert back.counts() == res.counts()
    duckdb = pytest.importorskip("duckdb")
    n_fail, worst = duckdb.connect().execute(
        "SELECT count(*) FILTER (status = 'fail'), max(error) FROM read_parquet(?)",
        [str(tmp_path / "r.pairs.parquet")]).fetchone()
    assert n_fail == sum(p.status == "fail" for p in want)
    assert math.isclose(worst, max(p.error() for p in want))


def test_cli_json_and_recheck_use_the_pair_table(net, tmp_path):
    ref, cand = net(), net(noise=1e-4, noise_seed=3)
    out = tmp_path / "r.json"
    assert main(["compare", str(ref), str(cand), "--json", str(out), "-q"]) == 1
    assert (tmp_path / "r.pairs.parquet").is_file()
    assert main(["recheck", str(out), "--atol", "1", "--rtol", "1", "-q"]) == 0
    (tmp_path / "r.pairs.parquet").unlink()
    with pytest.raises(UsageError, match="no such pair table"):
        read_json(out)


@pytest.mark.parametrize("name", ["../x.parquet", "/etc/passwd", "", 3])
def test_a_pairs_file_outside_the_results_folder_is_refused(tmp_path, name):
    out = tmp_path / "r.json"
    write_result(CompareResult(), out)
    saved = json.loads(out.read_text())
    saved["pairs_file"] = name
    out.write_text(json.dumps(saved))
    with pytest.raises(UsageError, match="pairs_file"):
        read_json(out)


def test_a_forged_pair_table_is_refused(net, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "r.json"
    write_result(netparity.compare(str(net()), str(net()), level="module"), out)
    p = tmp_path / "r.pairs.parquet"
    t = pq.read_table(p)
    t = t.set_column(t.schema.get_field_index("step"), "step",
                     pa.array(["x"] * t.num_rows))
    pq.write_table(t, p)
    with pytest.raises(UsageError, match="expected columns"):
        read_json(out)


def test_streamed_csv_equals_the_rendered_text(net, tmp_path):
    """write_csv streams the rows to the file; the bytes are render_csv's (every section)."""
    from netparity.report.csv_report import render_csv, write_csv
    from netparity.report.sections import sections_for

    res = netparity.compare(str(net()), str(net(noise=1e-4, noise_seed=3)), level="both")
    write_csv(res, tmp_path / "r.csv")
    text = (tmp_path / "r.csv").read_bytes().decode("utf-8")
    assert text == render_csv(sections_for(res)) and text.count("\n") > len(res.pairs)
