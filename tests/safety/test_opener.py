"""Every file netparity reads goes through one opener (netparity.inputs; issue 29): special
files, links out of the input, header / zip / gzip bombs, truncated files, forged columnar
copies and wrong dtype labels are a one-line refusal (exit 2) with bounded memory, leave the
input byte-identical and create no file in it.

The cases below sample the cross product (every input kind and every hostile form at least
once, each through a subcommand that reads it); benchmarks/attack_suite.py runs all of it.
Each CLI child runs under ``RLIMIT_AS`` (hostile.MEMORY_LIMIT): a bomb that got allocated
would end in a MemoryError traceback, not a full host."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netparity import inputs
from netparity.errors import InputError

from . import hostile as h
from .helpers import assert_one_line_error, snapshot


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("clean")
    h.make_trace(d / "t")
    h.make_trace(d / "pq", fmt="parquet")
    h.make_npz(d / "w.npz")
    return d


def _trace(tmp: Path, base: Path) -> Path:
    return Path(shutil.copytree(base / "t", tmp / "t"))


def _fifo(p: Path) -> Path:
    os.mkfifo(p)
    return p


def _zero(p: Path) -> Path:
    p.symlink_to("/dev/zero")
    return p


def _outside(p: Path, tmp: Path) -> Path:
    """``p`` made a link to a copy of itself outside its input folder (in ``tmp/away``)."""
    (tmp / "away").mkdir(exist_ok=True)
    away = tmp / "away" / p.name
    shutil.copyfile(p, away)
    p.unlink()
    p.symlink_to(away)
    return p


# each case: (tmp, clean inputs) -> (argv, input folders that must stay unchanged, needles)
Case = Callable[[Path, Path], tuple[list[str], list[Path], list[str]]]


def wal_dev_zero(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    t = _trace(tmp, base)
    _zero(t / "rank0" / "index.sqlite-wal")
    return ["compare", str(t), str(t)], [t], ["index.sqlite-wal", "outside the trace"]


def wal_fifo(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    t = _trace(tmp, base)
    _fifo(t / "rank1" / "index.sqlite-wal")
    return ["inspect", str(t)], [t], ["not a regular file (a FIFO)"]


def index_outside(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    t = _trace(tmp, base)
    _outside(t / "rank0" / "index.sqlite", tmp)
    return ["align", str(t), str(t)], [t], ["outside the trace"]


def index_fifo(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    t = _trace(tmp, base)  # (was: rank 0 silently dropped, the other rank read alone)
    (t / "rank0" / "index.sqlite").unlink()
    _fifo(t / "rank0" / "index.sqlite")
    return ["inspect", str(t)], [t], ["rank0/index.sqlite", "not a regular file (a FIFO)"]


def columns_zip_bomb(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    t = _trace(tmp, base)
    h.zip_bomb(t / "rank0" / "index.columns.npz", "i.seq.npy", gib=3.5)
    return ["compare", str(t), str(t)], [t], ["decompression bomb"]


def columns_header_bomb(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    t = _trace(tmp, base)
    h.columns_header_bomb(t, 1, compressed=True)
    return ["export", str(t), "-o", str(tmp / "x.npz")], [t], ["header declares"]


def columns_forged_codes(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    t = _trace(tmp, base)
    h.rewrite_columns(t, 0, {"c.kind": np.full(3, 7, np.int32)})
    return ["inspect", str(t)], [t], ["corrupt columnar index", "codes of 'kind' out of range"]


def columns_forged_dtype(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    t = _trace(tmp, base)
    h.rewrite_columns(t, 0, {"i.step": np.zeros(3, np.float32)})
    return ["compare", str(t), str(t)], [t], ["corrupt columnar index", "not int64"]


def columns_forged_row(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    t = _trace(tmp, base)  # the copy's own row is bad (the index is clean)
    h.rewrite_columns(t, 1, {"v.shape": h.json_member(["[8, -1]"])})
    return ["export", str(t), "-o", str(tmp / "x.npz")], [t], ["corrupt trace index",
                                                               "bad shape"]


def columns_hide_index_row(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    t = _trace(tmp, base)  # the index's row is bad; the copy (stamp still matching) is clean
    h.set_rows_keep_stamp(t, 0, "UPDATE records SET shape = '[8,x]' WHERE seq = 1")
    return ["compare", str(t), str(t)], [t], ["corrupt trace index", "bad shape"]


def _pq_trace(tmp: Path, base: Path) -> Path:
    return Path(shutil.copytree(base / "pq", tmp / "t"))


def parquet_fifo(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    t = _pq_trace(tmp, base)
    (t / "rank0" / "index.parquet").unlink()
    _fifo(t / "rank0" / "index.parquet")
    return ["inspect", str(t)], [t], ["index.parquet", "not a regular file (a FIFO)"]


def parquet_outside(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    t = _pq_trace(tmp, base)
    _outside(t / "rank1" / "index.parquet", tmp)
    return ["compare", str(t), str(t)], [t], ["index.parquet", "outside the trace"]


def parquet_forged_codes(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    import pyarrow as pa

    t = _pq_trace(tmp, base)
    h.rewrite_parquet(t, 0, "kind", pa.DictionaryArray.from_arrays(
        pa.array([0, 7, 0], pa.int32()), pa.array(["custom"]), safe=False))
    return ["inspect", str(t)], [t], ["corrupt columnar index", "'kind'"]


def parquet_forged_type(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    import pyarrow as pa

    t = _pq_trace(tmp, base)
    h.rewrite_parquet(t, 0, "step", pa.array([0.0, 0.0, 0.0], pa.float32()))
    return ["compare", str(t), str(t)], [t], ["index.parquet", "expected columns"]


def parquet_forged_row(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    import pyarrow as pa

    t = _pq_trace(tmp, base)  # the copy's own row is bad (the index is clean)
    h.rewrite_parquet(t, 1, "shape", pa.array(["[8]", "[8, -1]", "[8]"]).dictionary_encode())
    return ["export", str(t), "-o", str(tmp / "x.npz")], [t], ["corrupt trace index",
                                                               "bad shape"]


def shard_zero(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    t = _trace(tmp, base)
    shard = t / "rank1" / "tensors-00000.safetensors"
    shard.unlink()
    _zero(shard)
    return ["export", str(t), "-o", str(tmp / "x.npz")], [t], ["outside the trace"]


def ckpt_npz_header_bomb(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    (tmp / "in").mkdir()
    p = h.npz_header_bomb(tmp / "in" / "w.npz")
    return ["ckpt", "diff", str(p), str(base / "w.npz")], [tmp / "in"], ["header declares"]


def ckpt_npz_zip_bomb(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    (tmp / "in").mkdir()
    p = h.zip_bomb(tmp / "in" / "w.npz", gib=3.5)
    return ["ckpt", "convert", str(p), str(tmp / "o.safetensors")], [tmp / "in"], [
        "decompression bomb"]


def ckpt_pth_zip_bomb(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    (tmp / "in").mkdir()
    p = h.zip_bomb(tmp / "in" / "w.pth", "archive/data/0", gib=3.5)
    return ["ckpt", "map", str(p), str(base / "w.npz")], [tmp / "in"], ["decompression bomb"]


def ckpt_wrong_label(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    (tmp / "in").mkdir()
    p = tmp / "in" / "w.npz"
    np.savez(p, w=np.ones(4), __netparity_dtypes__=np.array('{"w": "bfloat16"}'))
    return ["ckpt", "convert", str(p), str(tmp / "o.safetensors")], [tmp / "in"], [
        "labelled bfloat16", "float64"]


def ckpt_fifo(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    (tmp / "in").mkdir()
    p = _fifo(tmp / "in" / "w.safetensors")
    return ["ckpt", "diff", str(base / "w.npz"), str(p)], [tmp / "in"], ["not a regular file"]


def ckpt_truncated(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    (tmp / "in").mkdir()
    p = tmp / "in" / "w.npz"
    p.write_bytes((base / "w.npz").read_bytes()[:-40])
    return ["ckpt", "show", str(p)], [tmp / "in"], ["w.npz"]


def loss_fifo(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    t = _trace(tmp, base)
    (tmp / "in").mkdir()
    p = _fifo(tmp / "in" / "loss.csv")
    return ["numerics", str(t), "--loss", str(p)], [t, tmp / "in"], ["not a regular file"]


def loss_dev_zero(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    t = _trace(tmp, base)
    (tmp / "in").mkdir()
    p = _zero(tmp / "in" / "loss.csv")
    return ["numerics", str(t), "--loss", str(p)], [t, tmp / "in"], [
        "not a regular file (a character device)"]


def result_dev_zero(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    (tmp / "in").mkdir()
    p = _zero(tmp / "in" / "result.json")
    return ["recheck", str(p)], [tmp / "in"], ["not a regular file"]


def profiler_gzip_bomb(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    (tmp / "in").mkdir()
    p = h.gzip_bomb(tmp / "in" / "w.pt.trace.json.gz", mib=512)
    return ["perf", str(p)], [tmp / "in"], ["gzip stream inflates past"]


def profiler_outside(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    (tmp / "in").mkdir()
    (tmp / "in" / "run.pt.trace.json").write_text('{"traceEvents": []}')
    _outside(tmp / "in" / "run.pt.trace.json", tmp)
    return ["perf", str(tmp / "in")], [tmp / "in"], ["outside its input folder"]


def _dump(tmp: Path) -> Path:
    d = tmp / "dump" / "rank_0" / "Net" / "0" / "0"
    d.mkdir(parents=True)
    return d


def msdump_npy_bomb(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    d = _dump(tmp)
    h.npy_header_bomb(d / "Conv2D.Default_conv-Conv2d.0.0.1.output.0.DefaultFormat.float32.npy")
    return ["msdump", "import", str(tmp / "dump"), "-o", str(tmp / "out")], [tmp / "dump"], [
        "header declares"]


def msdump_outside(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    d = _dump(tmp)
    f = d / "Conv2D.Default_conv-Conv2d.0.0.1.output.0.DefaultFormat.float32.npy"
    np.save(f, np.ones(3, np.float32))
    _outside(f, tmp)
    return ["msdump", "import", str(tmp / "dump"), "-o", str(tmp / "out")], [tmp / "dump"], [
        "outside the dump folder"]


def scan_fifo(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    (tmp / "src").mkdir()
    (tmp / "src" / "a.py").write_text("import torch\n")
    _fifo(tmp / "src" / "b.py")
    return ["scan", str(tmp / "src")], [tmp / "src"], ["not a regular file (a FIFO)"]


def scan_outside(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    (tmp / "src").mkdir()
    (tmp / "src" / "a.py").write_text("import torch\n")
    _outside(tmp / "src" / "a.py", tmp)
    return ["scan", str(tmp / "src")], [tmp / "src"], ["outside the scanned folder"]


def mapping_fifo(tmp: Path, base: Path):  # type: ignore[no-untyped-def]
    t = _trace(tmp, base)
    (tmp / "in").mkdir()
    p = _fifo(tmp / "in" / "map.json")
    return ["align", str(t), str(t), "--mapping", str(p)], [t, tmp / "in"], [
        "not a regular file"]


CASES: list[Case] = [
    wal_dev_zero, wal_fifo, index_fifo, index_outside, columns_zip_bomb, columns_header_bomb,
    columns_forged_codes, columns_forged_dtype, columns_forged_row, columns_hide_index_row,
    parquet_fifo, parquet_outside, parquet_forged_codes, parquet_forged_type, parquet_forged_row,
    shard_zero, ckpt_npz_header_bomb, ckpt_npz_zip_bomb, ckpt_pth_zip_bomb, ckpt_wrong_label,
    ckpt_fifo, ckpt_truncated, loss_fifo, loss_dev_zero, result_dev_zero, profiler_gzip_bomb,
    profiler_outside, msdump_npy_bomb, msdump_outside, scan_fifo, scan_outside, mapping_fifo,
]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_a_hostile_input_is_a_one_line_refusal(tmp_path: Path, base: Path, case: Case) -> None:
    argv, roots, needles = case(tmp_path, base)
    before = {r: snapshot(r) for r in roots}
    p = h.run_limited(*argv, timeout=60)
    assert_one_line_error(p, *needles)
    for r in roots:
        assert snapshot(r) == before[r], f"{r} changed"


def test_a_wal_without_shm_is_read_and_creates_no_file(tmp_path: Path, base: Path) -> None:
    t = h.wal_without_shm(base / "t", tmp_path / "t")
    before = snapshot(t)
    p = h.run_limited("export", str(t), "-o", str(tmp_path / "x.npz"), "--rank", "0")
    assert p.returncode == 0, p.stderr
    assert snapshot(t) == before  # no index.sqlite-shm written into the trace
    from netparity.trace import open_trace

    with open_trace(t) as tr:  # the WAL's commit is read (call + 100)
        assert sorted(r.call for r in tr.records(rank=0)) == [1, 2, 100]
    assert not os.path.exists(t / "rank0" / "index.sqlite-shm")


def test_export_of_every_rank_names_each_rank(tmp_path: Path, base: Path) -> None:
    p = h.run_limited("export", str(base / "t"), "-o", str(tmp_path / "x.npz"))
    assert p.returncode == 0, p.stderr
    assert "exported 6 tensor(s)" in p.stdout
    with np.load(tmp_path / "x.npz") as z:
        names = sorted(z.files)
        assert len(names) == 6 and {n.split(".")[0] for n in names} == {"rank0", "rank1"}
        assert z["rank1.0.0.custom.x.forward.output"][0] == 10.0


def test_a_clean_labelled_npz_still_reads(tmp_path: Path) -> None:
    from netparity.ckpt import load_checkpoint, save_checkpoint

    p = tmp_path / "w.npz"
    save_checkpoint({"w": np.array([1, 2], np.uint16)}, p, dtypes={"w": "bfloat16"})
    ck = load_checkpoint(p)
    assert ck.dtypes["w"] == "bfloat16" and ck["w"].tolist() == [1, 2]


_GOOD = np.lib.format
_ARR = np.arange(12, dtype="<f4").reshape(3, 4)


def _npy_bytes() -> bytes:
    import io

    f = io.BytesIO()
    _GOOD.write_array(f, _ARR)
    return f.getvalue()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, 200), flips=st.lists(st.tuples(st.integers(0, 127),
                                                         st.integers(0, 7)), max_size=4))
def test_a_damaged_npy_header_is_refused_or_read_within_its_size(tmp_path: Path, cut: int,
                                                                flips: list[tuple[int, int]]
                                                                ) -> None:
    data = bytearray(_npy_bytes())
    for at, bit in flips:
        data[at] ^= 1 << bit
    data = data[:len(data) - cut] if cut else data
    p = tmp_path / "a.npy"
    p.write_bytes(bytes(data))
    try:
        arr = inputs.load_npy(p)
    except InputError as e:
        assert "\n" not in str(e)
        return
    assert arr.nbytes <= len(data)  # never more than the file holds
    if not flips and not cut:
        assert np.array_equal(arr, _ARR)


def test_gzip_is_read_as_a_bounded_stream(tmp_path: Path) -> None:
    import gzip

    p = tmp_path / "a.json.gz"
    p.write_bytes(gzip.compress(b'{"a": ') + gzip.compress(b"1}"))  # two members, one text
    assert inputs.read_text(p) == '{"a": 1}'
    p.write_bytes(gzip.compress(b"x" * 1000)[:-12])
    with pytest.raises(InputError, match="truncated gzip stream"):
        inputs.read_bytes(p)
    h.gzip_bomb(p, mib=128)  # 128 MiB from ~130 KiB: past the 64 MiB floor
    with pytest.raises(InputError, match="inflates past 67108864 bytes"):
        inputs.read_bytes(p)
