"""Test helpers: write small traces with TraceWriter and NumPy statistics; a tiny network."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from netparity.align.vocab import canonical_op
from netparity.stats import compute_stats
from netparity.trace import Record, TraceWriter, open_trace


class TraceBuilder:
    """Writes module/op calls the way capture does: module inputs on entry, ops, outputs on exit."""

    def __init__(self, path: Path, framework: str = "torch"):
        self.path = path
        self.fw = framework
        self.w = TraceWriter(path, manifest={"framework": framework})
        self.step = 0
        self.direction = "forward"
        self.mod_calls: dict[tuple[int, str, str], int] = defaultdict(int)
        self.stack: list[tuple[str, int, int]] = []  # (module, call index, op counter)

    def _add(self, ev: int, base: dict[str, Any], role: str, arrs: list[np.ndarray]) -> None:
        for k, a in enumerate(arrs):
            a = np.asarray(a, dtype=np.float32)
            self.w.add(Record(event=ev, role=role, arg=str(k) if len(arrs) > 1 else "",
                              dtype="float32", shape=tuple(a.shape), step=self.step,
                              direction=self.direction, stats=compute_stats(a), **base))

    def enter(self, module: str, cls: str, inputs: list[np.ndarray]) -> dict[str, Any]:
        k = (self.step, self.direction, module)
        call = self.mod_calls[k]
        self.mod_calls[k] += 1
        ev = self.w.next_event()
        base = {"kind": "module", "module": module, "op": canonical_op(self.fw, cls),
                "native": cls, "call": call}
        self._add(ev, base, "input", inputs)
        self.stack.append((module, call, 0))
        return {"ev": ev, "base": base}

    def exit(self, h: dict[str, Any], outputs: list[np.ndarray]) -> None:
        self.stack.pop()
        self._add(h["ev"], h["base"], "output", outputs)

    def op(self, native: str, inputs: list[np.ndarray], output: np.ndarray) -> np.ndarray:
        module, mcall, n = self.stack[-1] if self.stack else ("", 0, 0)
        if self.stack:
            self.stack[-1] = (module, mcall, n + 1)
        ev = self.w.next_event()
        base = {"kind": "op", "module": module, "module_call": mcall, "call": n,
                "op": canonical_op(self.fw, native), "native": native}
        self._add(ev, base, "input", inputs)
        self._add(ev, base, "output", [output])
        return output

    def param(self, name: str, arr: np.ndarray, kind: str = "param") -> None:
        a = np.asarray(arr, dtype=np.float32)
        self.w.add(Record(kind=kind, module=name, op=kind, role=kind, dtype="float32",
                          shape=tuple(a.shape), step=self.step,
                          direction="update" if kind == "param" else "backward",
                          stats=compute_stats(a)))

    def close(self) -> Any:
        self.w.close()
        return open_trace(self.path)


TORCH = {"fc": "fc", "down": "downsample", "seq": ("downsample.0", "downsample.1"),
         "conv": ("torch.nn.Conv2d", "aten.convolution.default"),
         "bn": ("torch.nn.BatchNorm2d", "aten._native_batch_norm_legit.default"),
         "relu": ("torch.nn.ReLU", "aten.relu.default"), "lin": "torch.nn.Linear",
         "block": "BasicBlock", "seqcls": "torch.nn.Sequential", "root": "ResNet"}
MS = {"fc": "classifier", "down": "down_sample", "seq": ("down_sample.conv", "down_sample.bn"),
      "conv": ("mindspore.nn.Conv2d", "Conv2D"), "bn": ("mindspore.nn.BatchNorm2d", "BatchNorm"),
      "relu": ("mindspore.nn.ReLU", "ReLU"), "lin": "mindspore.nn.Dense",
      "block": "ResidualBlock", "seqcls": "mindspore.nn.SequentialCell", "root": "ResNet"}


def _conv(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    # a 1x1 convolution: channels mixed by w (out, in)
    return np.einsum("oc,nchw->nohw", w, x)


def _bn(x: np.ndarray) -> np.ndarray:
    m = x.mean(axis=(0, 2, 3), keepdims=True)
    v = x.var(axis=(0, 2, 3), keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5) * 1.5 + 0.2


def run_net(tb: TraceBuilder, names: dict, seed: int = 0, noise: float = 0.0,
            linear_as_matmul_add: bool = False, calls: int = 1) -> None:
    """Forward of stem conv/bn/relu, one residual block with a downsample, and a classifier."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    w_stem = rng.standard_normal((8, 4)).astype(np.float32) * 0.5
    w1 = rng.standard_normal((8, 8)).astype(np.float32) * 0.4
    wd = rng.standard_normal((8, 8)).astype(np.float32) * 0.3
    wf = rng.standard_normal((5, 8)).astype(np.float32)
    bf = rng.standard_normal(5).astype(np.float32) + 1.0
    nrng = np.random.default_rng(seed + 100)

    def jitter(a: np.ndarray) -> np.ndarray:
        return a * (1 + noise * nrng.standard_normal(a.shape)) if noise else a

    def leaf(path: str, kind: str, xin: np.ndarray, fn, *extra: np.ndarray) -> np.ndarray:
        cls, native = names[kind]
        h = tb.enter(path, cls, [xin])
        y = jitter(fn(xin))
        tb.op(native, [xin, *extra], y)
        tb.exit(h, [y])
        return y

    root = tb.enter("", names["root"], [x])
    for _ in range(calls):
        y = leaf("conv1", "conv", x, lambda a: _conv(a, w_stem), w_stem)
        y = leaf("bn1", "bn", y, _bn)
        y = leaf("relu", "relu", y, lambda a: np.maximum(a, 0))
    blk = tb.enter("layer1.0", names["block"], [y])
    idn = y
    z = leaf("layer1.0.conv1", "conv", y, lambda a: _conv(a, w1), w1)
    z = leaf("layer1.0.bn1", "bn", z, _bn)
    down = tb.enter(f"layer1.0.{names['down']}", names["seqcls"], [idn])
    d = leaf(f"layer1.0.{names['seq'][0]}", "conv", idn, lambda a: _conv(a, wd), wd)
    d = leaf(f"layer1.0.{names['seq'][1]}", "bn", d, _bn)
    tb.exit(down, [d])
    s = z + d
    tb.op("aten.add.Tensor" if names is TORCH else "Add", [z, d], s)
    s = np.maximum(s, 0)
    tb.op(names["relu"][1], [z + d], s)
    tb.exit(blk, [s])
    p = s.mean(axis=(2, 3))
    tb.op("aten.mean.dim" if names is TORCH else "ReduceMean", [s], p)
    h = tb.enter(names["fc"], names["lin"], [p])
    out = p @ wf.T + bf
    if linear_as_matmul_add:
        mm = p @ wf.T
        tb.op("MatMul", [p, wf], mm)
        tb.op("BiasAdd", [mm, bf], out)
    elif names is TORCH:  # aten.addmm(bias, x, w^T): the bias comes first
        tb.op("aten.addmm.default", [bf, p, wf.T], out)
    else:
        tb.op("Dense", [p, wf, bf], out)
    tb.exit(h, [out])
    tb.exit(root, [out])
    # parameters after the update, with each framework's names
    ps = {"conv1.weight": w_stem, "bn1.weight": np.full(8, 1.5), "bn1.bias": np.full(8, 0.2),
          "bn1.running_mean": np.zeros(8) + 0.1, "bn1.running_var": np.ones(8) * 0.9,
          "layer1.0.downsample.0.weight": wd, "layer1.0.downsample.1.weight": np.full(8, 1.5) + 0.01,
          "fc.weight": wf, "fc.bias": bf}
    for n, a in ps.items():
        tb.param(_param_name(n, names), a)


def _param_name(n: str, names: dict) -> str:
    if names is TORCH:
        return n
    n = n.replace("layer1.0.downsample.0", "layer1.0.down_sample.conv")
    n = n.replace("layer1.0.downsample.1", "layer1.0.down_sample.bn")
    n = n.replace("fc.", "classifier.")
    mod, _, lf = n.rpartition(".")
    if "bn" in mod:
        lf = {"weight": "gamma", "bias": "beta", "running_mean": "moving_mean",
              "running_var": "moving_variance"}.get(lf, lf)
    return f"{mod}.{lf}"
