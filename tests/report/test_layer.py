"""The report layer: sections rendered by every output, one formatter, one atomic JSON writer,
the console width policy and progress that changes nothing."""

from __future__ import annotations

import csv
import io
import json
import os

import pytest
from rich.console import Console

import netparity
from netparity.analyzers import divergence
from netparity.compare.results import CompareResult
from netparity.errors import UsageError
from netparity.report import fmt, render
from netparity.report import sections as sec
from netparity.report.csv_report import write_csv
from netparity.report.json_report import write_json
from netparity.report.progress import RichProgress, Silent, progress_for
from netparity.report.terminal import PIPE_WIDTH, make_console


def test_fmt_is_the_one_number_formatter():
    assert [fmt(x) for x in (None, 7, 0.0, 2.5e-9, float("inf"), float("nan"))] == [
        "", "7", "0", "2.5e-09", "inf", "nan"]
    assert fmt(None, none="-") == "-" and fmt(1 / 3, 4) == "0.3333"


def test_write_json_is_atomic_and_leaves_no_temporary(tmp_path, capsys):
    p = tmp_path / "sub" / "r.json"
    write_json({"a": 1}, p)
    write_json({"a": 2, "s": {3}}, p)  # replaces; sets become lists
    assert json.loads(p.read_text()) == {"a": 2, "s": [3]}
    assert os.listdir(p.parent) == ["r.json"]
    write_json({"b": 1}, "-")
    assert json.loads(capsys.readouterr().out) == {"b": 1}
    with pytest.raises(UsageError, match="cannot encode JSON"):
        write_json({"x": float("nan")}, p, strict=True)
    assert json.loads(p.read_text())["a"] == 2  # the old file survived the failed write
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="cannot write JSON"):
        write_json({}, tmp_path / "file" / "r.json")


def test_a_registered_section_reaches_every_output(net, tmp_path):
    r = netparity.compare(net(), net(perturb={("net.l2", "forward"): 1e-2}))

    @sec.section("CompareResult", "test-extra")
    def extra(result, **_):
        return sec.Section("test-extra", title="Extra", headline="extra headline",
                           status="warn", rows=[("pairs", len(result.pairs))],
                           blocks=[sec.Table("t", ["a", "b"], [[1, 2.5]])])

    try:
        j = render(r, "json")
        keys = [s["key"] for s in j["sections"]]
        assert keys[0] == "verdict" and "test-extra" in keys
        html = render(r, "html")
        assert "extra headline" in html and "<td>2.5</td>" in html
        con = Console(record=True, width=120)
        render(r, "terminal", console=con)
        text = con.export_text()
        assert "extra headline" in text and "pairs" in text
        assert "a,b\r\n1,2.5" in render(r, "csv")
    finally:
        sec._REGISTRY["CompareResult"] = [
            e for e in sec._REGISTRY["CompareResult"] if e[0] != "test-extra"]
    assert "test-extra" not in sec.section_names("CompareResult")
    # without it, the CSV is exactly one row per pair
    p = tmp_path / "r.csv"
    write_csv(r, p)
    assert len(list(csv.DictReader(p.open()))) == len(r.all_pairs())


def test_piped_output_is_wide_and_follows_columns(monkeypatch):
    pipe = io.StringIO()
    monkeypatch.delenv("COLUMNS", raising=False)
    assert make_console(pipe).width == PIPE_WIDTH
    monkeypatch.setenv("COLUMNS", "200")
    assert make_console(pipe).width == 200
    monkeypatch.setenv("COLUMNS", "junk")
    assert make_console(pipe).width == PIPE_WIDTH


def test_progress_is_silent_when_piped_or_quiet_and_changes_no_result(net):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert isinstance(progress_for(stream=io.StringIO()), Silent)
    assert isinstance(progress_for(True, stream=Tty()), Silent)
    assert isinstance(progress_for(stream=Tty()), RichProgress)
    ref, cand = net(), net(perturb={("net.l3", "backward"): 1e-2})
    out = Tty()
    bar = RichProgress(Console(file=out, force_terminal=True, width=100), transient=False)
    shown = divergence.compare(ref, cand, progress=bar)
    plain = divergence.compare(ref, cand)
    assert shown.to_json() == plain.to_json()
    text = out.getvalue()
    assert "judge tensor pairs" in text and f"{len(shown.all_pairs())}/" in text.replace(
        "\x1b", " ")


def test_empty_result_renders_everywhere():
    r = CompareResult()
    assert render(r, "html").startswith("<!DOCTYPE html>")
    assert render(r, "json")["sections"][0]["headline"].startswith("PASS")
    assert render(r, "csv").startswith("status,kind,direction")
    with pytest.raises(UsageError, match="unknown report output"):
        render(r, "pdf")
