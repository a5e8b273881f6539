"""PyTorch checkpoints read without PyTorch give what PyTorch's own ``torch.load(
weights_only=True)`` gives -- shape-only (what weight mapping reads) and with values (what
``convert`` reads) -- for every form a training script saves; an unusual or hostile file is never
trusted: it goes to PyTorch's safe loader."""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netparity.ckpt import load_checkpoint
from netparity.errors import CheckpointError

torch = pytest.importorskip("torch")
from netparity.frameworks.torch import ckpt_io  # noqa: E402

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64,
          torch.int32, torch.int8, torch.uint8, torch.bool]


def same_as_torch(path: Path) -> None:
    """The shape-only and the full read of ``path`` equal PyTorch's, entry for entry, bit for
    bit; the arrays are the caller's own (writable, not aliasing each other)."""
    for shapes_only in (True, False):
        a = load_checkpoint(path, shapes_only=shapes_only)
        b = ckpt_io.read(path, shapes_only=shapes_only)
        assert list(a) == list(b.tensors)
        for k in a:
            assert a[k].shape == b.tensors[k].shape and a[k].dtype == b.tensors[k].dtype, k
            assert a.dtype(k) == b.dtypes[k], k
            if not shapes_only:
                assert a[k].tobytes() == b.tensors[k].tobytes(), k
                assert a[k].flags.writeable, k
        assert (a.source_key, dict(a.extras), list(a.notes)) == (b.source_key, b.extras,
                                                                 b.notes)
        if not shapes_only:
            arrs = [a[k] for k in a if a[k].size]
            assert not any(np.shares_memory(x, y) for i, x in enumerate(arrs)
                           for y in arrs[i + 1:])


def sample_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8),
                               torch.nn.Flatten(), torch.nn.Linear(8, 2))


@pytest.mark.parametrize("form", ["state_dict", "wrapped", "nested", "parameters", "views",
                                  "mixed"])
def test_each_saved_form_reads_as_pytorch_reads_it(tmp_path, form):
    m = sample_model()
    sd = m.state_dict()
    base = torch.arange(24, dtype=torch.float32)
    obj = {"state_dict": sd,
           "wrapped": {"model": sd, "epoch": 7, "optimizer": {"lr": 0.1}},
           "nested": {"enc": {"w": torch.ones(2, 3)}, "dec": {"b": torch.zeros(3, dtype=torch.half)}},
           "parameters": OrderedDict(m.named_parameters()),
           "views": {"a": base[2:8].view(2, 3), "b": base.view(4, 6).t(), "c": base[5],
                     "empty": base[:0]},
           "mixed": {"w": torch.ones(3, dtype=torch.bfloat16), "note": "hi", "n": 3},
           }[form]
    p = tmp_path / "w.pth"
    torch.save(obj, p)
    same_as_torch(p)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.text("abc.", min_size=1, max_size=6),
                       st.tuples(st.sampled_from(range(len(DTYPES))),
                                 st.lists(st.integers(0, 4), max_size=3)),
                       min_size=1, max_size=6))
def test_any_plain_state_dict(tmp_path, entries):
    g = torch.Generator().manual_seed(len(entries))
    sd = {k: (torch.randn(shape, generator=g) * 50).to(DTYPES[d])
          for k, (d, shape) in entries.items()}
    p = tmp_path / "h.pt"
    torch.save(sd, p)
    same_as_torch(p)


def test_legacy_format_and_truncation_go_to_pytorch(tmp_path):
    sd = sample_model().state_dict()
    legacy = tmp_path / "legacy.pt"
    torch.save(sd, legacy, _use_new_zipfile_serialization=False)
    same_as_torch(legacy)
    good = tmp_path / "good.pt"
    torch.save(sd, good)
    cut = tmp_path / "cut.pt"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(CheckpointError):
        load_checkpoint(cut, shapes_only=True)


def test_a_flipped_bit_in_a_tensor_is_an_error_not_a_silent_value(tmp_path):
    """PyTorch's own loader does not check the archive's CRC-32; the full read does."""
    p = tmp_path / "w.pt"
    torch.save({"w": torch.ones(1000)}, p)
    with zipfile.ZipFile(p) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("data/0"))
    blob = bytearray(p.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + int.from_bytes(
        blob[info.header_offset + 28: info.header_offset + 30], "little")
    blob[start + 100] ^= 0x40
    p.write_bytes(bytes(blob))
    with pytest.raises(CheckpointError, match="CRC") as ei:
        load_checkpoint(p)
    assert "\n" not in str(ei.value) and str(p) in str(ei.value)
    assert load_checkpoint(p, shapes_only=True)["w"].shape == (1000,)


class _Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("where", ["value", "storage"])
def test_hostile_zip_pickle_is_refused_without_running(tmp_path, where):
    """A zip laid out as ``torch.save`` writes it, whose data.pkl calls ``os.system``."""
    marker = tmp_path / "PWNED"
    obj = ({"w": _Evil(str(marker))} if where == "value"
           else {"w": torch.ones(2)})
    blob = pickle.dumps(obj, protocol=2)
    if where == "storage":  # a real checkpoint whose pickle gained a hostile entry
        good = tmp_path / "g.pt"
        torch.save(obj, good)
        with zipfile.ZipFile(good) as z:
            members = {n: z.read(n) for n in z.namelist()}
        pkl = next(n for n in members if n.endswith("data.pkl"))
        members[pkl] = pickle.dumps({"w": _Evil(str(marker)), "x": 1}, protocol=2)
    else:
        members = {"archive/data.pkl": blob, "archive/version": b"3\n"}
    p = tmp_path / "evil.pth"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for n, b in members.items():
            z.writestr(n, b)
    p.write_bytes(buf.getvalue())
    with pytest.raises(CheckpointError, match="refused"):
        load_checkpoint(p, shapes_only=True)
    assert not marker.exists()


def test_ckpt_map_names_a_torch_file_without_importing_pytorch(tmp_path):
    """The CLI's weight mapping of two plain files runs without PyTorch importable."""
    sd = sample_model().state_dict()
    ref, cand = tmp_path / "r.pth", tmp_path / "c.safetensors"
    torch.save(sd, ref)
    from netparity.ckpt import CheckpointDict, save_checkpoint

    ck = CheckpointDict({k.replace("weight", "gamma") if k.startswith("1.") else k:
                         v.numpy() for k, v in sd.items()})
    save_checkpoint(ck, cand)
    block = tmp_path / "block"
    block.mkdir()
    (block / "torch.py").write_text("raise ImportError('torch is not importable here')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(block),
                                                       str(Path(__file__).parents[2] / "src")]))
    p = subprocess.run([sys.executable, "-m", "netparity", "ckpt", "map", str(ref), str(cand)],
                       env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "1.weight" in p.stdout and "1.gamma" in p.stdout
