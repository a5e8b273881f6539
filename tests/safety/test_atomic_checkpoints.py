"""Checkpoint outputs are atomic and never clobber (issue 17, item 1: ``ckpt convert`` onto an
existing ``.ckpt`` deleted it before writing; onto ``.pt`` a failure left it corrupt;
``.safetensors``/``.npz`` left ``.tmp`` files behind)."""

from __future__ import annotations

import errno
import os
import stat

import numpy as np
import pytest

from netparity import outputs
from netparity.ckpt import io as ckpt_io
from netparity.ckpt import load_checkpoint, save_checkpoint
from netparity.errors import CheckpointError

from .helpers import assert_one_line_error, run_cli, small_tmpfs, snapshot

SUFFIXES = (".npz", ".safetensors", ".pt", ".ckpt")


def _small() -> dict[str, np.ndarray]:
    return {"fc.weight": np.full((2, 3), 7, np.float32), "fc.bias": np.zeros(2, np.float32)}


def _big(mib: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"fc.weight": rng.standard_normal((mib * 2**18,)).astype(np.float32),
            "fc.bias": np.zeros(2, np.float32)}


def _writers(suffix: str) -> list[bool | None]:
    """``.ckpt`` is written by MindSpore when installed and by netparity's encoder: try both."""
    if suffix != ".ckpt":
        return [None]
    try:
        import mindspore  # noqa: F401
    except ImportError:
        return [False]
    return [True, False]


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_a_writer_failing_midway_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch,
                                                                      suffix):
    dest = tmp_path / f"w{suffix}"
    save_checkpoint(_small(), dest, use_mindspore=False)
    before = snapshot(tmp_path)

    def half_then_enospc(*args, **kwargs):  # what a full disk does: some bytes, then ENOSPC
        path = next(a for a in args if isinstance(a, (str, os.PathLike)))
        with open(path, "wb") as f:
            f.write(b"\x80partial" * 100)
        raise OSError(errno.ENOSPC, "No space left on device")

    for name in ("write_safetensors_file", "_save_mindspore"):
        monkeypatch.setattr(ckpt_io, name, half_then_enospc)
    monkeypatch.setattr(outputs, "write_npz_file", half_then_enospc)
    monkeypatch.setattr(ckpt_io, "_framework", lambda n: type(
        "W", (), {"write_checkpoint": staticmethod(half_then_enospc)}))
    with pytest.raises(CheckpointError, match="No space left"):
        save_checkpoint({"x": np.ones(3, np.float32)}, dest)
    assert snapshot(tmp_path) == before  # old bytes, and not one extra file


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_disk_full_during_convert_keeps_the_old_checkpoint(tmp_path, suffix):
    src = tmp_path / "big.npz"
    save_checkpoint(_big(2), src)
    for use_ms in _writers(suffix):
        with small_tmpfs("1m") as disk:
            dest = disk / f"out{suffix}"
            save_checkpoint(_small(), dest, use_mindspore=use_ms)
            old = dest.read_bytes()
            before = snapshot(disk)
            p = run_cli("ckpt", "convert", str(src), str(dest), "--force")
            assert_one_line_error(p, str(dest))
            assert dest.read_bytes() == old
            assert snapshot(disk) == before, "a temporary file was left behind"
            assert load_checkpoint(dest)["fc.weight"][0, 0] == 7


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_convert_refuses_an_existing_output_unless_forced(tmp_path, suffix):
    src = tmp_path / "src.npz"
    save_checkpoint({"fc.weight": np.ones((2, 3), np.float32)}, src)
    dest = tmp_path / f"out{suffix}"
    save_checkpoint(_small(), dest, use_mindspore=False)
    old = dest.read_bytes()
    p = run_cli("ckpt", "convert", str(src), str(dest))
    assert_one_line_error(p, "exists", "--force")
    assert dest.read_bytes() == old
    p = run_cli("ckpt", "convert", str(src), str(dest), "--force")
    assert p.returncode == 0, p.stderr
    assert load_checkpoint(dest)["fc.weight"].tolist() == [[1.0] * 3] * 2
    assert sorted(x.name for x in tmp_path.iterdir()) == sorted(["src.npz", dest.name])
    if suffix != ".ckpt":  # (MindSpore makes its files read-only on purpose)
        umask = os.umask(0)
        os.umask(umask)
        assert stat.S_IMODE(dest.stat().st_mode) == 0o666 & ~umask


def test_special_files_are_never_written_over(tmp_path):
    fifo = tmp_path / "pipe.npz"
    os.mkfifo(fifo)
    for dest in (fifo, "/dev/null"):
        with pytest.raises(CheckpointError, match="special file"):
            save_checkpoint(_small(), dest, fmt="npz")
    assert stat.S_ISFIFO(fifo.stat().st_mode) and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_an_output_under_a_regular_file_is_one_line(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    src = tmp_path / "s.npz"
    save_checkpoint(_small(), src)
    p = run_cli("ckpt", "convert", str(src), str(f / "out.npz"))
    assert_one_line_error(p, "out.npz")
    assert f.read_text() == "x"


def test_a_mapping_file_on_a_full_disk_keeps_the_old_one():
    from netparity.errors import UsageError
    from netparity.mapfile import save_mapping

    with small_tmpfs("64k") as disk:
        dest = disk / "map.json"
        save_mapping({"params": {"a": "b"}}, dest)
        old = dest.read_bytes()
        with pytest.raises(UsageError, match="cannot write mapping"):
            save_mapping({"params": {f"layer{i}.weight": f"l{i}.w" for i in range(20000)}}, dest)
        assert dest.read_bytes() == old and os.listdir(disk) == ["map.json"]
