"""Property-based attacks (hypothesis): malformed manifests, index rows, shards, checkpoints and
mapping files. Whatever the bytes, a command either succeeds or fails with exactly one
``netparity: error:`` line and exit 2 -- never a traceback -- and no file outside the requested
output changes (issue 17, "Tests that attack").

Commands run in-process through :func:`netparity.cli.main` (a child process per example would
cost seconds); each property keeps to a few seconds (small ``max_examples``, no deadline: the
first example pays for imports).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sqlite3
import tempfile
from pathlib import Path

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from netparity.ckpt import load_checkpoint, save_checkpoint  # noqa: E402
from netparity.cli import main  # noqa: E402
from netparity.errors import NetparityError  # noqa: E402
from netparity.mapfile import load_mapping  # noqa: E402

from .helpers import snapshot  # noqa: E402
from .test_confined_reads import make_trace  # noqa: E402

FAST = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# JSON values of every kind, nested a little
JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70)
                    | st.floats(allow_nan=False) | st.text(max_size=12),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


def cli(*argv: str) -> tuple[int, list[str]]:
    """Run the CLI in-process: (exit status, stderr lines). Any exception escaping ``main`` is
    a traceback a user would see: the test fails on it."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(list(argv))
    return rc, [ln for ln in err.getvalue().splitlines() if ln.strip()]


def assert_ok_or_one_line(rc: int, lines: list[str]) -> None:
    """Success, a verdict (``compare``: 1 = the runs differ) or one error line with exit 2."""
    if rc in (0, 1):
        return
    assert rc == 2, (rc, lines)
    assert len(lines) == 1 and lines[0].startswith("netparity: error: "), lines


def _commands_leave_inputs_alone(work: Path, *argvs: tuple[str, ...]) -> None:
    """Each command succeeds or fails with one line, and nothing under ``work`` but the
    requested output ``o.npz`` changes."""
    before = snapshot(work)
    for argv in argvs:
        assert_ok_or_one_line(*cli(*argv))
    after = snapshot(work)
    after.pop("o.npz", None)
    assert after == before


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One good trace, copied for each example."""
    return make_trace(tmp_path_factory.mktemp("base") / "t")


def _fresh(base: Path) -> tuple[Path, Path]:
    work = Path(tempfile.mkdtemp(prefix="netparity-prop-"))
    shutil.copytree(base, work / "t")
    return work, work / "t"


@FAST
@given(manifest=JSON | st.fixed_dictionaries({"schema_version": JSON}, optional={
    "run_id": JSON, "precision": JSON, "world_size": JSON, "framework": JSON, "device": JSON,
    "capture": JSON, "seeds": JSON}))
def test_malformed_manifests(base, manifest):
    work, tr = _fresh(base)
    try:
        (tr / "manifest.json").write_text(json.dumps(manifest))
        _commands_leave_inputs_alone(work, ("inspect", str(tr)),
                                     ("export", str(tr), "-o", str(work / "o.npz")))
    finally:
        shutil.rmtree(work)


COLUMNS = ("seq", "step", "rank", "kind", "op", "module", "call", "event", "direction", "role",
           "dtype", "shape", "numel", "s_mean", "s_nan", "shard", "offset", "nbytes", "extra")
VALUES = (st.none() | st.integers(-2**63, 2**63 - 1) | st.floats() | st.text(max_size=20)
          | st.binary(max_size=8) | JSON.map(json.dumps)
          | st.lists(st.integers(-5, 2**40), max_size=4).map(json.dumps))


@FAST
@given(column=st.sampled_from(COLUMNS), value=VALUES, row=st.integers(0, 2))
def test_malformed_index_rows(base, column, value, row):
    work, tr = _fresh(base)
    try:
        db = sqlite3.connect(tr / "rank0" / "index.sqlite")
        db.executescript("CREATE TABLE r2 AS SELECT * FROM records; DROP TABLE records; "
                         "ALTER TABLE r2 RENAME TO records;")
        db.execute(f'UPDATE records SET "{column}" = ? WHERE rowid = ?', (value, row + 1))
        db.commit()
        db.close()
        _commands_leave_inputs_alone(work, ("inspect", str(tr)),
                                     ("export", str(tr), "-o", str(work / "o.npz")),
                                     ("compare", str(tr), str(base)))
    finally:
        shutil.rmtree(work)


@FAST
@given(data=st.data())
def test_damaged_shards(base, data):
    work, tr = _fresh(base)
    try:
        shard = tr / "rank0" / "tensors-00000.safetensors"
        raw = bytearray(shard.read_bytes())
        how = data.draw(st.sampled_from(["flip", "truncate", "random", "swap"]))
        if how == "flip":  # bits flipped in the payloads (the part reads touch)
            for _ in range(data.draw(st.integers(1, 8))):
                i = data.draw(st.integers(len(raw) - 3 * 64 * 4, len(raw) - 1))
                raw[i] ^= 1 << data.draw(st.integers(0, 7))
        elif how == "truncate":
            raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
        elif how == "random":
            raw = bytearray(data.draw(st.binary(min_size=0, max_size=4096)))
        else:  # another trace's shard, same layout, other values
            other = make_trace(work / "other", value=data.draw(st.floats(2, 9)))
            raw = bytearray((other / "rank0" / "tensors-00000.safetensors").read_bytes())
        shard.write_bytes(bytes(raw))
        before = snapshot(work)
        rc, lines = cli("export", str(tr), "-o", str(work / "o.npz"))
        assert_ok_or_one_line(rc, lines)
        if rc == 0:  # then every value read is the captured one, bit for bit
            with np.load(work / "o.npz") as z:
                got = sorted(float(z[k][0]) for k in z.files)
            assert got == [1.0, 2.0, 3.0], got
        else:
            assert any(w in lines[0] for w in ("corrupt", "truncated", "missing")), lines
        after = snapshot(work)
        after.pop("o.npz", None)
        assert after == before
    finally:
        shutil.rmtree(work)


SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".npz", ".tar", "")


@pytest.fixture(scope="module")
def good_ckpts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    d = tmp_path_factory.mktemp("ck")
    arrays = {"fc.weight": np.arange(6, dtype=np.float32).reshape(2, 3),
              "fc.bias": np.zeros(2, np.float32)}
    out = {}
    for s in (".pt", ".safetensors", ".ckpt", ".npz"):
        save_checkpoint(arrays, d / f"w{s}", use_mindspore=False)
        out[s] = (d / f"w{s}").read_bytes()
    return out


@FAST
@given(data=st.data())
def test_malformed_checkpoints(good_ckpts, data):
    kind = data.draw(st.sampled_from(["random", "mutated"]))
    if kind == "random":
        blob = data.draw(st.binary(max_size=2048))
    else:
        src = data.draw(st.sampled_from(sorted(good_ckpts)))
        blob = bytearray(good_ckpts[src])
        for _ in range(data.draw(st.integers(1, 6))):
            i = data.draw(st.integers(0, len(blob) - 1))
            blob[i] = data.draw(st.integers(0, 255))
        if data.draw(st.booleans()):
            blob = blob[: data.draw(st.integers(0, len(blob)))]
        blob = bytes(blob)
    suffix = data.draw(st.sampled_from(SUFFIXES))
    work = Path(tempfile.mkdtemp(prefix="netparity-prop-"))
    try:
        p = work / f"x{suffix}"
        p.write_bytes(blob)
        try:
            ck = load_checkpoint(p)
        except NetparityError as e:
            assert "\n" not in str(e)
        else:
            assert all(isinstance(v, np.ndarray) for v in ck.values())
        rc, lines = cli("ckpt", "convert", str(p), str(work / "out.npz"))
        assert rc in (0, 1) or (rc == 2 and len(lines) == 1), (rc, lines)
        assert p.read_bytes() == blob
        assert sorted(x.name for x in work.iterdir()) in (sorted([p.name]),
                                                         sorted([p.name, "out.npz"]))
    finally:
        shutil.rmtree(work)


@FAST
@given(mapping=JSON | st.fixed_dictionaries({}, optional={
    "params": st.dictionaries(st.sampled_from(["fc.weight", "fc.bias", "x", ""]),
                              st.sampled_from(["fc.weight", "fc.bias", "y", "fc.gamma"]) | JSON),
    "modules": st.dictionaries(st.sampled_from(["fc", "enc", ""]), st.text(max_size=5) | JSON),
    "rules": JSON, "ops": JSON}), as_yaml=st.booleans())
def test_malformed_mapping_files(good_ckpts, mapping, as_yaml):
    work = Path(tempfile.mkdtemp(prefix="netparity-prop-"))
    try:
        src = work / "w.npz"
        src.write_bytes(good_ckpts[".npz"])
        m = work / ("map.yaml" if as_yaml else "map.json")
        m.write_text(json.dumps(mapping))  # JSON is YAML too
        try:
            load_mapping(m)
        except NetparityError as e:
            assert "\n" not in str(e)
        before = snapshot(work)
        for argv in (("ckpt", "convert", str(src), str(work / "o.npz"), "--mapping", str(m),
                      "--target", "mindspore"),
                     ("ckpt", "map", str(src), str(src), "--mapping", str(m))):
            rc, lines = cli(*argv)
            assert rc in (0, 1) or (rc == 2 and len(lines) == 1), (rc, lines)
        after = snapshot(work)
        after.pop("o.npz", None)
        assert after == before
    finally:
        shutil.rmtree(work)
