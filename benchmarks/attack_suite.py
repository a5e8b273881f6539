"""Every input kind netparity reads x every hostile form x every subcommand that reads it
(issue 29; tests/safety/test_opener.py runs a sample of this).

A case *holds* when the CLI child (under ``RLIMIT_AS`` = hostile.MEMORY_LIMIT and a 1 GiB file
size limit) exits 2 with one ``netparity: error:`` line and no traceback, within the time
limit, leaving its input byte-identical with no new file in it. The clean inputs are run first
(they must not exit 2: the harness is sound). Prints one line per broken case and the counts.

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/attack_suite.py [--only WORD]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.safety import hostile as h  # noqa: E402
from tests.safety.helpers import snapshot  # noqa: E402


@dataclass
class Slot:
    """One file an input kind is made of: where it lies in the inputs, whether it is found
    inside an input tree (a link out of it is hostile) or named by the user, its format."""
    kind: str
    rel: str
    fmt: str  # "sqlite", "wal", "npz", "safetensors", "json", "text", "npy", "pth", "ckpt", "gz"
    commands: list[list[str]]  # argv templates: {t} trace, {i} inputs folder, {o} outputs
    in_tree: bool = True


TRACE_CMDS = [["compare", "{t}", "{t}"], ["align", "{t}", "{t}"], ["inspect", "{t}"],
              ["export", "{t}", "-o", "{o}/x.npz"], ["numerics", "{t}"]]
#: (kind, form) read as if clean, by design: a damaged columnar copy is a cache that falls back
#: to the SQLite index (the source of truth); a folder named like a source file is walked
READS_CLEAN = {("columnar copy", "truncated"), ("scanned source", "directory")}
SLOTS = [
    Slot("index", "t/rank0/index.sqlite", "sqlite", TRACE_CMDS),
    Slot("wal", "t/rank1/index.sqlite-wal", "wal", TRACE_CMDS),
    Slot("columnar copy", "t/rank0/index.columns.npz", "npz", TRACE_CMDS),
    Slot("shard", "t/rank0/tensors-00000.safetensors", "safetensors",
         [["export", "{t}", "-o", "{o}/x.npz"], ["compare", "{t}", "{t}"]]),
    Slot("manifest", "t/manifest.json", "json", TRACE_CMDS[:3]),
    *[Slot(f"checkpoint {ext}", f"ck/w.{ext}", ext if ext in ("npz", "pth", "ckpt")
           else "safetensors",
           [["ckpt", "show", "{f}"], ["ckpt", "map", "{f}", "{i}/ref.npz"],
            ["ckpt", "convert", "{f}", "{o}/out.safetensors"],
            ["ckpt", "diff", "{i}/ref.npz", "{f}"]], in_tree=False)
      for ext in ("npz", "safetensors", "pth", "ckpt")],
    Slot("loss CSV", "loss/loss.csv", "text", [["numerics", "{t}", "--loss", "{f}"]],
         in_tree=False),
    Slot("saved result", "res/result.json", "json", [["recheck", "{f}"]], in_tree=False),
    Slot("profiler trace", "prof/run.pt.trace.json", "json", [["perf", "{f}"]],
         in_tree=False),
    Slot("profiler trace (gzip, in a folder)", "profgz/run.pt.trace.json.gz", "gz",
         [["perf", "{i}/profgz"]]),
    Slot("MindSpore dump", "dump/rank_0/Net/0/0/"
         "Conv2D.Default_conv-Conv2d.0.0.1.output.0.DefaultFormat.float32.npy", "npy",
         [["msdump", "import", "{i}/dump", "-o", "{o}/ms"]]),
    Slot("MindSpore execution order", "dump/rank_0/execution_order/"
         "ms_execution_order_graph_0.csv", "text",
         [["msdump", "import", "{i}/dump", "-o", "{o}/ms"]]),
    Slot("scanned source", "src/b.py", "text", [["scan", "{i}/src"]]),
    Slot("mapping file", "map/map.json", "json",
         [["align", "{t}", "{t}", "--mapping", "{f}"], ["compare", "{t}", "{t}", "--mapping",
                                                         "{f}"]], in_tree=False),
]


def build_clean(d: Path) -> None:
    import torch

    from netparity.ckpt import save_checkpoint

    h.make_trace(d / "t")
    ref = {"fc.weight": np.ones((2, 3), np.float32), "fc.bias": np.zeros(2, np.float32)}
    (d / "ck").mkdir()
    h.make_npz(d / "ref.npz")
    for ext in ("npz", "safetensors", "ckpt"):
        save_checkpoint(ref, d / "ck" / f"w.{ext}")
    torch.save({k: torch.from_numpy(v) for k, v in ref.items()}, d / "ck" / "w.pth")
    (d / "loss").mkdir()
    (d / "loss" / "loss.csv").write_text("step,loss\n0,2.5\n1,2.1\n")
    (d / "res").mkdir()
    subprocess.run([sys.executable, "-m", "netparity", "compare", str(d / "t"), str(d / "t"),
                    "--json", str(d / "res" / "result.json")], capture_output=True, check=False)
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "ts": 0,
               "dur": 100}, {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10,
                             "dur": 50}]
    (d / "prof").mkdir()
    (d / "prof" / "run.pt.trace.json").write_text(json.dumps({"traceEvents": events}))
    (d / "profgz").mkdir()
    import gzip

    (d / "profgz" / "run.pt.trace.json.gz").write_bytes(
        gzip.compress(json.dumps({"traceEvents": events}).encode()))
    npy = d / SLOTS[-4].rel
    npy.parent.mkdir(parents=True)
    np.save(npy, np.ones(3, np.float32))
    eo = d / SLOTS[-3].rel
    eo.parent.mkdir(parents=True)
    eo.write_text("NodeExecutionOrder-FullNameWithScope\nDefault/conv-Conv2d/Conv2D-op1\n")
    (d / "src").mkdir()
    (d / "src" / "a.py").write_text("import torch\n")
    (d / "src" / "b.py").write_text("x = torch.ones(3)\n")
    (d / "map").mkdir()
    (d / "map" / "map.json").write_text('{"modules": {"x": "x"}}')


def _replace(p: Path, make: Callable[[Path], object]) -> None:
    if p.exists() or p.is_symlink():
        p.unlink()
    make(p)


def forms(slot: Slot, tmp: Path) -> dict[str, Callable[[Path], None]]:
    """Hostile forms that apply to ``slot``'s file (each edits the file in place)."""
    import os

    def outside(p: Path) -> None:
        away = tmp / "away"
        away.mkdir(exist_ok=True)
        if p.exists():
            shutil.copyfile(p, away / p.name)
            p.unlink()
        else:
            (away / p.name).write_bytes(b"")
        p.symlink_to(away / p.name)

    out: dict[str, Callable[[Path], None]] = {
        "FIFO": lambda p: _replace(p, os.mkfifo),
        "/dev/zero link": lambda p: _replace(p, lambda q: q.symlink_to("/dev/zero")),
        "directory": lambda p: _replace(p, lambda q: q.mkdir()),
    }
    if slot.in_tree:
        out["link out of the input"] = outside
    if slot.fmt in ("sqlite", "npz", "safetensors", "npy", "pth", "ckpt", "gz"):
        out["truncated"] = lambda p: p.write_bytes(p.read_bytes()[: max(1, p.stat().st_size
                                                                            // 2)])
    if slot.fmt in ("npz", "pth"):
        member = "archive/data/0" if slot.fmt == "pth" else "i.seq.npy" if "columns" in \
            slot.rel else "fc.weight.npy"
        out["zip inflation bomb"] = lambda p: _replace(p, lambda q: h.zip_bomb(q, member))
    if slot.fmt == "npz" and slot.kind == "columnar copy":
        out["npz header bomb (stored)"] = lambda p: h.columns_header_bomb(
            p.parents[1], 0, compressed=False) and None
        out["npz header bomb (deflated)"] = lambda p: h.columns_header_bomb(
            p.parents[1], 0, compressed=True) and None
    elif slot.fmt == "npz":
        out["npz header bomb"] = lambda p: _replace(p, h.npz_header_bomb)
    if slot.fmt == "npy":
        out["npy header bomb"] = lambda p: _replace(p, h.npy_header_bomb)
    if slot.fmt == "gz":
        out["gzip bomb"] = lambda p: _replace(p, h.gzip_bomb)
    if slot.kind == "columnar copy":
        out["forged codes"] = lambda p: h.rewrite_columns(
            p.parents[1], 0, {"c.kind": np.full(3, 7, np.int32)})
        out["forged dtype"] = lambda p: h.rewrite_columns(
            p.parents[1], 0, {"i.step": np.zeros(3, np.float32)})
        out["forged row"] = lambda p: h.rewrite_columns(
            p.parents[1], 0, {"v.shape": h.json_member(["[8, -1]"])})
        out["hidden index row"] = lambda p: h.set_rows_keep_stamp(
            p.parents[1], 0, "UPDATE records SET shape = '[8,x]' WHERE seq = 1")
    if slot.fmt == "npz" and slot.kind.startswith("checkpoint"):
        out["wrong dtype label"] = lambda p: np.savez(
            p, **{"fc.weight": np.ones((2, 3)),
                  "__netparity_dtypes__": np.array('{"fc.weight": "bfloat16"}')})
    return out


def run_case(clean: Path, slot: Slot, argv_t: list[str], form: str | None,
             timeout: float) -> tuple[bool, str]:
    tmp = Path(tempfile.mkdtemp(prefix="attack-"))
    try:
        i = tmp / "in"
        shutil.copytree(clean, i, symlinks=True)
        o = tmp / "out"
        o.mkdir()
        f = i / slot.rel
        if form is not None:
            if form == "wrong dtype label":
                f = f.with_suffix(".npz")
            forms(slot, tmp)[form](f)
        before = snapshot(i)
        argv = [a.format(t=i / "t", i=i, o=o, f=f) for a in argv_t]
        try:
            p = h.run_limited(*argv, timeout=timeout, extra_env={"TMPDIR": str(tmp)})
        except subprocess.TimeoutExpired:
            return False, "timed out (a hang)"
        if form is None or (slot.kind, form) in READS_CLEAN:
            if snapshot(i) != before:
                return False, "the input changed"
            return p.returncode in (0, 1), f"read as clean: exit {p.returncode} " + \
                (p.stderr.strip().splitlines() or [""])[-1][:160]
        lines = [ln for ln in p.stderr.splitlines() if ln.strip() and " ME(" not in ln[:20]]
        if p.returncode != 2 or "Traceback" in p.stderr or len(lines) != 1 or \
                not lines[0].startswith("netparity: error: "):
            return False, f"exit {p.returncode}: " + (lines or [""])[-1][:160]
        if snapshot(i) != before:
            return False, "the input changed"
        return True, lines[0][:160]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="run the cases whose kind, form or command holds WORD")
    ap.add_argument("--timeout", type=float, default=60)
    args = ap.parse_args()
    clean = Path(tempfile.mkdtemp(prefix="attack-clean-"))
    held = broke = 0
    t0 = time.time()
    try:
        build_clean(clean)
        for slot in SLOTS:
            for argv_t in slot.commands:
                for form in [None, *forms(slot, clean)]:
                    label = f"{slot.kind} | {form or 'clean'} | {' '.join(argv_t[:2])}"
                    if args.only and args.only not in label:
                        continue
                    ok, why = run_case(clean, slot, argv_t, form, args.timeout)
                    if form is None:
                        if not ok:
                            print(f"HARNESS {label}: {why}")
                        continue
                    held += ok
                    broke += not ok
                    if not ok:
                        print(f"BROKE   {label}: {why}", flush=True)
    finally:
        shutil.rmtree(clean, ignore_errors=True)
    print(f"held {held}, broke {broke} ({time.time() - t0:.0f} s)")
    return 1 if broke else 0


if __name__ == "__main__":
    sys.exit(main())
