"""Hostile inputs for the opener tests (tests/safety/test_opener.py) and the full attack suite
(benchmarks/attack_suite.py): header bombs, zip and gzip inflation bombs built in milliseconds
(deflate blocks of zeros repeated, never inflated here), FIFOs, links out of the input, forged
columnar copies, wrong dtype labels, and the clean inputs they are made from."""

from __future__ import annotations

import io
import json
import os
import shutil
import sqlite3
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import numpy as np

SRC = str(Path(__file__).resolve().parents[2] / "src")
#: address-space limit of a CLI child: every hostile input must be refused within it
#: (measured: ``netparity ckpt show x.pth``, torch imported, runs under a 2 GiB limit)
MEMORY_LIMIT = 3 << 30


def run_limited(*argv: str, limit: int = MEMORY_LIMIT, timeout: float = 120,
                extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m netparity ARGV`` in a child whose address space is capped at ``limit``
    (``RLIMIT_AS``): a bomb that gets allocated ends in a ``MemoryError``, not a full host."""
    import resource

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        # and no file it writes (a copy of /dev/zero into $TMPDIR) may pass 1 GiB
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 30, 1 << 30))

    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra_env or {})
    return subprocess.run([sys.executable, "-m", "netparity", *argv], capture_output=True,
                          text=True, timeout=timeout, env=env, preexec_fn=cap)


# --- clean inputs ------------------------------------------------------------------------------


def make_trace(out: Path, ranks: int = 2, n: int = 3, fmt: str = "npz") -> Path:
    """A small trace of ``ranks`` ranks (``n`` float32 payloads each), with its columnar copy
    (``fmt``: the ``.npz`` copy older traces have, or the Parquet one compact writes now)."""
    from netparity.trace import Record, TraceWriter
    from netparity.trace.columnar import compact

    writers = [TraceWriter(out, rank=r) for r in range(ranks)]
    for r, w in enumerate(writers):
        for i in range(n):
            w.add(Record(kind="custom", op="x", call=i, rank=r, dtype="float32", shape=(8,)),
                  payload=np.arange(8, dtype=np.float32) + i + 10 * r)
    for w in writers:
        w.close()
    compact(out, fmt=fmt)
    return out


def make_npz(out: Path) -> Path:
    np.savez(out, **{"fc.weight": np.ones((2, 3), np.float32), "fc.bias": np.zeros(2, np.float32)})
    return out


# --- bombs ------------------------------------------------------------------------------------


def npy_header(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    f = io.BytesIO()
    np.lib.format.write_array_header_1_0(f, {"descr": descr, "fortran_order": False,
                                             "shape": shape})
    return f.getvalue()


def npy_header_bomb(out: Path, shape: tuple[int, ...] = (1 << 36,), descr: str = "<f4") -> Path:
    """A ~200-byte ``.npy`` whose header claims ``shape`` (2^36 floats: 256 GiB)."""
    out.write_bytes(npy_header(shape, descr) + b"\0" * 64)
    return out


def npz_header_bomb(out: Path, name: str = "w") -> Path:
    """A ~300-byte ``.npz`` whose (stored) member header claims 8 TiB."""
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(f"{name}.npy", npy_header((1 << 40,)) + b"\0" * 64)
    return out


def _deflated_zeros(prefix: bytes, nbytes: int) -> tuple[bytes, int]:
    """A raw deflate stream of ``prefix`` then ``nbytes`` (a multiple of 1 MiB) of zeros, built
    from one compressed 1 MiB block repeated (a full flush resets the compressor, so every
    block compresses to the same bytes). Returns (stream, inflated size)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(prefix) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(b"\0" * (1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(b"\0" * (1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
    assert block == again
    return head + block * (nbytes >> 20) + c.flush(), len(prefix) + nbytes


def zip_bomb(out: Path, name: str = "w.npy", gib: float = 3.5) -> Path:
    """A zip (an ``.npz``) of one deflated ``.npy`` member of ``gib`` GiB of zeros whose
    header agrees with it: a few MiB on disk (the CRC is not the real one: a reader that
    inflates it has already lost)."""
    n = int(gib * (1 << 30)) >> 20 << 20
    data, size = _deflated_zeros(npy_header((n // 8,)), n)
    name_b = name.encode()
    local = struct.pack("<4s5H3I2H", b"PK\x03\x04", 20, 0, 8, 0, 0, 0, len(data), size,
                        len(name_b), 0) + name_b
    central = struct.pack("<4s6H3I5H2I", b"PK\x01\x02", 20, 20, 0, 8, 0, 0, 0, len(data),
                          size, len(name_b), 0, 0, 0, 0, 0, 0) + name_b
    end = struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, 1, 1, len(central),
                      len(local) + len(data), 0)
    out.write_bytes(local + data + central + end)
    return out


def gzip_bomb(out: Path, mib: int = 3072, prefix: bytes = b'{"traceEvents": [') -> Path:
    """A gzip file inflating to ``mib`` MiB (a JSON document's start, then zeros)."""
    data, size = _deflated_zeros(prefix, mib << 20)
    out.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + data
                    + struct.pack("<2I", 0, size & 0xFFFFFFFF))
    return out


# --- tampering --------------------------------------------------------------------------------


def rewrite_parquet(trace: Path, rank: int, column: str, values: object) -> None:
    """Replace one column of a rank's Parquet copy (its metadata, so its stamp, kept): a
    forged copy. ``values``: a pyarrow array."""
    import pyarrow.parquet as pq

    p = trace / f"rank{rank}" / "index.parquet"
    t = pq.read_table(p)
    i = t.schema.get_field_index(column)
    t = t.set_column(i, column, values).replace_schema_metadata(t.schema.metadata)
    pq.write_table(t, p)


def rewrite_columns(trace: Path, rank: int, edit: dict[str, np.ndarray]) -> None:
    """Replace members of a rank's columnar copy (its meta, so its stamp, kept): a forged copy."""
    p = trace / f"rank{rank}" / "index.columns.npz"
    with np.load(p) as z:
        arrays = {k: z[k] for k in z.files}
    arrays.update(edit)
    np.savez(p, **arrays)


def columns_header_bomb(trace: Path, rank: int, *, compressed: bool) -> Path:
    """A rank's columnar copy (meta and stamp kept) whose ``i.step`` member header claims
    8 TiB; ``compressed``: members deflated (read through ``zipfile``), else stored (mapped)."""
    p = trace / f"rank{rank}" / "index.columns.npz"
    with np.load(p) as z:
        arrays = {k: z[k] for k in z.files}
    how = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    with zipfile.ZipFile(p, "w", how) as z:
        for k, a in arrays.items():
            if k != "i.step":
                with z.open(f"{k}.npy", "w") as f:
                    np.lib.format.write_array(f, a)
        z.writestr("i.step.npy", npy_header((1 << 40,)) + b"\0" * 64)
    return p


def json_member(obj: object) -> np.ndarray:
    return np.frombuffer(json.dumps(obj).encode(), dtype=np.uint8)


def set_rows_keep_stamp(trace: Path, rank: int, sql: str) -> None:
    """Edit a rank's index rows, then give the file back its size and mtime (what a forger
    or bit rot does: the columnar copy's stamp still matches)."""
    p = trace / f"rank{rank}" / "index.sqlite"
    st = p.stat()
    db = sqlite3.connect(p)
    db.execute(sql)
    db.commit()
    db.close()
    assert p.stat().st_size == st.st_size
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))


def wal_without_shm(src: Path, dest: Path) -> Path:
    """A copy of trace ``src`` whose rank-0 index has committed pages in a ``-wal`` file and
    no ``-shm`` (a killed writer's trace copied elsewhere)."""
    shutil.copytree(src, dest)
    p = dest / "rank0" / "index.sqlite"
    db = sqlite3.connect(p)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("UPDATE records SET call = call + 100 WHERE seq = (SELECT min(seq) FROM records)")
    db.commit()
    for suffix in ("", "-wal"):  # (while open: closing checkpoints the WAL and removes it)
        shutil.copyfile(f"{p}{suffix}", f"{p}{suffix}.keep")
    db.close()
    for suffix in ("", "-wal"):
        os.replace(f"{p}{suffix}.keep", f"{p}{suffix}")
    if os.path.exists(f"{p}-shm"):
        os.unlink(f"{p}-shm")
    (dest / "rank0" / "index.columns.npz").unlink()  # (the copy is of the index before)
    return dest
