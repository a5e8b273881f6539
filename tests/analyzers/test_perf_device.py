"""Device idle and host-bound detection from a profiler trace with CUDA events.

There is no GPU here, so the traces are written by hand, with the event layout of the Chrome
trace that ``torch.profiler`` (Kineto) exports for a CUDA run in PyTorch 2.x: host events
(``ProfilerStep#N`` and data-loader annotations, ``cpu_op``, ``cuda_runtime``
``cudaLaunchKernel``/``cudaStreamSynchronize``) on the process's thread, device events
(``kernel``) on the GPU's own pid/tid (the stream) with ``args.device``/``stream`` and the
launch's ``correlation`` id, host-clock microseconds. Every number the tests expect follows
from how the trace is built. The analysis has not been checked on a real GPU trace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from netparity.analyzers.perf import analyze
from netparity.cli import main

STEP_US = 30_000.0
T0 = 1_700_000_000_000.0  # Kineto's timestamps: host-clock microseconds
HOST, DEVICE, STREAM = 4242, 0, 7
SMALL_OP_US, SMALL_KERNEL_US, LAUNCH_TO_KERNEL_US = 50.0, 10.0, 15.0
BIG_KERNEL_US = 8000.0


def _x(name: str, cat: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    gpu = cat == "kernel"  # on the device's timeline: pid the GPU, tid the stream
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur,
            "pid": DEVICE if gpu else HOST, "tid": STREAM if gpu else HOST, "args": args}


def _trace(path: Path, *, data_us: float, small_ops: int, steps: int = 4,
           step_us: float = STEP_US) -> Path:
    """Each step: a data-loader wait of ``data_us`` (the device has nothing to do), then
    ``small_ops`` host ops of 50 us each launching a 10 us kernel (the device waits for the
    host between them), then one 8 ms kernel the host synchronises on; the step window is 30 ms
    (``step_us``; the rest: host outside any traced op)."""
    ev: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": DEVICE, "tid": 0, "args": {"name": "GPU 0"}},
        {"ph": "M", "name": "thread_name", "pid": DEVICE, "tid": STREAM,
         "args": {"name": f"stream {STREAM}"}}]
    corr = 1
    for k in range(steps):
        s = T0 + k * step_us
        ev.append(_x(f"ProfilerStep#{k}", "user_annotation", s, step_us))
        t = s
        if data_us:
            ev.append(_x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                         "user_annotation", t, data_us))
            t += data_us
        for _ in range(small_ops):
            ev.append(_x("aten::add", "cpu_op", t, SMALL_OP_US, **{"External id": corr}))
            ev.append(_x("cudaLaunchKernel", "cuda_runtime", t + 30, 10, correlation=corr))
            ev.append(_x("void at::native::vectorized_elementwise_kernel<4>", "kernel",
                         t + 30 + LAUNCH_TO_KERNEL_US, SMALL_KERNEL_US, correlation=corr,
                         device=DEVICE, stream=STREAM))
            corr += 1
            t += SMALL_OP_US
        ev.append(_x("aten::mm", "cpu_op", t, 20))
        ev.append(_x("cudaLaunchKernel", "cuda_runtime", t + 5, 10, correlation=corr))
        ev.append(_x("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32", "kernel",
                     t + 5 + LAUNCH_TO_KERNEL_US, BIG_KERNEL_US, correlation=corr,
                     device=DEVICE, stream=STREAM))
        corr += 1
        ev.append(_x("cudaStreamSynchronize", "cuda_runtime", t + 20, BIG_KERNEL_US + 2))
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3",
                                                     "totalGlobalMem": 85_000_000_000}],
           "traceEvents": ev, "displayTimeUnit": "ms", "traceName": str(path)}
    path.write_text(json.dumps(doc))
    return path


def test_idle_device_waiting_for_the_data_loader(tmp_path: Path) -> None:
    r = analyze(_trace(tmp_path / "data.pt.trace.json", data_us=15_000, small_ops=100))
    d = r.device["devices"]["cuda:0"]
    busy = (100 * SMALL_KERNEL_US + BIG_KERNEL_US) / 1e6
    assert abs(d["busy"] - busy) < 1e-6 and abs(d["idle"] - (STEP_US / 1e6 - busy)) < 1e-6
    by = d["idle_by_host"]
    assert abs(by["data"] - 0.015) < 1e-6  # the whole loader wait
    # the host is in an op while the device waits: 45 us before the first small kernel, 40 us
    # between two, 15 us between the last and the big one (aten::mm launching it)
    assert abs(by["host"] - (45 + 99 * 40 + 15) / 1e6) < 1e-6
    # the device is busy while the host synchronises, but for the 2 us the host takes to return
    assert abs(by["sync"] - 2e-6) < 1e-9
    assert abs(r.device["launch_delay_median"] - LAUNCH_TO_KERNEL_US / 1e6) < 1e-9
    f = next(f for f in r.findings if f.kind == "device-idle")
    assert f.where == "cuda:0" and "data loader" in f.advice and "num_workers" in f.advice
    assert f.share is not None and abs(f.share - d["idle"] / 0.03) < 1e-6


def test_host_bound_device_is_told_to_launch_less(tmp_path: Path) -> None:
    path = _trace(tmp_path / "host.pt.trace.json", data_us=0, small_ops=400)
    r = analyze(path)
    d = r.device["devices"]["cuda:0"]
    by = d["idle_by_host"]
    assert by["host"] > 0.015 and by["host"] > 5 * (by["data"] + by["none"])
    f = next(f for f in r.findings if f.kind == "device-idle")
    assert "host-bound" in f.advice and "CUDA graph" in f.advice
    assert f"{d['gaps']:.0f} gap(s)" in f.evidence and d["gaps"] >= 400
    out = tmp_path / "r.json"
    assert main(["perf", str(path), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["device"]["devices"]["cuda:0"]["idle"] == d["idle"]
    assert any(x["kind"] == "device-idle" for x in doc["findings"])


def test_busy_device_is_no_finding(tmp_path: Path) -> None:
    # no loader wait, no small ops: only the 8 ms kernel in a window cut to fit it
    r = analyze(_trace(tmp_path / "busy.pt.trace.json", data_us=0, small_ops=0,
                       step_us=BIG_KERNEL_US + 40))
    d = r.device["devices"]["cuda:0"]
    assert d["idle"] < 0.2 * (BIG_KERNEL_US + 40) / 1e6
    assert not any(f.kind == "device-idle" for f in r.findings)
