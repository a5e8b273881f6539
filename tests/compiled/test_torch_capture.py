"""``torch.compile``d models under capture (issue 30, item 3): recorded at the compiled module's
boundary (forward and backward) with the eager model's names, or run eagerly for the inside.

Before: dynamo traced the capture's own hooks and every capture of a compiled model failed
(``AssertionError ... no_dispatch()`` from fake tensors). One tiny model is compiled once per
module (inductor on CPU); each capture reuses the compiled code.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import netparity  # noqa: E402
from netparity.trace import open_trace  # noqa: E402


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


@pytest.fixture(scope="module")
def compiled() -> tuple[torch.nn.Module, torch.nn.Module]:
    """(eager model, torch.compile of a copy with the same weights), compiled once."""
    eager, other = _net(), _net()
    cm = torch.compile(other)
    cm(torch.ones(2, 8, requires_grad=True)).sum().backward()
    other.zero_grad()
    return eager, cm


def _train(model: torch.nn.Module, path: str, steps: int = 2, **kw: object) -> None:
    params = model.parameters()
    opt = torch.optim.SGD(params, lr=0.1)
    with netparity.capture(model, path, optimizer=opt, overwrite=True, **kw) as cap:
        for i in range(steps):
            x = torch.full((2, 8), 0.5 + i, requires_grad=True)
            loss = model(x).sum()
            cap.record_loss(loss)
            loss.backward()
            opt.step()
            opt.zero_grad()
            cap.step()


def _kinds(path: str) -> Counter[tuple[str, str, str, str]]:
    return Counter((r.kind, r.module, r.direction, r.role)
                   for r in open_trace(path).records() if r.step == 0)


def test_boundary_forward_backward_and_eager_names(compiled, tmp_path) -> None:
    import torch._dynamo as dynamo

    eager, cm = compiled
    dynamo.utils.counters.clear()
    _train(cm, str(tmp_path / "c"))
    _train(eager, str(tmp_path / "e"))
    got = _kinds(str(tmp_path / "c"))
    # the boundary, both directions, with the eager model's root path and class
    for key in [("module", "", "forward", "input"), ("module", "", "forward", "output"),
                ("module", "", "backward", "input"), ("module", "", "backward", "output")]:
        assert got[key] == 1, (key, got)
    assert not any(k[0] == "module" and k[1] for k in got), got  # nothing inside the region
    names = {k[1] for k in got if k[0] in ("grad", "param")}
    assert names == {"0.weight", "0.bias", "2.weight", "2.bias"}, names  # no "_orig_mod."
    assert not dynamo.utils.counters["graph_break"]  # the capture did not cut the graph
    tr, te = open_trace(str(tmp_path / "c")), open_trace(str(tmp_path / "e"))
    assert tr.manifest["compiled"]["regions"] == [""]
    assert tr.manifest["compiled"]["mode"] == "boundary"

    def root(t):
        return {(r.step, r.direction, r.role, r.arg): r for r in t.records(kind="module")
                if r.module == ""}

    rc, re_ = root(tr), root(te)
    assert rc.keys() <= re_.keys()
    for k, r in rc.items():
        assert r.native == re_[k].native == "torch.nn.Sequential"
        assert np.isclose(r.stats["mean"], re_[k].stats["mean"], rtol=1e-4, atol=1e-6), k


def test_in_place_compiled_submodule(tmp_path) -> None:
    """``module.compile()`` traces the module's own hooks: the boundary's run outside the graph."""
    m = _net()
    m[0].compile()
    _train(m, str(tmp_path / "c"), steps=1)
    got = _kinds(str(tmp_path / "c"))
    assert got[("module", "0", "forward", "output")] == 1
    assert got[("module", "0", "backward", "output")] == 1
    assert open_trace(str(tmp_path / "c")).manifest["compiled"]["regions"] == ["0"]


@pytest.mark.parametrize("kw", [{"compiled": "eager"}, {"level": "op"}, {"level": "both"}],
                         ids=["eager", "op", "both"])
def test_eager_inside(compiled, tmp_path, kw) -> None:
    """The inside, run eagerly (asked for, or implied by op level), module by module; the
    compiler's stance comes back after the capture."""
    _eager, cm = compiled
    _train(cm, str(tmp_path / "c"), steps=1, **kw)
    got = _kinds(str(tmp_path / "c"))
    kind = "op" if kw.get("level") == "op" else "module"
    assert {k[1] for k in got if k[0] == kind} >= {"0", "2"}, got
    assert got[("module", "", "forward", "output")] == (0 if kind == "op" else 1)
    assert open_trace(str(tmp_path / "c")).manifest["compiled"]["mode"] == "eager"
    from torch._dynamo import eval_frame  # the default stance is restored

    assert eval_frame._stance.stance == "default"


@pytest.mark.parametrize("kw", [{"stop_on_nonfinite": True}, {"timing": True},
                                {"level": "module", "stop_on_nonfinite": True}],
                         ids=["light-stop", "timing", "module-stop"])
def test_every_capture_kind_runs_a_compiled_model(compiled, tmp_path, kw) -> None:
    """Every way the capture hooks modules (hook_forward's callers, the timing's hooks) works on
    a compiled model and leaves its compiled graph whole (the timing's hooks inside the region
    cut it into 17 graphs at 21 breaks)."""
    import torch._dynamo as dynamo

    _eager, cm = compiled
    dynamo.utils.counters.clear()
    _train(cm, str(tmp_path / "c"), steps=1, **kw)
    assert any(r.kind == "loss" for r in open_trace(str(tmp_path / "c")).records())
    assert not dynamo.utils.counters["graph_break"], dynamo.utils.counters["graph_break"]


def test_profile_of_a_compiled_model(compiled, tmp_path) -> None:
    import torch._dynamo as dynamo

    _eager, cm = compiled
    dynamo.utils.counters.clear()
    opt = torch.optim.SGD(cm.parameters(), lr=0.1)
    with netparity.profile(cm, str(tmp_path / "p"), optimizer=opt):
        for _ in range(2):
            cm(torch.ones(2, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
    assert not dynamo.utils.counters["graph_break"]
    tr = open_trace(str(tmp_path / "p"))
    assert {r.module for r in tr.records() if r.module} <= {""}, "inside a compiled region"
    assert [n for n, _ in tr.manifest["params"]] == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_bad_mode_is_one_line(compiled, tmp_path) -> None:
    from netparity.errors import UsageError

    with pytest.raises(UsageError, match="compiled must be"):
        netparity.capture(compiled[1], str(tmp_path / "c"), compiled="inside")


def test_zero_code_run_of_a_compiled_script(tmp_path) -> None:
    """``netparity run`` (global module hooks) of an unchanged script using torch.compile: the
    script ran into dynamo tracing the hooks and died; now the compiled model's boundary is
    recorded in both directions, with every parameter's gradient and update."""
    import sys
    from pathlib import Path

    from safety.helpers import run_cli  # (tests/ is on sys.path)

    script = Path(__file__).parent / "scripts" / "torch_compile_train.py"
    p = run_cli("run", "-o", str(tmp_path / "t"), "--", sys.executable, str(script))
    assert p.returncode == 0, p.stderr[-3000:]
    got = _kinds(str(tmp_path / "t"))
    for key in [("module", "", "forward", "output"), ("module", "", "backward", "input"),
                ("grad", "0.weight", "backward", "grad"), ("param", "2.bias", "update", "param")]:
        assert got[key] == 1, (key, got)
    assert not any(k[0] == "module" and k[1] in ("0", "1", "2") for k in got), got
