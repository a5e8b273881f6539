"""Plain ``compare`` judges the gradients of leaf torch.nn modules by float64 replay of the
reference module's backward (issue 28, deliver 0/1): a candidate whose forward is identical
but whose backward is not (a GELU differentiated as its tanh approximation, a LayerNorm whose
input gradient is scaled) is a FAIL naming that leaf in backward, culprits listed from the loss
backwards; a faithful candidate gets no backward replay failure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tests.safety.helpers import run_cli  # noqa: E402

import netparity  # noqa: E402

F = torch.nn.functional


class _TanhGrad(torch.autograd.Function):
    """Exact GELU forward, the tanh approximation's derivative backward."""

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        ctx.save_for_backward(x)
        return F.gelu(x)

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            xx = x.detach().requires_grad_(True)
            return torch.autograd.grad(F.gelu(xx, approximate="tanh"), xx, g)[0]


class _ScaleGrad(torch.autograd.Function):
    """Identity forward, the gradient x 1.01 backward."""

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        return g * 1.01


class _BadGELU(torch.nn.Module):  # (not a torch.nn class: only the reference is replayed)
    def forward(self, x: Any) -> Any:
        return _TanhGrad.apply(x)


class _BadLayerNorm(torch.nn.LayerNorm):
    def forward(self, x: Any) -> Any:
        return F.layer_norm(_ScaleGrad.apply(x), self.normalized_shape, self.weight, self.bias,
                            self.eps)


class _Net(torch.nn.Module):
    """The activation is called twice a step (two backward calls to pair with forward calls)."""

    def __init__(self, gelu: bool, norm: bool) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 32)
        self.act = _BadGELU() if gelu else torch.nn.GELU()
        self.norm = (_BadLayerNorm if norm else torch.nn.LayerNorm)(32)
        self.fc2 = torch.nn.Linear(32, 32)
        self.head = torch.nn.Linear(32, 4)

    def forward(self, x: Any) -> Any:
        h = self.norm(self.act(self.fc1(x)))
        return self.head(self.act(self.fc2(h)))


def _capture(path: Path, *, gelu: bool = False, norm: bool = False,
             dtype: Any = torch.float32, threads: int = 1) -> Path:
    torch.manual_seed(0)
    model = _Net(gelu, norm).to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with netparity.capture(model, str(path), level="module", payload="tensors",
                               optimizer=opt) as cap:
            for _ in range(3):
                x = torch.randn(16, 8, generator=g).to(dtype)
                y = torch.randint(0, 4, (16,), generator=g)
                opt.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                cap.record_loss(loss)
                cap.step()
    finally:
        torch.set_num_threads(before)
    return path


@pytest.fixture(scope="module")
def ref(tmp_path_factory: Any) -> Path:
    return _capture(tmp_path_factory.mktemp("leafback") / "ref")


def _introduced(result: Any) -> list[tuple[int, str]]:
    got = result.settings.get("leaf_replay_backward", {}).get("introduced", [])
    return [(d["step"], d["module"]) for d in got]


def test_a_wrong_backward_is_named_at_its_leaf_from_the_loss_backwards(ref: Path,
                                                                        tmp_path: Path) -> None:
    cand = _capture(tmp_path / "both", gelu=True, norm=True, dtype=torch.float64)
    r = netparity.compare(ref, cand)
    assert not r
    names = _introduced(r)
    # the GELU (parameter-free, both calls of every step) and the LayerNorm (from step 1)
    assert {(s, "act") for s in range(3)} <= set(names)
    assert (1, "norm") in names and (0, "norm") not in names
    assert {n for _, n in names} == {"act", "norm"}
    # backward order, from the loss: the second GELU call, then the LayerNorm, then the first
    step1 = [n for s, n in names if s == 1]
    assert step1 == ["act", "norm", "act"]
    judged = [p for p in r.all_pairs()
              if p.metrics.get("leaf_replay", {}).get("direction") == "backward"]
    fails = [p for p in judged if p.status == "fail"]
    assert fails and all(p.module in ("act", "norm") and "introduced in backward" in p.reason
                         for p in fails)
    assert all(p.status == "pass" for p in judged if p.module not in ("act", "norm"))
    # a faithful leaf fed the wrong gradient is cleared by its own replay, weights included
    cleared = [p for p in r.params if p.kind == "grad" and p.step >= 1
               and p.module.startswith("fc1.")]
    assert cleared and all(p.status == "pass" and "within the replayed noise" in p.reason
                           for p in cleared)


def test_plain_compare_exits_1_on_a_backward_only_difference(ref: Path, tmp_path: Path) -> None:
    cand = _capture(tmp_path / "gelu", gelu=True, dtype=torch.float64)
    p = run_cli("compare", str(ref), str(cand))
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-2000:]
    assert p.stdout.startswith("FAIL")
    assert "in backward" in p.stdout and "act (step 0) first" in p.stdout


@pytest.mark.parametrize("kind", ["float64", "2 threads"])
def test_a_faithful_candidate_has_no_backward_replay_failure(ref: Path, tmp_path: Path,
                                                            kind: str) -> None:
    cand = _capture(tmp_path / "ok", dtype=torch.float64) if kind == "float64" \
        else _capture(tmp_path / "ok", threads=2)
    r = netparity.compare(ref, cand)
    assert _introduced(r) == []
    assert not [p for p in r.all_pairs() if p.status == "fail"]
    assert all(p.status == "pass" for p in r.all_pairs()
               if p.metrics.get("leaf_replay", {}).get("direction") == "backward")
