"""Weight mapping and conversion speed: ``ckpt map`` / ``ckpt convert`` on ResNet-50 and a
LLaMA-7B-shaped state dict, this revision side by side with another's source tree.

Setup (once, not timed): the repo's PyTorch ResNet-50 (``examples/resnet/torch_resnet``,
torchvision's layout) saved with ``torch.save`` (``r.pth``, 320 entries: 267 tensors plus 53
``num_batches_tracked``) and the repo's MindSpore port (``examples/resnet/ms_resnet``, the one
``netparity demo`` trains) saved with ``mindspore.save_checkpoint`` (``c.ckpt``, 267 tensors; when
MindSpore is missing, netparity's own encoder writes the port's names). The truth is the
example's explicit name table (``weights.torch_to_ms_name``).

Timed, each tree in a fresh process (``PYTHONPATH=<tree>``), best of ``--repeat``:

* ``map``: ``map_names(r.pth, c.ckpt)`` (what ``netparity ckpt map`` runs), right / 267;
* ``convert``: ``convert(r.pth, out.ckpt, template=c.ckpt)`` (``ckpt convert --template``),
  right / 267 (every written tensor holds the bytes of its true source), MB/s against a plain
  copy of ``r.pth`` measured in the same process, without and with an fsync (convert's atomic
  write syncs);
* ``map CLI`` / ``conv CLI``: the same as ``netparity ckpt map`` / ``ckpt convert`` commands,
  wall time of the fresh process (imports included);
* ``7B``: ``map_names`` of a LLaMA-7B layout (HF names, 32 layers, 291 tensors, 6.7e9
  parameters) against a MindFormers-style port (``attention.wq``, ``feed_forward.w1``...), both
  shape-only (zero-stride ``np.broadcast_to`` views: nothing is allocated), right / 291.

    PYTHONPATH=src python benchmarks/ckpt_speed.py [--base /tmp/prev/src] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

#: LLaMA-7B (HF ``LlamaForCausalLM``) -> MindFormers-style names, per decoder layer
LLAMA_LAYER = [  # (HF leaf module, port module, shape), in each side's listing order below
    ("self_attn.q_proj", "attention.wq", (4096, 4096)),
    ("self_attn.k_proj", "attention.wk", (4096, 4096)),
    ("self_attn.v_proj", "attention.wv", (4096, 4096)),
    ("self_attn.o_proj", "attention.wo", (4096, 4096)),
    ("mlp.gate_proj", "feed_forward.w1", (11008, 4096)),
    ("mlp.up_proj", "feed_forward.w3", (11008, 4096)),
    ("mlp.down_proj", "feed_forward.w2", (4096, 11008)),
    ("input_layernorm", "attention_norm", (4096,)),
    ("post_attention_layernorm", "ffn_norm", (4096,)),
]


def llama7b(layers: int = 32) -> tuple[dict, dict, dict[str, str]]:
    """(HF-named shapes, port-named shapes, truth HF -> port), shape-only float32 views."""
    import numpy as np

    def t(shape: tuple[int, ...]) -> object:
        return np.broadcast_to(np.zeros((), np.float32), shape)

    ref: dict[str, object] = {"model.embed_tokens.weight": t((32000, 4096))}
    cand: dict[str, object] = {"model.tok_embeddings.embedding_table": t((32000, 4096))}
    truth = {"model.embed_tokens.weight": "model.tok_embeddings.embedding_table"}
    for i in range(layers):
        for hf, ms, shape in LLAMA_LAYER:
            r, c = f"model.layers.{i}.{hf}.weight", f"model.layers.{i}.{ms}.weight"
            ref[r] = t(shape)
            truth[r] = c
            cand[c] = t(shape)
    ref["model.norm.weight"], cand["model.norm_out.weight"] = t((4096,)), t((4096,))
    ref["lm_head.weight"], cand["lm_head.weight"] = t((32000, 4096)), t((32000, 4096))
    truth["model.norm.weight"], truth["lm_head.weight"] = "model.norm_out.weight", "lm_head.weight"
    return ref, cand, truth


def setup(where: Path) -> None:
    """Write r.pth, c.ckpt and truth.json into ``where`` (this tree's example models)."""
    sys.path.insert(0, str(SRC))
    import torch

    from netparity.examples.resnet import torch_resnet, weights

    torch.manual_seed(0)
    net = torch_resnet.resnet50()
    for m in net.modules():  # distinct BN values, so that a swapped pair shows in the bytes
        if isinstance(m, torch.nn.BatchNorm2d):
            for t in (m.weight, m.bias, m.running_mean, m.running_var):
                t.data.uniform_(0.5, 1.5)
    sd = net.state_dict()
    torch.save(sd, where / "r.pth")
    truth = {k: weights.torch_to_ms_name(k, 50) for k in sd}
    truth = {k: v for k, v in truth.items() if v}
    (where / "truth.json").write_text(json.dumps(truth))
    state = weights.torch_to_ms_state({k: v.numpy() for k, v in sd.items()}, 50)
    try:
        import mindspore as ms

        from netparity.examples.resnet import ms_resnet

        cell = ms_resnet.resnet50()
        order = list(cell.parameters_dict())
        ms.save_checkpoint([{"name": k, "data": ms.Tensor(state[k] * 0)} for k in order],
                           str(where / "c.ckpt"))
    except ImportError:
        from netparity.ckpt import save_checkpoint

        save_checkpoint({k: v * 0 for k, v in state.items()}, where / "c.ckpt",
                        use_mindspore=False)


CHILD = r"""
import json, os, shutil, sys, time
from pathlib import Path
import numpy as np
sys.path.insert(0, os.environ["BENCH_DIR"])
from ckpt_speed import llama7b
from netparity.ckpt import convert, load_checkpoint, map_names
d, rep = Path(sys.argv[1]), int(sys.argv[2])
truth = json.loads((d / "truth.json").read_text())
def best(f):
    ts = []
    for _ in range(rep):
        t0 = time.perf_counter(); r = f(); ts.append(time.perf_counter() - t0)
    return min(ts), r
out = {}
t, nm = best(lambda: map_names(str(d / "r.pth"), str(d / "c.ckpt")))
out["map"] = [t, sum(truth.get(p.ref) == p.cand for p in nm.pairs), len(truth)]
t, _ = best(lambda: convert(str(d / "r.pth"), str(d / "o.ckpt"), template=str(d / "c.ckpt")))
src, got = load_checkpoint(d / "r.pth"), load_checkpoint(d / "o.ckpt")
right = sum(v in got and np.array_equal(src[k], got[v]) for k, v in truth.items())
size = (d / "r.pth").stat().st_size
def copy_synced():
    shutil.copyfile(d / "r.pth", d / "copy.pth")
    fd = os.open(d / "copy.pth", os.O_RDONLY)
    os.fsync(fd)  # convert's atomic write syncs too
    os.close(fd)
tc, _ = best(lambda: shutil.copyfile(d / "r.pth", d / "copy.pth"))
ts, _ = best(copy_synced)
out["convert"] = [t, right, len(truth), size / t / 1e6, size / tc / 1e6, size / ts / 1e6]
ref, cand, tr = llama7b()
t, nm = best(lambda: map_names(ref, cand))
out["7B"] = [t, sum(tr.get(p.ref) == p.cand for p in nm.pairs), len(tr)]
print("@@", json.dumps(out))
"""


def run(tree: Path, where: Path, repeat: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1",
               BENCH_DIR=str(Path(__file__).parent))
    p = subprocess.run([sys.executable, "-c", CHILD, str(where), str(repeat)], env=env,
                       capture_output=True, text=True)
    lines = [x for x in p.stdout.splitlines() if x.startswith("@@ ")]
    if not lines:
        raise SystemExit(f"{tree}: benchmark failed\n{p.stderr[-3000:]}")
    return json.loads(lines[-1][3:])


def cli(tree: Path, where: Path, repeat: int) -> dict:
    """Wall seconds (best of ``repeat``) of ``netparity ckpt map`` / ``ckpt convert`` as fresh
    processes, imports included: what a user waits for."""
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
    runs = {"map CLI": ["map", "r.pth", "c.ckpt"],
            "conv CLI": ["convert", "r.pth", "o.ckpt", "--template", "c.ckpt", "--force"]}
    out = {}
    for case, argv in runs.items():
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", "netparity", "ckpt", *argv], env=env,
                               cwd=where, capture_output=True, text=True)
            best = min(best, time.perf_counter() - t0)
            if p.returncode != 0:
                raise SystemExit(f"{tree}: {' '.join(argv)} failed\n{p.stderr[-2000:]}")
        out[case] = best
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default=None, metavar="SRC_DIR",
                    help="another revision's src/ to time in the same run")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    where = Path(tempfile.mkdtemp(prefix="ckpt_speed."))
    try:
        setup(where)
        trees = [("this", SRC)] + ([("base", Path(a.base))] if a.base else [])
        print(f"{'case':9} {'tree':5} {'best s':>8} {'right':>9} {'MB/s':>7} {'copy MB/s':>9} "
              f"{'+fsync':>7}")
        for name, tree in trees:
            r = run(tree, where, a.repeat)
            for case in ("map", "convert", "7B"):
                t, ok, n, *rate = r[case]
                extra = f" {rate[0]:7.0f} {rate[1]:9.0f} {rate[2]:7.0f}" if rate else ""
                print(f"{case:9} {name:5} {t:8.3f} {f'{ok}/{n}':>9}{extra}", flush=True)
            for case, t in cli(tree, where, a.repeat).items():
                print(f"{case:9} {name:5} {t:8.3f}", flush=True)
    finally:
        shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()
