"""Many ranks compared in parallel (issue 33 item 4): ``compare`` without ``--rank`` compares
every shared rank on its own -- in this process (``--workers 1``), a pool of processes
(``--workers N``) or a Dask cluster (``--scheduler``) -- and merges them into one verdict that
is the same whatever ran them (:mod:`netparity.analyzers.ranks`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.safety.helpers import SRC, assert_one_line_error, run_cli

from netparity.analyzers.ranks import compare_ranks
from netparity.cli import main
from netparity.errors import TraceError

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
from compare_ranks import make, write_side  # noqa: E402


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ref and cand of 4 ranks x 40 module calls, the candidate's rank 2 wrong from
    ``layers.10`` on; ``three``: the candidate without its rank 3; ``bad``: rank 1's index
    corrupt."""
    root = tmp_path_factory.mktemp("ranks")
    make(root, 4, 40, bad=(2, 10))
    write_side(root / "three", 3, 40, bad=(2, 10))
    shutil.copytree(root / "cand", root / "bad")
    for f in (root / "bad" / "rank1").glob("index.*"):
        data = bytearray(f.read_bytes())
        data[100:2000] = b"\xff" * 1900
        f.write_bytes(bytes(data))
    return root


def _json(capsys: pytest.CaptureFixture[str], tmp: Path, *argv: str) -> tuple[int, dict[str, Any]]:
    out = tmp / f"r{len(list(tmp.glob('*.json')))}.json"
    rc = main(["compare", *argv, "-q", "--json", str(out)])
    capsys.readouterr()
    got = json.loads(out.read_text())
    got.pop("pairs_file", None)  # named after the JSON file
    return rc, got


@pytest.mark.parametrize("cand", ["cand", "ref", "three"])
def test_workers_1_and_2_give_the_same_verdict(traces: Path, tmp_path: Path, cand: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    ref, c = str(traces / "ref"), str(traces / cand)
    rc1, one = _json(capsys, tmp_path, ref, c, "--workers", "1")
    rc2, two = _json(capsys, tmp_path, ref, c, "--workers", "2")
    assert (rc1, one) == (rc2, two)
    assert [s["rank"] for s in one["ranks"]] == ([0, 1, 2] if cand == "three" else [0, 1, 2, 3])
    if cand == "ref":
        assert rc1 == 0 and one["status"] == "pass" and one["first_divergence"] is None
        assert {s["status"] for s in one["ranks"]} == {"pass"}
        return
    # the first divergent rank, step and module; the ranks that agree
    fd = one["first_divergence"]
    assert rc1 == 1 and one["status"] == "fail"
    assert (fd["rank"], fd["step"], fd["module"], fd["verdict"]) == (2, 0, "layers.10",
                                                                     "introduced")
    assert [s["status"] for s in one["ranks"]] == ["pass", "pass", "fail", "pass"][
        :len(one["ranks"])]
    assert one["settings"]["rank"] == 2 and one["ranks"][2]["first_divergence"]["module"] == \
        "layers.10"
    assert any("rank(s) 2 diverge" in n for n in one["notes"])
    if cand == "three":  # a rank the candidate lacks: named, as for one rank
        assert one["incomplete"] == ["candidate has ranks 0-2 of 0-3 (--rank N compares one)"]


def test_missing_rank_alone_is_incomplete_not_pass(traces: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    three = tmp_path / "three"
    write_side(three, 3, 40)  # agrees with ref on ranks 0-2, lacks rank 3
    for w in ("1", "2"):
        rc, got = _json(capsys, tmp_path, str(traces / "ref"), str(three), "--workers", w)
        assert rc == 1 and got["status"] == "incomplete", got["status"]
        assert {s["status"] for s in got["ranks"]} == {"pass"}


def test_rank_named_still_compares_that_rank_alone(traces: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    rc, got = _json(capsys, tmp_path, str(traces / "ref"), str(traces / "cand"), "--rank", "1")
    assert rc == 0 and "ranks" not in got and got["settings"]["rank"] == 1


def test_dask_local_cluster_gives_the_same_result(traces: Path) -> None:
    distributed = pytest.importorskip("distributed")
    ref, cand = str(traces / "ref"), str(traces / "cand")
    with distributed.LocalCluster(n_workers=2, processes=False, threads_per_worker=1,
                                  dashboard_address=None) as cl:
        by_dask = compare_ranks(ref, cand, scheduler=cl.scheduler_address).to_json()
    assert by_dask == compare_ranks(ref, cand, workers=1).to_json()
    assert by_dask["first_divergence"]["rank"] == 2


def test_a_corrupt_rank_is_one_error_and_no_hung_pool(traces: Path) -> None:
    with pytest.raises(TraceError, match="rank1"):  # raised in rank 1's worker
        compare_ranks(str(traces / "ref"), str(traces / "bad"), workers=2)
    p = run_cli("compare", str(traces / "ref"), str(traces / "bad"), "--workers", "2",
                timeout=120)
    assert_one_line_error(p, "rank1")


def test_scheduler_without_dask_is_one_line_error(traces: Path) -> None:
    code = ("import sys; sys.modules['distributed'] = None; from netparity.cli import main; "
            "raise SystemExit(main(sys.argv[1:]))")
    p = subprocess.run([sys.executable, "-c", code, "compare", str(traces / "ref"),
                        str(traces / "cand"), "--scheduler", "tcp://127.0.0.1:9"],
                       capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"})
    assert_one_line_error(p, "--scheduler needs Dask")


def test_bad_workers_is_one_line_error(traces: Path) -> None:
    p = run_cli("compare", str(traces / "ref"), str(traces / "cand"), "--workers", "0")
    assert_one_line_error(p, "--workers")


def test_benchmark_runs_small() -> None:
    p = subprocess.run([sys.executable, str(BENCH / "compare_ranks.py"), "--ranks", "8",
                        "--ops", "200"], capture_output=True, text=True, timeout=300,
                       env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-2000:]
    assert "speed-up workers=2" in p.stdout and "verdicts: [('fail', 7, 'layers.100')]" in \
        p.stdout, p.stdout


def test_json_of_workers_1_and_2_is_byte_identical(traces: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The lead rank (2, diverging) comes back from its worker: the same bytes, pairs
    file included, as when every rank is compared in this process."""
    out = {}
    for w in ("1", "2"):
        d = tmp_path / w
        d.mkdir()
        assert main(["compare", str(traces / "ref"), str(traces / "cand"), "-q", "--workers",
                     w, "--json", str(d / "r.json")]) == 1
        capsys.readouterr()
        out[w] = {p.name: p.read_bytes() for p in sorted(d.iterdir())}
    assert out["1"] == out["2"] and len(out["1"]) == 2, sorted(out["1"])
    assert json.loads(out["1"]["r.json"])["settings"]["rank"] == 2


def test_no_rank_is_compared_twice(traces: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lead rank's details are those of its one comparison (no second run after the
    others: it was a sequential tail that bounded the speed-up of --workers)."""
    from netparity.analyzers import divergence

    seen: list[int] = []
    real = divergence.compare

    def counted(*a: Any, **k: Any) -> Any:
        seen.append(k["rank"])
        return real(*a, **k)

    monkeypatch.setattr(divergence, "compare", counted)
    res = compare_ranks(str(traces / "ref"), str(traces / "cand"), workers=1)
    assert sorted(seen) == [0, 1, 2, 3] and res.settings["rank"] == 2


@given(st.lists(st.tuples(st.sampled_from(["pass", "unknown", "warn", "fail"]),
                          st.one_of(st.none(), st.integers(0, 3))), min_size=1, max_size=8))
def test_the_lead_rank_always_sends_its_result(spec: list[tuple[str, int | None]]) -> None:
    """Whatever the ranks find, the lead rank is one that sends its result back."""
    from netparity.analyzers.ranks import _lead_key, _may_lead

    sums = [{"rank": r, "pair_status": ps, "first_step": fs} for r, (ps, fs) in enumerate(spec)]
    assert _may_lead(min(sums, key=_lead_key), 0)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_corrupt_row_is_found_where_its_rank_is_compared(traces: Path, tmp_path: Path,
                                                           workers: str) -> None:
    """Each rank's rows are checked by the task comparing it (in parallel, not all ranks in
    this process first): a bad value in rank 1's index is still one line naming it."""
    import sqlite3

    bad = tmp_path / "badrow"
    shutil.copytree(traces / "cand", bad)
    db = sqlite3.connect(bad / "rank1" / "index.sqlite")
    db.executescript("CREATE TABLE r2 AS SELECT * FROM records; DROP TABLE records; "
                     "ALTER TABLE r2 RENAME TO records; UPDATE records SET s_mean = 'abc';")
    db.close()
    p = run_cli("compare", str(traces / "ref"), str(bad), "--workers", workers, timeout=120)
    assert_one_line_error(p, "rank1", "corrupt trace index", "bad s_mean")
