"""The parameter order alignment derives module pairs from (``core._owned_params``), read with a
column scan: the parameters of the first step that has any, else the first step's gradients in
reverse (backward makes them last layer first); one entry per (name, shape)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from netparity.align import align_traces
from netparity.align.core import _owned_params
from netparity.errors import UsageError
from netparity.stats import compute_stats
from netparity.trace import Record, TraceWriter, open_trace
from netparity.trace.columnar import compact


def _rec(kind: str, name: str, shape: tuple[int, ...], step: int) -> Record:
    a = np.ones(shape, np.float32)
    return Record(kind=kind, module=name, op=kind, role=kind, dtype="float32", shape=shape,
                  step=step, direction="update" if kind == "param" else "backward",
                  stats=compute_stats(a))


def _trace(path: Path, recs: list[Record]) -> Path:
    with TraceWriter(path, manifest={"framework": "numpy"}) as w:
        for r in recs:
            w.add(r)
    return path


@pytest.mark.parametrize("columnar", [False, True])
def test_params_of_the_first_step_in_recorded_order(tmp_path, columnar):
    recs = [_rec("grad", "fc.weight", (2, 4), 0),  # grads are ignored when params exist
            _rec("param", "conv.weight", (4, 3), 1), _rec("param", "fc.weight", (2, 4), 1),
            _rec("param", "conv.weight", (4, 3), 1),  # the same again: listed once
            _rec("param", "conv.weight", (4, 3), 2), _rec("param", "bn.bias", (4,), 2)]
    p = _trace(tmp_path / "t", recs)
    if columnar:
        compact(p)
    assert _owned_params(open_trace(p), 0) == [("conv.weight", (4, 3)), ("fc.weight", (2, 4))]


def test_without_params_the_first_steps_gradients_reversed(tmp_path):
    recs = [_rec("grad", "fc.weight", (2, 4), 3), _rec("grad", "conv.weight", (4, 3), 3),
            _rec("grad", "bn.bias", (4,), 3), _rec("grad", "fc.weight", (2, 4), 4)]
    p = _trace(tmp_path / "t", recs)
    assert _owned_params(open_trace(p), 0) == [("bn.bias", (4,)), ("conv.weight", (4, 3)),
                                               ("fc.weight", (2, 4))]


def test_no_params_no_grads_and_a_missing_rank(tmp_path):
    p = _trace(tmp_path / "t", [Record(kind="loss", op="loss", dtype="float32", shape=(),
                                       stats={"mean": 1.0})])
    tr = open_trace(p)
    assert _owned_params(tr, 0) == []
    with pytest.raises(UsageError, match="no rank 5"):
        _owned_params(tr, 5)


def test_renamed_owners_pair_their_modules(tmp_path):
    """What the order is for: the same parameters under other names pair the modules owning
    them (align.ownership), so the module map names them."""
    a = _trace(tmp_path / "a", [_rec("param", "features.0.weight", (8, 3), 1),
                                _rec("param", "classifier.weight", (10, 8), 1)])
    b = _trace(tmp_path / "b", [_rec("param", "backbone.conv.weight", (8, 3), 1),
                                _rec("param", "head.fc.weight", (10, 8), 1)])
    al = align_traces(open_trace(a), open_trace(b))
    # paired through the derived module pairs ("mapping"), not the last-resort shape order
    assert {(p.ref.module, p.cand.module, p.method) for p in al.params} == {
        ("features.0.weight", "backbone.conv.weight", "mapping"),
        ("classifier.weight", "head.fc.weight", "mapping")}
