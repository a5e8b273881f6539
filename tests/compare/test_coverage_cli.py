"""No verdict on missing evidence (DESIGN, issues 28/29): steps, ranks, levels or directions one
side lacks, or a capture that has not finished, make compare's verdict INCOMPLETE (exit 1),
never PASS; comparing, aligning, rechecking or judging nothing is an error (exit 2); every
subcommand that reads a trace checks its index rows first; a mapping file naming what the traces
do not hold is refused. Each case through the CLI: its first line and its exit status."""

from __future__ import annotations

import argparse
import ast
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from netparity.cli import build_parser, main
from netparity.compare.results import CompareResult
from netparity.trace import Record, TraceWriter


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    rc = main(list(argv))
    got = capsys.readouterr()
    return rc, got.out.splitlines(), got.err


def _one_line_error(rc: int, err: str, *needles: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2, (rc, err)
    assert len(lines) == 1 and lines[0].startswith("netparity: error: "), err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def _sql(trace: Path, sql: str, rank: int = 0) -> None:
    db = sqlite3.connect(trace / f"rank{rank}" / "index.sqlite")
    db.execute(sql)
    db.commit()
    db.close()


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from conftest import write_net

    root = tmp_path_factory.mktemp("coverage")
    out = {"ref": write_net(root / "ref", n=3, size=16, steps=6),
           "short": write_net(root / "short", n=3, size=16, steps=2),
           "bad": write_net(root / "bad", n=3, size=16, steps=2,
                            perturb={("net.l1", "forward"): 0.1}),
           "empty": write_net(root / "empty", n=3, size=16, steps=0)}
    # a candidate that stopped in step 1's backward pass (its records never written)
    cut = root / "cut"
    write_net(cut, n=3, size=16, steps=2)
    _sql(cut, "DELETE FROM records WHERE step = 1 AND direction != 'forward'")
    out["cut"] = cut
    # a trace whose writer was killed: its write-ahead log is left next to the index
    killed = root / "killed"
    write_net(root / "tmp", n=3, size=16, steps=6)
    db = sqlite3.connect(root / "tmp" / "rank0" / "index.sqlite")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("INSERT OR REPLACE INTO meta VALUES ('x', 'y')")
    db.commit()
    shutil.copytree(root / "tmp", killed)  # (copied while the log holds the commit)
    db.close()
    assert (killed / "rank0" / "index.sqlite-wal").stat().st_size > 0
    out["killed"] = killed
    # a profile-only trace (timing records) and two ranks of one run
    with TraceWriter(root / "prof") as w:
        w.add(Record(kind="timing", op="step", dtype="float64", shape=(), step=0))
    out["prof"] = root / "prof"
    two = root / "two"
    shutil.copytree(out["ref"], two)
    shutil.copytree(two / "rank0", two / "rank1")
    out["two"] = two
    return out


def test_a_candidate_with_fewer_steps_is_incomplete_not_pass(traces, capsys, tmp_path):
    ref, short = str(traces["ref"]), str(traces["short"])
    out = tmp_path / "r.json"
    rc, lines, _ = _run(capsys, "compare", ref, short, "-q", "--json", str(out))
    assert rc == 1
    assert lines[0].startswith("INCOMPLETE: candidate has steps 0-1 of 0-5"), lines[:3]
    saved = json.loads(out.read_text())
    assert saved["status"] == "incomplete" and saved["passed"] is False
    assert saved["incomplete"] == ["candidate has steps 0-1 of 0-5"]
    assert saved["coverage"]["ref"]["steps"] == [0, 1, 2, 3, 4, 5]
    assert saved["coverage"]["cand"]["steps"] == [0, 1]
    # --steps narrows the comparison to what both hold: a verdict again
    rc, lines, _ = _run(capsys, "compare", ref, short, "-q", "--steps", "0-1")
    assert (rc, lines[0][:5]) == (0, "PASS:")
    # the saved result stays incomplete when rechecked
    rc, lines, _ = _run(capsys, "recheck", str(out), "-q")
    assert rc == 1 and lines[0].startswith("INCOMPLETE: candidate has steps 0-1 of 0-5")


def test_a_divergence_in_the_common_steps_is_still_fail_and_says_incomplete(traces, capsys):
    rc, lines, _ = _run(capsys, "compare", str(traces["ref"]), str(traces["bad"]), "-q")
    assert rc == 1
    assert lines[0].startswith("FAIL: the runs diverge"), lines[:3]
    assert lines[1] == "INCOMPLETE: candidate has steps 0-1 of 0-5", lines[:3]


def test_directions_one_side_lacks_are_incomplete(traces, capsys):
    rc, lines, _ = _run(capsys, "compare", str(traces["short"]), str(traces["cut"]), "-q")
    assert rc == 1
    assert lines[0].startswith("INCOMPLETE: candidate has no backward"), lines[:3]
    assert "at step 1" in lines[0]
    # --steps does not hide a gap inside the steps named
    rc, lines, _ = _run(capsys, "compare", str(traces["short"]), str(traces["cut"]), "-q",
                        "--steps", "1")
    assert rc == 1 and lines[0].startswith("INCOMPLETE: candidate has no backward")
    rc, lines, _ = _run(capsys, "compare", str(traces["short"]), str(traces["cut"]), "-q",
                        "--steps", "0")
    assert (rc, lines[0][:5]) == (0, "PASS:")


def test_ranks_one_side_lacks_are_incomplete_unless_rank_is_named(traces, capsys):
    rc, lines, _ = _run(capsys, "compare", str(traces["ref"]), str(traces["two"]), "-q")
    assert rc == 1 and lines[0].startswith("INCOMPLETE: reference has ranks 0 of 0-1"), lines[:2]
    rc, lines, _ = _run(capsys, "compare", str(traces["ref"]), str(traces["two"]), "-q",
                        "--rank", "0")
    assert (rc, lines[0][:5]) == (0, "PASS:")


def test_a_level_neither_trace_holds_is_incomplete(traces, capsys):
    """Issue 28's done-when: an op-level compare of module-level traces exits 1 with the
    reason on the first line (it printed PASS once; then it was a usage error, exit 2)."""
    rc, lines, err = _run(capsys, "compare", str(traces["ref"]), str(traces["ref"]), "-q",
                          "--level", "op")
    assert rc == 1 and not err.strip(), err
    assert lines[0].startswith("INCOMPLETE: neither trace has op-level records (they hold "
                               "module level); capture with level='op'"), lines[:3]


def test_a_level_one_side_lacks_is_incomplete(traces, capsys, tmp_path):
    ops = tmp_path / "ops"
    shutil.copytree(traces["ref"], ops)
    _sql(ops, "UPDATE records SET kind = 'op' WHERE kind = 'module' AND step = 0 "
              "AND module = 'net.l0'")
    rc, lines, _ = _run(capsys, "compare", str(traces["ref"]), str(ops), "-q", "--level", "both")
    assert rc == 1 and lines[0].startswith("INCOMPLETE: "), lines[:3]
    assert any("reference has no forward op records at step 0" in ln for ln in lines[:4])


def test_a_capture_whose_writer_was_killed_is_incomplete(traces, capsys):
    rc, lines, _ = _run(capsys, "compare", str(traces["ref"]), str(traces["killed"]), "-q")
    assert rc == 1
    assert lines[0].startswith("INCOMPLETE: candidate capture has not finished: rank 0 was not "
                               "closed cleanly"), lines[:2]


def test_a_capture_still_being_written_is_incomplete(traces, capsys, tmp_path, monkeypatch):
    live = tmp_path / "live"
    shutil.copytree(traces["ref"], live)
    run_id = json.loads((live / "manifest.json").read_text())["run_id"]
    monkeypatch.setenv("NETPARITY_RUN_ID", run_id)  # rank 1 of the same run, still writing
    with TraceWriter(live, rank=1) as w:
        w.add(Record(kind="loss", op="loss", dtype="float32", shape=(), step=0))
        w.flush()
        rc, lines, _ = _run(capsys, "compare", str(traces["ref"]), str(live), "-q")
        assert rc == 1 and lines[0].startswith("INCOMPLETE: "), lines[:3]
        assert any("candidate capture has not finished: rank 1 is still being written" in ln
                   for ln in lines[:4]), lines[:4]


def test_align_with_an_empty_side_does_not_pass(traces, capsys):
    rc, _, err = _run(capsys, "align", str(traces["ref"]), str(traces["empty"]))
    _one_line_error(rc, err, "nothing to align", str(traces["empty"]))
    rc, lines, _ = _run(capsys, "align", str(traces["ref"]), str(traces["short"]))
    assert rc == 1 and lines[0] == "INCOMPLETE: candidate has steps 0-1 of 0-5", lines[:2]
    rc, lines, _ = _run(capsys, "align", str(traces["ref"]), str(traces["short"]), "--steps",
                        "0-1")
    assert rc == 0 and lines[0].startswith("align ")


def test_recheck_of_a_result_with_no_pairs_is_an_error(capsys, tmp_path):
    p = tmp_path / "empty.json"
    p.write_text(json.dumps(CompareResult().to_json()))
    rc, _, err = _run(capsys, "recheck", str(p), "-q")
    _one_line_error(rc, err, "nothing to recheck")


@pytest.mark.parametrize("which", ["empty", "prof"])
def test_numerics_of_nothing_is_an_error_not_healthy(traces, capsys, which):
    rc, _, err = _run(capsys, "numerics", str(traces[which]))
    _one_line_error(rc, err, "nothing to judge", str(traces[which]))
    # inspect still summarises such a trace (with no numerics verdict)
    rc, lines, _ = _run(capsys, "inspect", str(traces[which]))
    assert rc == 0 and not any("HEALTHY" in ln for ln in lines)


#: every subcommand that reads a trace, with the arguments that make it read ``T``
TRACE_COMMANDS = {
    "inspect": ["inspect", "T"],
    "export": ["export", "T", "-o", "OUT.npz"],
    "align": ["align", "T", "T"],
    "compare": ["compare", "T", "T", "-q"],
    "numerics": ["numerics", "T"],
    "perf": ["perf", "T"],
    "precision": ["precision", "T"],
    "view": ["view", "T", "T", "-o", "OUT.html"],
}


def test_every_subcommand_that_reads_a_trace_is_listed_here():
    """The subcommands with a positional trace argument (its help says "trace") are exactly
    those the row check below runs: a new one must be added there."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    takes = {name for name, p in sub.choices.items()
             if any("trace" in (a.help or "") for a in p._actions if not a.option_strings)}
    assert takes == set(TRACE_COMMANDS)


def test_only_check_traces_opens_traces_in_the_cli():
    """Every subcommand opens its traces through ``cli._common.check_traces`` (which checks
    every index row), so none can skip the check."""
    cli = Path(__import__("netparity.cli", fromlist=["x"]).__file__).parent
    for path in sorted(cli.glob("*.py")):
        if path.name == "_common.py":
            continue
        names = {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(ast.parse(
            path.read_text())) if isinstance(n, (ast.Name, ast.Attribute))}
        assert not names & {"open_trace", "Trace"}, f"{path.name} opens a trace itself"


@pytest.mark.parametrize("column", ["step", "kind", "dtype", "seq"])
@pytest.mark.parametrize("command", sorted(TRACE_COMMANDS))
def test_every_subcommand_refuses_a_null_index_row(traces, capsys, tmp_path, command, column):
    t = tmp_path / "t"
    shutil.copytree(traces["short"], t)
    (t / "rank0" / "index.columns.npz").unlink(missing_ok=True)
    # (the table rebuilt without its NOT NULL constraints: what a hand-made index may hold)
    db = sqlite3.connect(t / "rank0" / "index.sqlite")
    db.executescript("CREATE TABLE r2 AS SELECT * FROM records; DROP TABLE records; "
                     "ALTER TABLE r2 RENAME TO records;"
                     f"UPDATE records SET {column} = NULL WHERE seq = (SELECT max(seq) FROM "
                     "records);")
    db.close()
    argv = [str(t) if a == "T" else str(tmp_path / a) if a.startswith("OUT.") else a
            for a in TRACE_COMMANDS[command]]
    rc, _, err = _run(capsys, *argv)
    _one_line_error(rc, err, "corrupt trace index")


def test_a_mapping_naming_what_the_traces_lack_is_refused(traces, capsys, tmp_path):
    bad = tmp_path / "map.json"
    bad.write_text(json.dumps({"params": {"net.l0.weigth": "net.l0.weight"},
                               "modules": {"net.l9": "net.l1"}}))
    ref, short = str(traces["short"]), str(traces["short"])
    for cmd in (["compare", ref, short, "-q"], ["align", ref, short]):
        rc, _, err = _run(capsys, *cmd, "--mapping", str(bad))
        _one_line_error(rc, err, "'net.l0.weigth'", "'net.l9'", "do not hold")
    good = tmp_path / "good.yaml"
    good.write_text("params: {net.l0.weight: net.l0.weight}\nmodules: {net: net}\n")
    rc, lines, _ = _run(capsys, "compare", ref, short, "-q", "--mapping", str(good))
    assert (rc, lines[0][:5]) == (0, "PASS:")
