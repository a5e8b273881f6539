"""Bad input at every boundary is one ``netparity: error:`` line and exit 2, never a traceback
(issue 17, items 5, 7, 8 and 9)."""

from __future__ import annotations

import json
import pickle
import sqlite3
import zipfile
from pathlib import Path

import numpy as np
import pytest

from netparity.ckpt import save_checkpoint

from .helpers import assert_one_line_error, run_cli
from .test_confined_reads import make_trace


def _unconstrained(out: Path) -> sqlite3.Connection:
    """The index of ``out`` with its table rebuilt without NOT NULL constraints (what a
    hand-made or damaged index may hold)."""
    db = sqlite3.connect(out / "rank0" / "index.sqlite")
    db.executescript("CREATE TABLE r2 AS SELECT * FROM records; DROP TABLE records; "
                     "ALTER TABLE r2 RENAME TO records;")
    return db


@pytest.mark.parametrize("sql, needle", [
    ("UPDATE records SET step = NULL", "bad step"),
    ("UPDATE records SET call = 'abc'", "bad call"),
    ("UPDATE records SET kind = NULL", "bad kind"),
    ("UPDATE records SET shape = 'not json'", "bad shape"),
    ("UPDATE records SET shape = '[-3]'", "bad shape"),
    ("UPDATE records SET shape = '[2.5]'", "bad shape"),
    ("UPDATE records SET extra = '{bad'", "bad extra"),
    ("UPDATE records SET s_mean = 'abc'", "bad s_mean"),
    ("UPDATE records SET offset = -1", "bad offset"),
])
def test_corrupt_index_rows_are_one_line(tmp_path, sql, needle):
    out = make_trace(tmp_path / "t")
    db = _unconstrained(out)
    db.execute(sql)
    db.commit()
    db.close()
    for argv in (("inspect", str(out)), ("export", str(out), "-o", str(tmp_path / "x.npz")),
                 ("compare", str(out), str(out)), ("align", str(out), str(out))):
        assert_one_line_error(run_cli(*argv), "corrupt trace index", needle)


@pytest.mark.parametrize("key, value, needle", [
    ("precision", [1, 2], "'precision' should be an object"),
    ("world_size", "two", "'world_size' should be an integer"),
    ("schema_version", "1", "schema_version is a str"),
])
def test_manifest_fields_of_the_wrong_type(tmp_path, key, value, needle):
    out = make_trace(tmp_path / "t")
    m = json.loads((out / "manifest.json").read_text())
    m[key] = value
    (out / "manifest.json").write_text(json.dumps(m))
    assert_one_line_error(run_cli("inspect", str(out)), needle)


def test_a_newer_index_schema_is_refused(tmp_path):
    out = make_trace(tmp_path / "t")
    db = sqlite3.connect(out / "rank0" / "index.sqlite")
    db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    assert_one_line_error(run_cli("inspect", str(out)), "schema version 99 is newer")


def test_command_line_ranges_and_tolerances(tmp_path):
    out = make_trace(tmp_path / "t")
    for argv, needle in (
        (("compare", str(out), str(out), "--steps", "0-99999999999"), "more than any trace"),
        (("align", str(out), str(out), "--steps", "0-99999999999"), "more than any trace"),
        (("compare", str(out), str(out), "--steps", "3-1"), "empty range"),
        (("compare", str(out), str(out), "--tol", "=nan,nan"), "finite"),
        (("compare", str(out), str(out), "--tol", "x.*=1e-3,inf"), "finite"),
        (("compare", str(out), str(out), "--rtol", "nan"), "finite"),
        (("align", str(out), str(out), "--steps", "5"), "no such step"),
        (("inspect", str(out), "--rank", "5"), "has ranks [0]"),
        (("inspect", str(out), "--step", "7"), "has steps 0"),
        (("export", str(out), "-o", str(tmp_path / "e.npz"), "--rank", "3"), "has ranks"),
    ):
        assert_one_line_error(run_cli(*argv), needle)
    p = run_cli("export", str(out), "-o", str(tmp_path / "e.npz"), "--kind", "bogus")
    assert p.returncode == 2 and "invalid choice: 'bogus'" in p.stderr
    assert "Traceback" not in p.stderr and "payload=" not in p.stderr


def test_outputs_that_cannot_be_written(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    assert_one_line_error(run_cli("run", "-o", str(f / "trace"), "--", "true"),
                          "cannot write the output --output there")
    out = make_trace(tmp_path / "t")
    assert_one_line_error(run_cli("export", str(out), "-o", str(f / "x.npz")), "x.npz")
    assert f.read_text() == "x"


def _torch_zip(p: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.ones(2)}, p)


@pytest.mark.parametrize("name, make, needle", [
    ("text.pth", lambda p: p.write_text("hello, these are not weights\n"), "text file"),
    ("config.pth", lambda p: p.write_text('{"lr": 0.1}'), "JSON file"),
    ("random.pth", lambda p: p.write_bytes(np.random.default_rng(0).bytes(4096)),
     "not a PyTorch checkpoint"),
    ("random-pickle.pth", lambda p: p.write_bytes(b"\x80" + np.random.default_rng(3).bytes(99)),
     "random-pickle.pth"),
    ("random.ckpt", lambda p: p.write_bytes(b"\x0a" + np.random.default_rng(1).bytes(999)),
     "not a valid MindSpore checkpoint"),
    ("random.safetensors", lambda p: p.write_bytes(np.random.default_rng(2).bytes(999)),
     "safetensors"),
    ("pickle.npz", lambda p: p.write_bytes(pickle.dumps({"w": [1, 2]})), "pickle"),
    ("inner-pickle.npz", lambda p: _npz_with_pickle(p), "pickle"),
    ("empty.pt", lambda p: p.write_bytes(b""), "not a PyTorch checkpoint"),
])
def test_checkpoints_with_misleading_names(tmp_path, name, make, needle):
    make(tmp_path / name)
    assert_one_line_error(run_cli("ckpt", "show", str(tmp_path / name)), needle)


def _npz_with_pickle(p: Path) -> None:
    with zipfile.ZipFile(p, "w") as z, z.open("w.npy", "w") as f:
        np.lib.format.write_array(f, np.array([{"a": 1}], dtype=object), allow_pickle=True)


def test_a_torch_zip_named_safetensors_is_read_as_what_it_is(tmp_path):
    _torch_zip(tmp_path / "w.safetensors")
    p = run_cli("ckpt", "show", str(tmp_path / "w.safetensors"))
    assert p.returncode == 0 and "torch" in p.stdout, p.stderr


def _ckpt_pair(tmp_path: Path) -> tuple[Path, Path]:
    src = tmp_path / "src.npz"
    save_checkpoint({f"{i}.weight": np.full(3, i, np.float32) for i in range(3)}, src)
    return src, tmp_path / "dst.npz"


def test_duplicate_mapping_targets_are_refused_naming_them(tmp_path):
    src, dst = _ckpt_pair(tmp_path)
    m = tmp_path / "map.json"
    m.write_text(json.dumps({"params": {"0.weight": "1.gamma", "1.weight": "1.gamma",
                                        "2.weight": "1.gamma"}}))
    p = run_cli("ckpt", "convert", str(src), str(dst), "--mapping", str(m))
    assert_one_line_error(p, "maps 3 names to '1.gamma'", "'0.weight'")
    assert not dst.exists()


def test_mapping_names_that_exist_nowhere_are_errors(tmp_path):
    src, dst = _ckpt_pair(tmp_path)
    for mapping, needle in (({"params": {"9.weight": "x"}}, "'9.weight'"),
                            ({"modules": {"encoder": "enc"}}, "'encoder'")):
        m = tmp_path / "map.json"
        m.write_text(json.dumps(mapping))
        for argv in (("ckpt", "convert", str(src), str(dst), "--mapping", str(m)),
                     ("ckpt", "map", str(src), str(src), "--mapping", str(m))):
            assert_one_line_error(run_cli(*argv), needle)
    assert not dst.exists()


def test_recheck_of_a_result_with_strings_for_numbers(tmp_path):
    from tests.safety.test_confined_reads import _write_net  # (same builder as compare's)

    write_net = _write_net()
    ref, cand = write_net(tmp_path / "ref"), write_net(tmp_path / "cand")
    res = tmp_path / "r.json"
    assert run_cli("compare", str(ref), str(cand), "--json", str(res)).returncode in (0, 1)

    def strings(x):  # type: ignore[no-untyped-def]
        if isinstance(x, dict):  # (the version stays a number: it is checked first)
            return {k: v if k.endswith("_version") else strings(v) for k, v in x.items()}
        if isinstance(x, list):
            return [strings(v) for v in x]
        return "many" if isinstance(x, (int, float)) and not isinstance(x, bool) else x

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(strings(json.loads(res.read_text()))))
    assert_one_line_error(run_cli("recheck", str(bad)), str(bad))


@pytest.mark.parametrize("sql, needle", [
    ("UPDATE records SET call = 'abc'", "bad call"),
    ("UPDATE records SET s_mean = 'abc'", "bad s_mean"),
    ("UPDATE records SET shape = '[-3]'", "bad shape"),
])
def test_corrupt_rows_found_through_the_columnar_copy(tmp_path, sql, needle):
    """An index with bad rows is not compacted (the copy would record a clean check_rows,
    which then does not scan the index again while the copy is current): one line naming
    the row, and every command that reads the trace still says which row is bad."""
    from netparity.errors import TraceError
    from netparity.trace import open_trace
    from netparity.trace.columnar import compact, store

    out = make_trace(tmp_path / "t")
    db = _unconstrained(out)
    db.execute(sql)
    db.commit()
    db.close()
    with pytest.raises(TraceError, match=f"{needle}.*not compacted"):
        compact(out)
    tr = open_trace(out)
    assert store(tr, 0) is None
    with pytest.raises(TraceError, match=needle):
        tr.check_rows()
    for argv in (("inspect", str(out)), ("export", str(out), "-o", str(tmp_path / "x.npz")),
                 ("compare", str(out), str(out)), ("align", str(out), str(out))):
        assert_one_line_error(run_cli(*argv), "corrupt trace index", needle)


def test_clean_copy_records_a_clean_check(tmp_path):
    """A compacted clean trace: the copy says check_rows found nothing; an index edited
    afterwards is checked by SQL again (the copy is no longer current)."""
    from netparity.errors import TraceError
    from netparity.trace import open_trace
    from netparity.trace.columnar import compact, store

    out = make_trace(tmp_path / "t")
    compact(out)
    tr = open_trace(out)
    st = store(tr, 0)
    assert st is not None and st.bad_row() == (True, None)
    tr.check_rows()
    tr.close()
    db = _unconstrained(out)
    db.execute("UPDATE records SET kind = NULL")
    db.commit()
    db.close()
    tr = open_trace(out)
    assert store(tr, 0) is None
    with pytest.raises(TraceError, match="bad kind"):
        tr.check_rows()
