"""Plain ``compare`` judges leaf torch.nn modules by float64 replay from the trace (issue 28,
deliver 0): a port default (LayerNorm eps, tanh GELU) is named introducing at every leaf that
makes it; a faithful candidate gets no replay failure; a trace naming a foreign class imports
nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import netparity  # noqa: E402
from netparity.capture.notes import read_notes  # noqa: E402
from netparity.frameworks.torch import leafmods  # noqa: E402


def _capture(path: Path, *, eps: float | None = None, gelu: bool = False,
             dtype: str = "float32") -> Path:
    from tests.corpus import vit_spec

    spec = vit_spec.build(steps=2, batch_size=2, image_size=16, dtype=dtype)
    model = spec["model"]
    for m in model.modules():
        if eps is not None and isinstance(m, torch.nn.LayerNorm):
            m.eps = eps
    if gelu:
        for b in model.blocks:
            b.mlp.act = torch.nn.GELU(approximate="tanh")
    with netparity.capture(model, str(path), level="module", payload="tensors",
                           optimizer=spec["optimizer"]) as cap:
        for x, y in spec["batches"]:
            cap.record_loss(spec["train_step"](x, y))
            cap.step()
    return path


@pytest.fixture(scope="module")
def ref(tmp_path_factory: Any) -> Path:
    return _capture(tmp_path_factory.mktemp("leaf") / "ref")


def _introduced(result: Any) -> list[tuple[int, str]]:
    got = result.settings.get("leaf_replay", {}).get("introduced", [])
    return [(d["step"], d["module"]) for d in got]


def test_port_defaults_are_named_at_every_introducing_leaf(ref: Path, tmp_path: Path) -> None:
    both = _capture(tmp_path / "both", eps=1e-7, gelu=True)
    r = netparity.compare(ref, both)
    assert not r
    names = _introduced(r)
    assert (0, "blocks.0.mlp.act") in names  # parameter-free: every step
    assert (1, "blocks.0.norm1") in names  # parametrised: from step 1 (weights after step 0)
    assert all(n.endswith(("mlp.act", "norm1", "norm2")) or n == "norm" for _, n in names)
    assert any("also introducing" in n for n in r.notes)
    # (a leaf with weights between its bound and PORT_FACTOR x it is left to the table)
    fails = [p for p in r.pairs if p.metrics.get("leaf_replay") and p.status == "fail"
             and "verdict" not in p.metrics["leaf_replay"]]
    assert fails and all("float64 replay" in p.reason for p in fails)


def test_faithful_float64_candidate_has_no_replay_failure(ref: Path, tmp_path: Path) -> None:
    r = netparity.compare(ref, _capture(tmp_path / "f64", dtype="float64"))
    assert _introduced(r) == []
    assert all(p.status == "pass" for p in r.pairs if p.metrics.get("leaf_replay"))
    # only calls whose replay could change a verdict are replayed: a passing output closer than
    # the smallest bound a replay can give (x PORT_FACTOR for a leaf with weights) is left as is
    meta = read_notes(ref / "rank0")["modules"]
    leaf_calls = [c for c in r.calls if c.direction == "forward" and meta.get(c.module)]
    assert 0 < r.settings["leaf_replay"]["calls"] <= len(leaf_calls) // 2
    left = [p for p in r.pairs if p.role == "output" and p.direction == "forward"
            and meta.get(p.module) and "leaf_replay" not in p.metrics and p.step > 0]
    assert left and all(p.status == "pass" for p in left)
    assert any(not meta[p.module]["params"] for p in left)  # parameter-free ones too


def test_a_foreign_class_named_by_a_trace_is_never_imported(tmp_path: Path) -> None:
    assert leafmods.module_class("os.system") is None
    assert leafmods.module_class("system") is None
    assert leafmods.module_class("Module") is None
    assert leafmods.module_class("LayerNorm") is torch.nn.LayerNorm
    meta = {"class": "os.system", "attrs": {}, "training": True, "params": []}
    before = set(sys.modules)
    assert leafmods.build_leaf(meta, {}) is None
    assert leafmods.build_leaf({**meta, "class": "GELU", "attrs": {"__class__": "x"}}, {}) is None
    assert set(sys.modules) == before
    json.dumps(meta)


def test_nothing_to_replay_costs_no_torch_import(ref: Path) -> None:
    # a trace against itself: every leaf's output agrees exactly, so no call could change a
    # verdict and plain compare must not pay for importing PyTorch (most of its time before)
    import subprocess

    code = ("import sys, netparity; r = netparity.compare(sys.argv[1], sys.argv[1]); "
            "print(bool(r), 'leaf_replay' in r.settings, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(ref)], capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["True", "False", "False"]
