"""Round trips for every format and dtype; unsafe, corrupt and truncated files."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from netparity.ckpt import CheckpointDict, load_checkpoint, save_checkpoint
from netparity.ckpt.msproto import decode_checkpoint
from netparity.dtypes import encode_bf16
from netparity.errors import CheckpointError


def sample() -> CheckpointDict:
    rng = np.random.default_rng(0)
    ck = CheckpointDict()
    ck["conv.weight"] = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    ck["half"] = rng.standard_normal(5).astype(np.float16)
    ck["i32"] = np.array([1, -2, 3], np.int32)
    ck["i64.scalar"] = np.array(-7, np.int64)
    ck["mask"] = np.array([True, False, True])
    ck["f64"] = np.array([1e-300, 2.5])
    ck["bf"] = encode_bf16(np.array([1.0, -2.0, 3.140625, 1e30], np.float32))
    ck.dtypes["bf"] = "bfloat16"
    return ck


def same(a: CheckpointDict, b: CheckpointDict) -> None:
    assert list(a) == list(b)
    for k in a:
        assert a.dtype(k) == b.dtype(k), k
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert np.array_equal(a[k], b[k]), k


@pytest.mark.parametrize("suffix", [".safetensors", ".npz", ".pt", ".ckpt"])
def test_round_trip(tmp_path, suffix):
    if suffix == ".pt":
        pytest.importorskip("torch")
    ck = sample()
    p = save_checkpoint(ck, tmp_path / f"w{suffix}", use_mindspore=False)
    back = load_checkpoint(p)
    same(ck, back)
    assert back.format == {".safetensors": "safetensors", ".npz": "npz", ".pt": "torch",
                           ".ckpt": "mindspore"}[suffix]


def test_safetensors_interop_with_reference_library(tmp_path):
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    t = {"a": torch.randn(3, 2), "b": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
         "c": torch.arange(4, dtype=torch.int64)}
    st.save_file(t, str(tmp_path / "ref.safetensors"))
    ours = load_checkpoint(tmp_path / "ref.safetensors")
    assert ours.dtypes["b"] == "bfloat16"
    assert np.array_equal(ours["b"], t["b"].view(torch.int16).numpy().view(np.uint16))
    save_checkpoint(ours, tmp_path / "ours.safetensors")
    back = st.load_file(str(tmp_path / "ours.safetensors"))
    for k in t:
        assert back[k].dtype == t[k].dtype and torch.equal(back[k], t[k])


def test_torch_wrapped_state_dict(tmp_path):
    torch = pytest.importorskip("torch")
    sd = torch.nn.Linear(3, 2).state_dict()
    torch.save({"epoch": 4, "state_dict": sd, "optimizer": {"lr": 0.1}}, tmp_path / "w.pth")
    ck = load_checkpoint(tmp_path / "w.pth")
    assert list(ck) == ["weight", "bias"] and ck.source_key == "state_dict"
    assert ck.extras["epoch"] == 4
    torch.save({"model": sd}, tmp_path / "m.bin")
    assert load_checkpoint(tmp_path / "m.bin").source_key == "model"


class _Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("protocol", [2, 4])
def test_malicious_pickle_is_refused_without_running(tmp_path, protocol):
    pytest.importorskip("torch")
    marker = tmp_path / "PWNED"
    p = tmp_path / "evil.pt"
    p.write_bytes(pickle.dumps({"w": _Evil(str(marker))}, protocol=protocol))
    with pytest.raises(CheckpointError, match="refused") as ei:
        load_checkpoint(p)
    assert "\n" not in str(ei.value)
    assert not marker.exists()


def test_npz_with_pickled_objects_refused(tmp_path):
    np.savez(tmp_path / "o.npz", a=np.array([{"x": 1}], dtype=object))
    with pytest.raises(CheckpointError, match="pickle"):
        load_checkpoint(tmp_path / "o.npz")


@pytest.mark.parametrize("suffix", [".safetensors", ".npz", ".pt", ".ckpt"])
def test_truncated_and_corrupt(tmp_path, suffix):
    if suffix == ".pt":
        pytest.importorskip("torch")
    p = save_checkpoint(sample(), tmp_path / f"w{suffix}", use_mindspore=False)
    blob = p.read_bytes()
    bad = tmp_path / f"cut{suffix}"
    bad.write_bytes(blob[: len(blob) * 2 // 3])
    with pytest.raises(CheckpointError) as ei:
        load_checkpoint(bad)
    assert "\n" not in str(ei.value) and str(bad) in str(ei.value)
    junk = tmp_path / f"junk{suffix}"
    junk.write_bytes(b"\xff\xfe garbage" * 10)
    with pytest.raises(CheckpointError):
        load_checkpoint(junk)


def test_missing_and_empty(tmp_path):
    with pytest.raises(CheckpointError, match="no such file"):
        load_checkpoint(tmp_path / "nope.ckpt")
    (tmp_path / "e.ckpt").write_bytes(b"")
    with pytest.raises(CheckpointError):
        load_checkpoint(tmp_path / "e.ckpt")


def _value(name: str, dims: list[int], ttype: str, content: bytes, packed: bool = False) -> bytes:
    from netparity.ckpt.msproto import _enc_len, _enc_varint

    if packed:
        tensor = _enc_len(1, b"".join(_enc_varint(d) for d in dims))
    else:
        tensor = b"".join(_enc_varint(1 << 3) + _enc_varint(d) for d in dims)
    tensor += _enc_len(2, ttype.encode()) + _enc_len(3, content)
    return _enc_len(1, _enc_len(1, name.encode()) + _enc_len(2, tensor))


def test_msproto_slices_crc_and_packed_dims():
    import binascii

    a = np.arange(10, dtype=np.float32).reshape(2, 5)
    raw = a.tobytes()
    # MindSpore writes a big parameter as consecutive slices, each with the full dims
    blob = _value("w", [2, 5], "Float32", raw[:12]) + _value("w", [2, 5], "Float32", raw[12:])
    blob += _value("p", [3], "Int64", np.arange(3, dtype=np.int64).tobytes(), packed=True)
    w, p = decode_checkpoint(blob)
    assert np.array_equal(w.array, a) and p.array.tolist() == [0, 1, 2]
    good = blob + b"crc_num" + binascii.crc32(blob).to_bytes(10, "big")
    assert decode_checkpoint(good)[0].array.size == 10
    with pytest.raises(CheckpointError, match="CRC"):
        decode_checkpoint(blob + b"crc_num" + (binascii.crc32(blob) ^ 1).to_bytes(10, "big"))
    with pytest.raises(CheckpointError, match="tensor_type"):
        decode_checkpoint(_value("q", [1], "Int4", b"\x00"))
