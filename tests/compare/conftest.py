"""Synthetic traces for compare tests: a chain of elementwise 'linear+tanh' modules written
with TraceWriter, forward and backward, with parameter grads/updates and a loss."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from netparity.dtypes import encode_bf16
from netparity.stats import compute_stats
from netparity.trace import Record, TraceWriter, build_manifest

Perturb = dict[tuple[str, str], float]  # (module, direction) -> relative perturbation


def write_net(
    path: Path,
    *,
    n: int = 5,
    size: int = 300,
    perturb: Perturb | None = None,
    payload: str = "tensors",
    dtype: str = "float32",
    framework: str = "numpy",
    names: Callable[[int], str] | None = None,
    edit: Callable[[str, str, str, np.ndarray], np.ndarray] | None = None,
    steps: int = 1,
    seed: int = 0,
    noise: float = 0.0,
    noise_seed: int = 1,
) -> Path:
    """Write a trace; ``perturb`` adds ``rel * rms`` to one module's output in one direction;
    ``edit(module, direction, role, arr)`` may replace any tensor before it is written;
    ``noise`` adds element-wise relative noise (from ``noise_seed``) to every output."""
    perturb = perturb or {}
    names = names or (lambda i: f"net.l{i}")
    rng = np.random.default_rng(seed)
    nrng = np.random.default_rng(noise_seed)
    ws = [rng.uniform(0.5, 1.5, size) for _ in range(n)]
    bs = [rng.uniform(-0.1, 0.1, size) for _ in range(n)]
    x0 = rng.standard_normal(size)
    fdt = np.float64 if dtype == "float64" else np.float32

    def cast(a: np.ndarray) -> np.ndarray:
        a = np.asarray(a, dtype=np.float64).astype(np.float32 if dtype == "bfloat16" else fdt)
        if dtype == "bfloat16":
            return (encode_bf16(a).astype(np.uint32) << 16).view(np.float32)
        return a

    def jitter(a: np.ndarray) -> np.ndarray:
        if noise:
            a = a * (1 + noise * nrng.standard_normal(a.shape))
        return a

    with TraceWriter(path, manifest=build_manifest(framework=framework, device="cpu")) as w:

        def add(kind: str, module: str, direction: str, role: str, arr: np.ndarray, ev: int,
                step: int, op: str = "linear", src: str = "") -> None:
            arr = cast(arr)
            if edit is not None:
                arr = edit(module, direction, role, arr)
            store = dtype if dtype != "bfloat16" else "bfloat16"
            raw = encode_bf16(arr) if dtype == "bfloat16" else np.ascontiguousarray(arr, fdt)
            rec = Record(kind=kind, op=op, native="Lin", module=module, direction=direction,
                         role=role, arg="0" if role in ("input", "output") else "",
                         dtype=store, shape=tuple(arr.shape), step=step, event=ev,
                         stats=compute_stats(arr), source=src)
            w.add(rec, payload=raw if payload == "tensors" else None)

        for step in range(steps):
            xs = [cast(x0)]
            for i in range(n):
                m = names(i)
                ev = w.next_event()
                add("module", m, "forward", "input", xs[-1], ev, step, src=f"net.py:{10 + i}")
                y = np.tanh(xs[-1] * ws[i] + bs[i])
                y = jitter(y)
                if (m, "forward") in perturb:
                    y = y + perturb[(m, "forward")] * np.sqrt(np.mean(y * y))
                y = cast(y)
                add("module", m, "forward", "output", y, ev, step, src=f"net.py:{10 + i}")
                xs.append(y)
            loss = float(np.sum(xs[-1] ** 2))
            add("loss", "", "forward", "output", np.array(loss), w.next_event(), step, op="loss")
            g = cast(2 * xs[-1])
            gws = [None] * n
            for i in reversed(range(n)):
                m = names(i)
                ev = w.next_event()
                add("module", m, "backward", "input", g, ev, step, src=f"net.py:{10 + i}")
                y = xs[i + 1]
                gpre = g * (1 - y.astype(np.float64) ** 2)
                gws[i] = gpre * xs[i]
                gx = jitter(gpre * ws[i])
                if (m, "backward") in perturb:
                    gx = gx + perturb[(m, "backward")] * np.sqrt(np.mean(gx * gx))
                gx = cast(gx)
                add("module", m, "backward", "output", gx, ev, step, src=f"net.py:{10 + i}")
                g = gx
            for i in range(n):
                pn = f"{names(i)}.weight"
                gw = gws[i]
                if (pn, "grad") in perturb:
                    gw = gw * (1 + perturb[(pn, "grad")])
                add("grad", pn, "backward", "grad", gw, -1, step, op="")
                ws[i] = ws[i] - 0.01 * gw
                add("param", pn, "update", "param", ws[i], -1, step, op="")
    return path


@pytest.fixture
def net(tmp_path: Path) -> Callable[..., Path]:
    counter = iter(range(1000))

    def make(name: str | None = None, **kw: Any) -> Path:
        return write_net(tmp_path / (name or f"t{next(counter)}"), **kw)

    return make
