"""Mapping a 7B-parameter layout by names and shapes only, in a child process whose data
memory (``RLIMIT_DATA``) is capped 1 GiB above what its imports take: a LLaMA-7B state dict (HF names) against a
port's names (``attention.wq``, ``feed_forward.w1``...), given as PyTorch ``meta`` tensors and
zero-stride stand-ins, and as bf16 ``.safetensors`` and MindSpore ``.ckpt`` files of 13.5 GB
each that are sparse (the data are holes): reading their data, or materialising a tensor of
them, would not fit.
``benchmarks/ckpt_speed.py`` times the same layout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"

CHILD = r"""
import json, resource, struct, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import numpy as np, torch
from ckpt_speed import llama7b
from netparity.ckpt import map_names
from netparity.dtypes import DTYPES

# RLIMIT_DATA: private writable memory (what holding tensors takes), not a read-only mapping
vm = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmData:"))
limit = vm * 1024 + (1 << 30)
resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))

def sparse_safetensors(path, shapes):
    header, off = {}, 0
    for k, s in shapes.items():
        n = int(np.prod(s)) * 2
        header[k] = {"dtype": DTYPES["bfloat16"][1], "shape": list(s), "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.truncate(8 + len(h) + off)  # a hole: no block is written
    return off

def sparse_ckpt(path, shapes):  # MindSpore's layout (msproto.write_checkpoint), data as holes
    from netparity.ckpt.msproto import _enc_len, _enc_varint as v
    with open(path, "wb") as f:
        for k, s in shapes.items():
            n = int(np.prod(s)) * 2
            head = b"".join(v(8) + v(d) for d in s) + _enc_len(2, b"BFloat16") + v(26) + v(n)
            name = _enc_len(1, k.encode())
            value_len = len(name) + 1 + len(v(len(head) + n)) + len(head) + n
            f.write(v(10) + v(value_len) + name + v(18) + v(len(head) + n) + head)
            f.seek(n, 1)
        f.truncate()

ref, cand, truth = llama7b()
meta = {k: torch.empty(v.shape, device="meta") for k, v in ref.items()}
tmp = Path(sys.argv[2])
size = sparse_safetensors(tmp / "ref.safetensors", {k: v.shape for k, v in ref.items()})
sparse_safetensors(tmp / "cand.safetensors", {k: v.shape for k, v in cand.items()})
sparse_ckpt(tmp / "cand.ckpt", {k: v.shape for k, v in cand.items()})
for r, c in ((meta, cand), (str(tmp / "ref.safetensors"), str(tmp / "cand.safetensors")),
             (str(tmp / "ref.safetensors"), str(tmp / "cand.ckpt"))):
    nm = map_names(r, c)
    assert nm, (nm.unmatched_ref[:3], nm.unmatched_cand[:3], list(nm.ambiguous)[:3])
    assert nm.ref_to_cand() == truth, sorted(set(nm.ref_to_cand().items()) ^ set(truth.items()))[:4]
print("ok", len(truth), size / limit)
"""


def test_7b_layout_maps_every_layer_without_materialising_a_tensor(tmp_path):
    p = subprocess.run([sys.executable, "-c", CHILD, str(BENCH), str(tmp_path)],
                       capture_output=True, text=True, env={"OMP_NUM_THREADS": "1",
                                                            "PYTHONPATH": ":".join(sys.path)})
    for f in tmp_path.iterdir():
        f.unlink()
    assert p.returncode == 0, p.stderr[-3000:]
    ok, n, ratio = p.stdout.split()
    assert ok == "ok" and n == "291" and float(ratio) > 4  # the file is far beyond the limit


CONVERT = r"""
import json, resource, struct, sys
from pathlib import Path
import numpy as np
from netparity.ckpt import convert

tmp, shape = Path(sys.argv[1]), (2048, 8192)  # 64 MiB of float32 each
names = [f"layers.{i}.proj.weight" for i in range(3)]
header, off = {}, 0
for i in range(3):  # the template: another port's names, a header and a hole
    header[f"blocks.{i}.dense.weight"] = {"dtype": "F32", "shape": list(shape),
                                          "data_offsets": [off, off + 4 * shape[0] * shape[1]]}
    off += 4 * shape[0] * shape[1]
h = json.dumps(header).encode()
with open(tmp / "tmpl.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    f.truncate(8 + len(h) + off)
vm = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmSize:"))
limit = vm * 1024 + off * 3 // 2  # the source once, and half of it again
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
rep = convert(str(tmp / "src.safetensors"), str(tmp / "out.ckpt"),
              template=str(tmp / "tmpl.safetensors"))
print("ok", rep.written)
"""


def test_convert_holds_the_source_once(tmp_path):
    """``ckpt convert --template`` of a 192 MiB checkpoint under an address-space cap of 1.5x
    its size above the imports: the source is read into its arrays without a second copy, the
    template (a sparse file) by its header, the output written tensor by tensor."""
    from netparity.ckpt import load_checkpoint
    from netparity.ckpt.safetensors_io import write_safetensors_file

    shape = (2048, 8192)
    src = {f"layers.{i}.proj.weight": ("float32", np.arange(shape[0] * shape[1],
                                                           dtype=np.float32).reshape(shape) + i)
           for i in range(3)}
    write_safetensors_file(tmp_path / "src.safetensors", src)
    p = subprocess.run([sys.executable, "-c", CONVERT, str(tmp_path)], capture_output=True,
                       text=True, env={"OMP_NUM_THREADS": "1", "PYTHONPATH": ":".join(sys.path)})
    try:
        assert p.returncode == 0, p.stderr[-3000:]
        assert p.stdout.split() == ["ok", "3"]
        out = load_checkpoint(tmp_path / "out.ckpt")
        assert list(out) == [f"blocks.{i}.dense.weight" for i in range(3)]
        for i in range(3):
            assert np.array_equal(out[f"blocks.{i}.dense.weight"], src[f"layers.{i}.proj.weight"][1])
    finally:
        for f in tmp_path.iterdir():
            f.unlink()
