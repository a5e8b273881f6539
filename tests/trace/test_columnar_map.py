"""The columnar copy is read through a memory map of its (uncompressed) zip members: what a
scan returns equals SQLite's rows, a copy another tool wrote compressed still reads, and a
member whose header disagrees with the file is a one-line error, not wrong data."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_scan import _write  # noqa: E402

from netparity.errors import TraceError  # noqa: E402
from netparity.trace import open_trace  # noqa: E402
from netparity.trace.columnar import COLUMNS_FILE, DISABLE_ENV, compact, store  # noqa: E402
from netparity.trace.schema import COLUMN_NAMES  # noqa: E402


def _scan_text(path: Path) -> str:
    cols = open_trace(path).scan(COLUMN_NAMES)
    return json.dumps({c: cols[c].tolist() for c in COLUMN_NAMES}, sort_keys=True)


def test_a_compressed_copy_reads_the_same(tmp_path, monkeypatch):
    _write(tmp_path / "a")
    monkeypatch.setenv(DISABLE_ENV, "1")
    want = _scan_text(tmp_path / "a")
    monkeypatch.setenv(DISABLE_ENV, "0")
    compact(tmp_path / "a", fmt="npz")
    p = tmp_path / "a" / "rank0" / COLUMNS_FILE
    with np.load(p) as z:
        arrays = {k: z[k] for k in z.files}
    np.savez_compressed(p, **arrays)  # what another tool might write: deflated members
    with zipfile.ZipFile(p) as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_DEFLATED}
    assert store(open_trace(tmp_path / "a"), 0) is not None
    assert _scan_text(tmp_path / "a") == want


def test_a_member_whose_header_disagrees_with_the_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(DISABLE_ENV, "0")
    _write(tmp_path / "a")
    compact(tmp_path / "a", fmt="npz")
    p = tmp_path / "a" / "rank0" / COLUMNS_FILE
    raw = bytearray(p.read_bytes())
    with zipfile.ZipFile(p) as z:
        info = z.getinfo("i.event.npy")
        n = len(np.load(z.open(info)))
    # the member's .npy header says one row more than its data holds (same header length)
    old, new = f"({n},)".encode(), f"({n + 1},)".encode()
    start = info.header_offset
    at = raw.index(old, start)
    assert len(old) == len(new) and at < start + 200
    raw[at : at + len(old)] = new
    p.write_bytes(bytes(raw))
    tr = open_trace(tmp_path / "a")
    assert store(tr, 0) is not None  # still current: the index did not change
    with pytest.raises(TraceError, match="corrupt columnar index"):
        tr.scan(["event"])
    assert tr.scan(["seq"]).n == n  # the other columns still read


def test_a_flipped_bit_in_a_column_is_refused_not_read(tmp_path, monkeypatch):
    monkeypatch.setenv(DISABLE_ENV, "0")
    _write(tmp_path / "a")
    compact(tmp_path / "a", fmt="npz")
    p = tmp_path / "a" / "rank0" / COLUMNS_FILE
    with zipfile.ZipFile(p) as z:
        name = next(n for n in z.namelist() if n.startswith("f."))  # a statistics column
        info = z.getinfo(name)
    raw = bytearray(p.read_bytes())
    end = info.header_offset + 30 + len(info.filename) + len(info.extra) + info.file_size
    raw[end - 3] ^= 0x10  # one bit of the column's last value
    p.write_bytes(bytes(raw))
    tr = open_trace(tmp_path / "a")
    with pytest.raises(TraceError, match="corrupt columnar index.*CRC"):
        tr.scan([name[2:-4]])
