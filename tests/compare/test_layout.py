"""Op inputs whose layout is a framework convention (flattened ids, transposed weights) are
compared in the matching layout; outputs never are."""

from __future__ import annotations

import numpy as np

import netparity
from netparity.stats import compute_stats
from netparity.trace import Record, TraceWriter, build_manifest


def _op_trace(path, framework, x, w, out):
    with TraceWriter(path, manifest=build_manifest(framework=framework, device="cpu")) as tw:
        ev = tw.next_event()
        for role, arg, a in (("input", "0", x), ("input", "1", w), ("output", "", out)):
            a = np.ascontiguousarray(a, dtype=np.float32)
            tw.add(Record(kind="op", op="matmul", native="mm", module="fc", role=role, arg=arg,
                          event=ev, dtype="float32", shape=a.shape, stats=compute_stats(a)),
                   payload=a)
    return path


def test_transposed_and_reshaped_inputs_pass_outputs_do_not(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    w = rng.standard_normal((4, 4)).astype(np.float32)
    y = (x.reshape(6, 4) @ w).astype(np.float32)
    ref = _op_trace(tmp_path / "ref", "torch", x, w, y)
    # the candidate passes x flattened to (6, 4) and the weight transposed (transpose_b)
    cand = _op_trace(tmp_path / "cand", "mindspore", x.reshape(6, 4), w.T, y)
    r = netparity.compare(ref, cand, level="op")
    by_arg = {p.arg: p for p in r.pairs}
    assert by_arg["0"].metrics["layout"] == "reshaped" and by_arg["0"].status == "pass"
    assert by_arg["1"].metrics["layout"] == "transposed" and by_arg["1"].status == "pass"
    assert r
    # an output in another layout is a real difference
    bad = _op_trace(tmp_path / "bad", "mindspore", x.reshape(6, 4), w.T, y.reshape(3, 8))
    rb = netparity.compare(ref, bad, level="op")
    out = [p for p in rb.pairs if p.role == "output"][0]
    assert out.status == "fail" and "shape mismatch" in out.reason
