"""Reads stay inside the trace, are bounded, never create files, and detect corruption (issue
17, items 3 and 4: an index row naming ``/etc/passwd`` exported that file; a ``.ckpt`` linked to
``/dev/zero`` ate 5.4 GB; a FIFO hung; a swapped shard read as a numerical divergence; a trace
on a read-only mount was called corrupt and reading created ``-wal``/``-shm`` files)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import numpy as np
import pytest

from netparity.errors import TraceError
from netparity.trace import Record, TraceWriter, open_trace

from .helpers import assert_one_line_error, run_cli, small_tmpfs, snapshot


def make_trace(out: Path, value: float = 1.0, n: int = 3, size: int = 64,
               kind: str = "custom") -> Path:
    """``n`` records of ``kind`` (``module``: a module's forward outputs, which the verdict
    commands compare; ``custom``: tensors only ``inspect``/``export`` read)."""
    with TraceWriter(out) as w:
        for i in range(n):
            a = np.arange(size, dtype=np.float32) + value * (i + 1)
            rec = (Record(kind="custom", op="x", call=i, dtype="float32", shape=(size,))
                   if kind == "custom" else
                   Record(kind="module", op="linear", module=f"m{i}", call=0,
                          direction="forward", role="output", dtype="float32", shape=(size,)))
            w.add(rec, payload=a)
    return out


def set_rows(out: Path, sql: str, *params: object) -> None:
    db = sqlite3.connect(out / "rank0" / "index.sqlite")
    db.execute(sql, params)
    db.commit()
    db.close()


@pytest.mark.parametrize("shard", ["/etc/passwd", "../../x", "../../../../../../etc/passwd",
                                   "tensors-00000.safetensors/../../manifest.json",
                                   "../rank0/tensors-00000.safetensors"])
def test_a_shard_outside_the_trace_is_refused_not_exported(tmp_path, shard):
    out = make_trace(tmp_path / "t")
    set_rows(out, "UPDATE records SET shard = ?", shard)
    dest = tmp_path / "x.npz"
    p = run_cli("export", str(out), "-o", str(dest))
    assert_one_line_error(p, "not a shard file name")
    assert not dest.exists()


def test_a_shard_symlinked_outside_the_trace_is_refused(tmp_path):
    out = make_trace(tmp_path / "t")
    shard = out / "rank0" / "tensors-00000.safetensors"
    secret = tmp_path / "secret.bin"
    secret.write_bytes(shard.read_bytes())
    shard.unlink()
    shard.symlink_to(secret)
    with open_trace(out) as tr, pytest.raises(TraceError, match="outside the trace"):
        tr.tensor(tr.records()[0])


def test_special_files_are_refused_without_hanging(tmp_path):
    out = make_trace(tmp_path / "t")
    shard = out / "rank0" / "tensors-00000.safetensors"
    shard.unlink()
    os.mkfifo(shard)
    p = run_cli("export", str(out), "-o", str(tmp_path / "x.npz"), timeout=60)
    assert_one_line_error(p, "not a regular file")
    for name, make in (("zero.ckpt", lambda q: q.symlink_to("/dev/zero")),
                       ("fifo.ckpt", os.mkfifo), ("fifo.pth", os.mkfifo),
                       ("null.safetensors", lambda q: q.symlink_to("/dev/null"))):
        make(tmp_path / name)
        p = run_cli("ckpt", "show", str(tmp_path / name), timeout=60)
        assert_one_line_error(p, "not a regular file")


@pytest.mark.parametrize("sql, needle, cli_needle", [
    ("UPDATE records SET offset = -8", "invalid payload offset", "bad offset"),
    ("UPDATE records SET nbytes = 1 << 40", "does not match shape", "does not match shape"),
    ("UPDATE records SET offset = 1 << 40", "truncated payload shard", "truncated"),
    ("UPDATE records SET nbytes = 'many'", "invalid payload offset", "bad nbytes"),
    ("UPDATE records SET dtype = 'float128'", "unknown dtype", "unknown dtype"),
])
def test_sizes_are_bounded_by_the_row_and_the_file(tmp_path, sql, needle, cli_needle):
    out = make_trace(tmp_path / "t")
    set_rows(out, sql)
    with open_trace(out) as tr, pytest.raises(TraceError, match=needle):
        tr.tensor(tr.records()[0])  # the reader's own bound, whatever ran before it
    p = run_cli("export", str(out), "-o", str(tmp_path / "x.npz"))
    assert_one_line_error(p, cli_needle)


def _corrupt_message(tr, rec) -> list[str]:  # type: ignore[no-untyped-def]
    msgs = []
    with pytest.raises(TraceError, match="corrupt payload") as e:
        tr.tensor(rec)
    msgs.append(str(e.value))
    with pytest.raises(TraceError, match="corrupt payload") as e, tr.payload_reader(rec) as rd:
        for i in range(0, rd.count, 16):  # streaming, front to back, as the comparison reads
            rd.read(i, min(16, rd.count - i))
    msgs.append(str(e.value))
    return msgs


@pytest.mark.parametrize("algo", ["xxh3_64", "crc32"])
def test_a_swapped_or_random_shard_is_corruption_naming_the_path(tmp_path, monkeypatch, algo):
    from netparity.trace import checksum

    if not checksum.available(algo):
        pytest.skip(f"{algo} needs the xxhash package")
    monkeypatch.setattr(checksum, "default_algorithm", lambda: algo)
    a = make_trace(tmp_path / "a", value=1.0)
    b = make_trace(tmp_path / "b", value=2.0)  # same layout, other values: a "swapped" shard
    shard = a / "rank0" / "tensors-00000.safetensors"
    shutil.copyfile(b / "rank0" / "tensors-00000.safetensors", shard)
    with open_trace(a) as tr:
        assert tr.payload_checksum(tr.records()[0])[0] == algo  # type: ignore[index]
        for m in _corrupt_message(tr, tr.records()[1]):
            assert str(shard) in m and "checksum differs" in m
    data = bytearray(shard.read_bytes())
    data[-64 * 4:] = np.random.default_rng(0).bytes(64 * 4)  # the last payload: random bytes
    shard.write_bytes(bytes(data))
    with open_trace(a) as tr:
        _corrupt_message(tr, tr.records()[2])
    p = run_cli("export", str(a), "-o", str(tmp_path / "x.npz"))
    assert_one_line_error(p, "corrupt payload", str(shard))


def test_traces_without_checksums_stay_readable(tmp_path):
    out = make_trace(tmp_path / "t")
    set_rows(out, "DROP TABLE payload_checksum")  # what a trace written before checksums holds
    with open_trace(out) as tr:
        assert tr.tensor(tr.records()[0])[0] == 1.0


def test_reading_creates_no_file_in_the_trace(tmp_path):
    out = make_trace(tmp_path / "t")
    before = snapshot(out)
    p = run_cli("export", str(out), "-o", str(tmp_path / "x.npz"))
    assert p.returncode == 0, p.stderr
    assert snapshot(out) == before


def _remount_ro(d: Path) -> None:
    r = subprocess.run(["mount", "-o", "remount,ro", str(d)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot remount the tmpfs read-only ({r.stderr.strip()})")


def test_a_trace_on_a_read_only_mount_is_readable(tmp_path):
    with small_tmpfs("4m") as disk:
        clean = make_trace(disk / "clean")
        # a capture killed after a commit: its last rows live only in the WAL
        w = TraceWriter(disk / "killed")
        w.add(Record(kind="custom", op="x", dtype="float32", shape=(2,)),
              payload=np.array([5.0, 6.0], np.float32))
        w.flush()
        shutil.copytree(disk / "killed", tmp_path / "killed-copy")
        w.close()
        shutil.rmtree(disk / "killed")
        shutil.copytree(tmp_path / "killed-copy", disk / "killed")
        assert (disk / "killed" / "rank0" / "index.sqlite-wal").exists()
        before = snapshot(disk)
        _remount_ro(disk)
        with open_trace(clean) as tr:
            assert len(tr.records()) == 3 and tr.tensor(tr.records()[2])[0] == 3.0
        with open_trace(disk / "killed") as tr:
            assert tr.tensor(tr.records()[0]).tolist() == [5.0, 6.0]
        p = run_cli("inspect", str(clean))
        assert p.returncode == 0, p.stderr
        assert snapshot(disk) == before


def _write_net():  # type: ignore[no-untyped-def]
    """tests/compare's trace builder, loaded by path (conftest modules are not importable by
    name: several exist)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "compare" / "conftest.py"
    spec = importlib.util.spec_from_file_location("_compare_conftest", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.write_net


def test_compare_reports_a_damaged_shard_as_corruption_not_divergence(tmp_path):
    write_net = _write_net()
    ref, cand = write_net(tmp_path / "ref"), write_net(tmp_path / "cand")
    shard = next((cand / "rank0").glob("tensors-*.safetensors"))
    data = bytearray(shard.read_bytes())
    data[-100:] = bytes(100)  # zeros over the end of the last payload
    shard.write_bytes(bytes(data))
    p = run_cli("compare", str(ref), str(cand))
    assert_one_line_error(p, "corrupt payload", str(shard))
