"""PyTorch capture: what is recorded, attribution, policies, restoration, and no effect on the run."""

from __future__ import annotations

import math
import weakref

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from torch.utils._python_dispatch import _get_current_dispatch_mode_stack  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

from netparity import hoststats  # noqa: E402
from netparity.frameworks.torch.adapter import TorchAdapter  # noqa: E402
from netparity.frameworks.torch.capture import capture  # noqa: E402
from netparity.stats import compute_stats  # noqa: E402
from netparity.trace import open_trace  # noqa: E402


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU(inplace=True)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):  # type: ignore[no-untyped-def]
        x = self.relu(self.bn(self.conv(x)))
        return self.fc(x.mean((2, 3)))


def _train(model, steps, cap=None, seed=0, opt_cls=torch.optim.SGD):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(seed)
    opt = opt_cls(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(steps):
        x = torch.randn(4, 3, 6, 6, generator=g)
        y = torch.randint(0, 3, (4,), generator=g)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if cap is not None:
            cap.record_loss(loss)
            cap.step()
        losses.append(loss.detach().clone())
    return losses, opt


def _no_hooks_left(model: nn.Module) -> None:
    for m in model.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks
        assert not m._backward_hooks and not m._backward_pre_hooks
        assert not getattr(m, "_forward_hooks_always_called", {})
    import torch.nn.modules.module as mm
    import torch.optim.optimizer as om

    assert not mm._global_forward_hooks and not mm._global_forward_pre_hooks
    assert not om._global_optimizer_pre_hooks and not om._global_optimizer_post_hooks
    assert _get_current_dispatch_mode_stack() == []


def test_module_level_conv_bn_inplace_relu(tmp_path) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    m = ConvNet()
    with capture(m, tmp_path / "t") as cap:
        _train(m, 2, cap)
    _no_hooks_left(m)
    tr = open_trace(tmp_path / "t")
    assert tr.steps() == [0, 1]
    fwd = tr.records(step=0, kind="module", direction="forward")
    assert [(r.module, r.role) for r in fwd] == [
        ("", "input"), ("conv", "input"), ("conv", "output"), ("bn", "input"), ("bn", "output"),
        ("relu", "input"), ("relu", "output"), ("fc", "input"), ("fc", "output"), ("", "output")]
    conv = [r for r in fwd if r.module == "conv"]
    assert conv[0].event == conv[1].event and conv[0].native == "torch.nn.Conv2d"
    assert conv[0].op == "conv" and conv[0].source.startswith("test_torch_capture.py:")
    # the in-place ReLU: its input record is the BN output before it was overwritten
    bn_out = next(r for r in fwd if r.module == "bn" and r.role == "output")
    relu_in = next(r for r in fwd if r.module == "relu" and r.role == "input")
    relu_out = next(r for r in fwd if r.module == "relu" and r.role == "output")
    assert relu_in.stats["min"] < 0 and relu_out.stats["min"] == 0.0
    assert relu_in.stats == bn_out.stats
    bwd = tr.records(step=0, kind="module", direction="backward")
    got = {(r.module, r.role) for r in bwd}
    assert {("conv", "input"), ("bn", "input"), ("bn", "output"), ("relu", "input"),
            ("relu", "output"), ("fc", "input"), ("fc", "output"), ("", "input")} <= got
    params = tr.records(step=0, kind="param")
    grads = tr.records(step=0, kind="grad")
    # parameters and the float buffers training updates (BN running statistics)
    assert {r.module for r in params} == {n for n, _ in m.named_parameters()} | {
        "bn.running_mean", "bn.running_var"}
    assert all(r.direction == "update" and r.role == "param" for r in params)
    assert {r.module for r in grads} == {n for n, _ in m.named_parameters()}
    assert all(r.direction == "backward" and r.role == "grad" for r in grads)
    (loss,) = tr.records(step=0, kind="loss")
    assert loss.op == "loss" and loss.module == "" and loss.shape == ()


def test_param_and_grad_values_are_exact(tmp_path) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    m = ConvNet()
    with capture(m, tmp_path / "t", payload="tensors") as cap:
        _train(m, 1, cap)
    tr = open_trace(tmp_path / "t")
    for r in tr.records(kind="param"):
        state = dict(m.state_dict())  # parameters and buffers
        np.testing.assert_array_equal(tr.tensor(r), state[r.module].detach().numpy())
    for r in tr.records(kind="grad"):
        np.testing.assert_array_equal(tr.tensor(r), dict(m.named_parameters())[r.module].grad.numpy())


class Shared(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x, *, scale=None, extra=None):  # type: ignore[no-untyped-def]
        y = self.lin(self.lin(x)) * scale
        return {"y": y, "pair": (y.sum(), [x * 2])}


def test_shared_module_kwargs_and_nested_outputs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    m = Shared()
    x = torch.randn(2, 3, requires_grad=True)
    with capture(m, tmp_path / "t") as cap:
        out = m(x, scale=torch.tensor(2.0), extra=(torch.ones(1), {"k": torch.zeros(2)}))
        (out["y"].sum() + out["pair"][0]).backward()
        cap.step()
    tr = open_trace(tmp_path / "t")
    lin = tr.records(kind="module", module="lin", direction="forward")
    assert sorted({(r.call, r.role) for r in lin}) == [(0, "input"), (0, "output"), (1, "input"),
                                                       (1, "output")]
    assert len({r.event for r in lin}) == 2
    root_in = tr.records(kind="module", module="", direction="forward", role="input")
    assert [r.arg for r in root_in] == ["0", "kw.scale", "kw.extra.0", "kw.extra.1.k"]
    root_out = tr.records(kind="module", module="", direction="forward", role="output")
    assert [r.arg for r in root_out] == ["y", "pair.0", "pair.1.0"]
    lin_b = tr.records(kind="module", module="lin", direction="backward")
    assert {r.call for r in lin_b} == {0, 1}
    # backward call 0 is the second forward call (backward runs in reverse)
    g_in = [r for r in lin_b if r.role == "output"]
    assert len(g_in) == 2


def test_lstm_and_stats_match_live_tensors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    m = nn.LSTM(4, 5, batch_first=True)
    x = torch.randn(2, 3, 4)
    with capture(m, tmp_path / "t", payload="tensors") as cap:
        out, (h, c) = m(x)
        out.sum().backward()
        cap.step()
    tr = open_trace(tmp_path / "t")
    outs = tr.records(kind="module", direction="forward", role="output")
    assert [r.arg for r in outs] == ["0", "1.0", "1.1"]
    a = TorchAdapter()
    for rec, t in zip(outs, (out, h, c)):
        np.testing.assert_array_equal(tr.tensor(rec), t.detach().numpy())
        ref = compute_stats(a.to_numpy(t))
        for k, v in ref.items():
            assert rec.stats[k] == pytest.approx(v, rel=1e-6, abs=1e-9)


class Blocks(nn.Module):
    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.b = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
        self.reentrant = reentrant

    def forward(self, x):  # type: ignore[no-untyped-def]
        x = self.a(x)
        x = checkpoint(self.b, x, use_reentrant=self.reentrant)
        return x.sum()


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing(tmp_path, reentrant: bool) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    m = Blocks(reentrant)
    x = torch.randn(3, 4, requires_grad=True)
    with capture(m, tmp_path / "t", level="both") as cap:
        m(x).backward()
        cap.step()
    _no_hooks_left(m)
    tr = open_trace(tmp_path / "t")
    fwd = tr.records(kind="module", direction="forward", role="output")
    # recomputation inside backward is not recorded as a second forward call
    assert [r.module for r in fwd].count("b.0") == 1
    bwd = tr.records(kind="module", direction="backward")
    assert {"b.0", "b.1", "a.0"} <= {r.module for r in bwd}
    assert all(r.call == 0 for r in bwd)
    ops_b = tr.records(kind="op", direction="backward")
    assert any(r.module == "b.0" and r.op == "matmul" for r in ops_b)
    assert any(r.module == "a.0" and r.op == "matmul" for r in ops_b)
    ops_f = tr.records(kind="op", direction="forward", module="b.0")
    assert len({r.call for r in ops_f}) == len({r.event for r in ops_f})


def test_op_level_attribution(tmp_path) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    m = ConvNet()
    with capture(m, tmp_path / "t", level="op") as cap:
        _train(m, 1, cap)
    tr = open_trace(tmp_path / "t")
    assert not tr.records(kind="module")
    fwd = tr.records(kind="op", direction="forward")
    conv = [r for r in fwd if r.native == "aten.convolution.default"]
    assert conv and all(r.module == "conv" and r.op == "conv" and r.module_call == 0
                        for r in conv)
    assert {r.role for r in conv} == {"input", "output"} and len({r.event for r in conv}) == 1
    assert [r.arg for r in conv if r.role == "input"] == ["0", "1", "2"]
    assert conv[0].extra["scalars"]["3.0"] == 1  # stride
    bwd = tr.records(kind="op", direction="backward")
    conv_b = {r.module for r in bwd if r.native == "aten.convolution_backward.default"}
    assert conv_b == {"conv"}
    bn_b = {r.module for r in bwd if r.op == "batch_norm_backward"}
    assert bn_b == {"bn"}
    relu_b = {r.module for r in bwd if r.op == "relu_backward"}
    assert relu_b == {"relu"}
    # the mean in ConvNet.forward belongs to the root module in both directions
    assert any(r.module == "" and r.module_call == 0 and r.op == "mean" for r in fwd)
    upd = tr.records(kind="op", direction="update")
    assert upd and all(r.direction == "update" for r in upd)
    assert any(r.op == "add" for r in upd)
    # op indices inside one module call are consecutive
    calls = sorted({r.call for r in tr.records(kind="op", direction="forward", module="bn")})
    assert calls == list(range(len(calls)))


def test_payload_tensors_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4).to(torch.bfloat16), nn.ReLU())
    x = torch.randn(2, 4).to(torch.bfloat16)
    with capture(m, tmp_path / "t", payload="tensors", level="both") as cap:
        y = m(x)
        cap.record("batch", {"x": x, "idx": torch.arange(3)}, kind="data")
        cap.step()
    tr = open_trace(tmp_path / "t")
    (out,) = tr.records(kind="module", module="", role="output")
    assert out.dtype == "bfloat16"
    np.testing.assert_array_equal(tr.tensor(out), y.detach().float().numpy())
    data = tr.records(kind="data")
    assert [(r.module, r.arg, r.dtype) for r in data] == [("batch", "x", "bfloat16"),
                                                          ("batch", "idx", "int64")]
    np.testing.assert_array_equal(tr.tensor(data[1]), np.arange(3))
    for r in tr.records(kind="op"):
        assert r.has_payload


def test_payload_hash_and_max_bytes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    m = nn.Linear(64, 64)
    x = torch.ones(8, 64)
    with capture(m, tmp_path / "h", payload="hash") as cap:
        m(x)
        cap.step()
    recs = open_trace(tmp_path / "h").records(kind="module")
    assert recs and all(r.hash and not r.has_payload for r in recs)
    with capture(m, tmp_path / "b", payload="tensors", max_bytes=3000) as cap:
        m(x)
        m(x)
        cap.step()
    recs = open_trace(tmp_path / "b").records(kind="module", direction="forward")
    stored = [r for r in recs if r.has_payload]
    assert 0 < len(stored) < len(recs)
    assert sum(r.nbytes for r in stored) <= 3000
    assert all(r.extra.get("payload_skipped") == "max_bytes" for r in recs if not r.has_payload)
    assert all(r.stats["norm"] is not None for r in recs)


def test_steps_include_exclude_directions(tmp_path) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    m = ConvNet()
    with capture(m, tmp_path / "t", level="both", steps="1", include=["conv", "bn*"],
                 exclude=["bn.bias"], directions=("forward",)) as cap:
        _train(m, 3, cap)
    tr = open_trace(tmp_path / "t")
    assert tr.steps() == [1]
    assert {r.module for r in tr.records(kind="module")} == {"conv", "bn"}
    assert {r.module for r in tr.records(kind="op")} <= {"conv", "bn"}
    assert not tr.records(direction="backward")
    assert {r.module for r in tr.records(kind="param")} == {"conv.weight", "conv.bias",
                                                            "bn.weight", "bn.running_mean",
                                                            "bn.running_var"}


def test_restore_on_exception(tmp_path) -> None:  # type: ignore[no-untyped-def]
    m = ConvNet()
    before = {name: dict(mod._forward_hooks) for name, mod in m.named_modules()}
    with pytest.raises(RuntimeError), capture(m, tmp_path / "t", level="both") as cap:
        m(torch.randn(2, 3, 4, 4))
        cap.step()
        m(torch.randn(2, 5, 4, 4))  # wrong channel count: conv raises inside the capture
    _no_hooks_left(m)
    assert before == {name: dict(mod._forward_hooks) for name, mod in m.named_modules()}
    tr = open_trace(tmp_path / "t")  # readable, closed
    assert tr.records(step=0, kind="module")
    # the model still runs normally afterwards
    m(torch.randn(2, 3, 4, 4))


def test_decorator(tmp_path) -> None:  # type: ignore[no-untyped-def]
    m = nn.Linear(2, 2)
    cap = capture(m, tmp_path / "t")

    @cap
    def run() -> None:
        m(torch.ones(1, 2))
        cap.step()

    run()
    run()
    _no_hooks_left(m)
    cap.close()
    assert open_trace(tmp_path / "t").steps() == [0, 1]


@pytest.mark.parametrize("level", ["module", "op", "both"])
def test_capture_does_not_change_the_run(tmp_path, level: str) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    ref = ConvNet()
    state = {k: v.clone() for k, v in ref.state_dict().items()}
    losses_ref, _ = _train(ref, 3)
    m = ConvNet()
    m.load_state_dict(state)
    with capture(m, tmp_path / level, level=level, payload="tensors") as cap:
        losses, _ = _train(m, 3, cap)
    for a, b in zip(losses_ref, losses):
        assert torch.equal(a, b)
    for (n, p), (_, q) in zip(ref.state_dict().items(), m.state_dict().items()):
        assert torch.equal(p, q), n


def test_dtypes_through_ops(tmp_path) -> None:  # type: ignore[no-untyped-def]
    class Mixed(nn.Module):
        def forward(self, x):  # type: ignore[no-untyped-def]
            z = torch.complex(x, x * 2)
            mask = x > 0
            return (z.abs() * mask).to(torch.float16), torch.tensor([1, 2, 3]) * 2

    mixed = Mixed()
    with capture(mixed, tmp_path / "t", level="both") as cap:
        mixed(torch.randn(5))
        cap.step()
    tr = open_trace(tmp_path / "t")
    dtypes = {r.dtype for r in tr.records(kind="op")}
    assert {"complex64", "bool", "float16", "int64", "float32"} <= dtypes
    for r in tr.records(kind="op"):
        assert r.stats["nan"] == 0 and not math.isnan(r.stats["norm"])


class _Residual(torch.nn.Module):
    """x feeds both conv (through an in-place ReLU) and the identity shortcut."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 3, 3, padding=1)
        self.relu = torch.nn.ReLU(inplace=True)
        self.head = torch.nn.Linear(3 * 4 * 4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.conv(x)) + x
        return self.head(y.flatten(1))


def test_module_input_gradient_is_the_modules_own_contribution(tmp_path) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    m = _Residual()
    x0 = torch.randn(2, 3, 4, 4)
    # Reference: what register_full_backward_hook reports for conv (its grad_input), on a copy.
    ref_model = _Residual()
    ref_model.load_state_dict(m.state_dict())
    ref_model.relu.inplace = False  # full_backward_hook itself cannot handle the in-place ReLU
    seen: dict[str, torch.Tensor] = {}

    def keep(mod, gi, go):  # type: ignore[no-untyped-def]
        seen["conv"] = gi[0].detach().clone()

    ref_model.conv.register_full_backward_hook(keep)
    xr = x0.clone().requires_grad_(True)
    ref_model(xr).sum().backward()
    x = x0.clone().requires_grad_(True)
    with capture(m, tmp_path / "t", payload="tensors") as cap:
        m(x).sum().backward()
        cap.step()
    tr = open_trace(tmp_path / "t")
    (rec,) = tr.records(kind="module", module="conv", direction="backward", role="output")
    got = tr.tensor(rec)
    np.testing.assert_allclose(got, seen["conv"].numpy(), rtol=1e-6, atol=1e-7)
    # ...which is not the input's total gradient (conv path + shortcut)
    assert not np.allclose(got, xr.grad.numpy(), atol=1e-4)


class _TwoEdgeBlock(torch.nn.Module):
    """The block's input feeds two edges inside it (conv path and shortcut), like a ResNet block."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.relu = torch.nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.conv(x)) + x


def test_summed_input_gradient_statistics_without_materialising(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """With statistics only, a module's gradient w.r.t. an input that feeds several of its
    edges is described from the contributions themselves (the C kernel adds them as autograd
    does): same statistics as the stored sum and as register_full_backward_hook's grad_input.
    A container around the block gets the same gradient from the same contributions: one sum."""
    torch.manual_seed(0)
    stem = torch.nn.Conv2d(3, 16, 3, padding=1)
    block = _TwoEdgeBlock()
    net = torch.nn.Sequential(stem, torch.nn.Sequential(block))
    x0 = torch.randn(8, 3, 32, 32)  # 131072 elements per gradient: split between threads
    seen: dict[str, torch.Tensor] = {}
    ref = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1),
                              torch.nn.Sequential(_TwoEdgeBlock()))
    ref.load_state_dict(net.state_dict())
    ref[1][0].register_full_backward_hook(
        lambda mod, gi, go: seen.__setitem__("gi", gi[0].detach().clone()))
    ref(x0).square().sum().backward()
    fused = []
    orig, orig_last = TorchAdapter.stats_handle_sum, TorchAdapter.stats_handle_sum_last

    def spy(self, ts):  # type: ignore[no-untyped-def]
        out = orig(self, ts)
        fused.append(out is not None)
        return out

    def spy_last(self, ts):  # type: ignore[no-untyped-def]
        out = orig_last(self, ts)
        fused.append(out[0] is not None)
        return out

    monkeypatch.setattr(TorchAdapter, "stats_handle_sum", spy)
    monkeypatch.setattr(TorchAdapter, "stats_handle_sum_last", spy_last)
    for payload in ("stats", "tensors"):
        with capture(net, tmp_path / payload, payload=payload) as cap:
            net(x0).square().sum().backward()
            cap.step()
    if hoststats._kernel is not None:
        # the stats run took the fused path once for "1.0" and "1"; the tensors run does not ask
        assert fused == [True]
    recs = {(p, m): open_trace(tmp_path / p).records(kind="module", module=m, direction="backward",
                                                      role="output")[0]
            for p in ("stats", "tensors") for m in ("1", "1.0")}
    stored = open_trace(tmp_path / "tensors").tensor(recs["tensors", "1.0"])
    np.testing.assert_allclose(stored, seen["gi"].numpy(), rtol=1e-5, atol=1e-6)
    want = compute_stats(seen["gi"].numpy())
    for p, rec in recs.items():
        assert rec.shape == (8, 16, 32, 32) and rec.dtype == "float32"
        for k in ("min", "max", "mean", "std", "norm", "abs_sum"):
            assert math.isclose(rec.stats[k], want[k], rel_tol=1e-5, abs_tol=1e-9), (p, k)
        assert rec.stats["zeros"] == want["zeros"]
    assert recs["stats", "1"].stats == recs["stats", "1.0"].stats


class _StemAndBlock(torch.nn.Module):
    """A stem whose output feeds a two-edge block and, optionally, an op outside the block."""

    def __init__(self, foreign: bool) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.block = _TwoEdgeBlock()
        self.foreign = foreign

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.stem(x)
        y = self.block(t).square().sum()
        return y + (t * 3.0).sum() if self.foreign else y


def _on_output_grad(module: torch.nn.Module, fn) -> None:  # type: ignore[no-untyped-def]
    """Call ``fn(gradient)`` with the gradient of each of ``module``'s outputs."""

    def hook(mod, args, out):  # type: ignore[no-untyped-def]
        out.register_hook(fn)

    module.register_forward_hook(hook)


def _was_read(t: torch.Tensor, read: list[tuple[weakref.ref, int]]) -> bool:
    """Whether ``t``, as it is now (its version), is among the tensors read."""
    return any(r() is t and v == t._version for r, v in read)


def _total_grad_lands_in_first_part(model: _StemAndBlock, x: torch.Tensor) -> bool:
    """Run backward; True when autograd added the stem output's gradient contributions in place
    into the first one (the total gradient lives in the first contribution's memory)."""
    first: list[int] = []
    total: list[int] = []

    def on_out(mod, args, out):  # type: ignore[no-untyped-def]
        out.register_hook(lambda g: total.append(g.data_ptr()))

    def on_block_out(mod, args, out):  # type: ignore[no-untyped-def]
        # the shortcut's contribution is the block's output gradient itself (AddBackward)
        out.grad_fn.register_hook(lambda gi, go: first.append(gi[1].data_ptr()))

    hs = [model.stem.register_forward_hook(on_out), model.block.register_forward_hook(on_block_out)]
    try:
        model(x).backward()
    finally:
        for h in hs:
            h.remove()
    return total == first


def test_capture_keeps_autograds_in_place_gradient_accumulation(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Capture must not make autograd copy where it would add in place: the statistics-reuse
    key once created a Python storage object per tensor, which raised the storage's use count
    and turned every summed gradient into a new allocation."""
    torch.manual_seed(0)
    m = _StemAndBlock(foreign=False)
    x = torch.randn(2, 3, 8, 8)
    plain = _total_grad_lands_in_first_part(m, x)
    with capture(m, tmp_path / "t"):
        captured = _total_grad_lands_in_first_part(m, x)
    assert captured == plain
    assert plain  # (the PyTorch behaviour the reuse below builds on)


@pytest.mark.parametrize("foreign", [False, True])
def test_total_gradient_reuses_the_summed_contributions(tmp_path, monkeypatch, foreign) -> None:  # type: ignore[no-untyped-def]
    """The stem's output gradient is the block's input gradient (the same contributions, added
    in place by autograd): recorded without reading it again. An extra consumer of the stem's
    output outside the block adds one more contribution: then it is read and must differ."""
    torch.manual_seed(0)
    m = _StemAndBlock(foreign)
    x = torch.randn(4, 3, 16, 16)
    ref = _StemAndBlock(foreign)
    ref.load_state_dict(m.state_dict())
    kept: list[torch.Tensor] = []
    _on_output_grad(ref.stem, lambda g: kept.append(g.detach().clone()))
    ref(x).backward()
    # the tensors read and their versions (weakly: a reference would change autograd)
    read: list[tuple[weakref.ref, int]] = []
    orig = TorchAdapter.stats_handle

    def spy(self, t):  # type: ignore[no-untyped-def]
        read.append((weakref.ref(t), t._version))
        return orig(self, t)

    seen_total: list[torch.Tensor] = []
    _on_output_grad(m.stem, seen_total.append)
    monkeypatch.setattr(TorchAdapter, "stats_handle", spy)
    with capture(m, tmp_path / "t") as cap:
        m(x).backward()
        cap.step()
    tr = open_trace(tmp_path / "t")
    (total,) = tr.records(kind="module", module="stem", direction="backward", role="input")
    (block_in,) = tr.records(kind="module", module="block", direction="backward", role="output")
    want = compute_stats(kept[0].numpy())
    for k in ("min", "max", "mean", "std", "norm", "abs_sum"):
        assert math.isclose(total.stats[k], want[k], rel_tol=1e-5, abs_tol=1e-9), k
    assert total.stats["zeros"] == want["zeros"]
    if hoststats._kernel is None:
        return
    if foreign:
        assert total.stats != block_in.stats
        assert _was_read(seen_total[0], read)  # read, not reused
    else:
        assert total.stats == block_in.stats
        assert not _was_read(seen_total[0], read)


def test_last_contribution_and_the_sum_share_one_pass(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The block's conv gradient w.r.t. the block input is both the conv's own input gradient
    and the last contribution to the block's summed input gradient: one pass describes both,
    with the numbers a separate read gives (the tensors run reads every tensor)."""
    torch.manual_seed(0)
    m = _StemAndBlock(foreign=False)
    x = torch.randn(4, 3, 32, 32)  # 65536 elements per gradient: split between threads
    read: list[tuple[weakref.ref, int]] = []
    orig = TorchAdapter.stats_handle

    def spy(self, t):  # type: ignore[no-untyped-def]
        read.append((weakref.ref(t), t._version))
        return orig(self, t)

    conv_in_read: list[bool] = []

    def on_conv_out(mod, args, out):  # type: ignore[no-untyped-def]
        # a node hook after capture's conv hook: was the gradient the conv's input edge
        # carries read by then? (it dies in the block input's total gradient right after)
        out.grad_fn.register_hook(lambda gi, go: conv_in_read.append(_was_read(gi[0], read)))

    monkeypatch.setattr(TorchAdapter, "stats_handle", spy)
    for payload in ("stats", "tensors"):
        with capture(m, tmp_path / payload, payload=payload) as cap:
            h = m.block.conv.register_forward_hook(on_conv_out)
            read.clear()
            conv_in_read.clear()
            m(x).backward()
            h.remove()
            assert conv_in_read == [payload == "tensors" or hoststats._kernel is None]
            cap.step()

    def grads(payload: str) -> dict[str, dict]:  # type: ignore[type-arg]
        tr = open_trace(tmp_path / payload)
        return {r.module: r.stats for r in tr.records(kind="module", direction="backward",
                                                     role="output")}

    stats, full = grads("stats"), grads("tensors")
    assert stats["block.conv"] == full["block.conv"]
    for k in ("min", "max", "mean", "std", "norm", "abs_sum"):
        assert math.isclose(stats["block"][k], full["block"][k], rel_tol=1e-5, abs_tol=1e-9), k


class _ReluNet(torch.nn.Module):
    """batch norm -> in-place ReLU, and the same ReLU after an in-place residual add."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.relu = torch.nn.ReLU(inplace=True)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn(self.conv(x)))
        z = self.conv2(y)
        z += y
        return self.relu(z)


def _relu_outputs(path, steps: int = 2) -> dict[tuple[int, int], dict]:  # type: ignore[no-untyped-def]
    tr = open_trace(path)
    return {(r.step, r.call): r.stats for r in tr.records(kind="module", module="relu",
                                                         direction="forward", role="output")}


def test_inplace_relu_output_statistics_come_from_its_input_pass(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """An exact nn.ReLU(inplace=True)'s output is described from the pass over its input (the
    batch norm's output once learned, the residual sum at once): never read after the ReLU,
    and the same statistics as reading it (the tensors run reads every tensor)."""
    torch.manual_seed(0)
    m = _ReluNet()
    x = torch.randn(4, 3, 32, 32)  # 32768 elements per activation: split between threads
    # the tensors read and their versions (weakly: a reference would change autograd)
    read: list[tuple[weakref.ref, int]] = []
    dual: list[int] = []
    orig, orig_relu = TorchAdapter.stats_handle, TorchAdapter.stats_handle_relu

    def spy(self, t):  # type: ignore[no-untyped-def]
        read.append((weakref.ref(t), t._version))
        return orig(self, t)

    def spy_relu(self, t):  # type: ignore[no-untyped-def]
        dual.append(t.data_ptr())
        return orig_relu(self, t)

    outs: list[torch.Tensor] = []

    def after_relu(mod, args, out):  # type: ignore[no-untyped-def]
        outs.append(out)

    monkeypatch.setattr(TorchAdapter, "stats_handle", spy)
    monkeypatch.setattr(TorchAdapter, "stats_handle_relu", spy_relu)
    for payload in ("stats", "tensors"):
        with capture(m, tmp_path / payload, payload=payload) as cap:
            for i in range(2):
                if i == 1 and payload == "stats":
                    read.clear()
                    dual.clear()
                    h = m.relu.register_forward_hook(after_relu)
                m(x).sum().backward()
                cap.step()
        if payload == "stats":
            h.remove()
    stats, full = _relu_outputs(tmp_path / "stats"), _relu_outputs(tmp_path / "tensors")
    assert sorted(stats) == sorted(full) == [(s, c) for s in (0, 1) for c in (0, 1)]
    for key, want in full.items():
        assert stats[key] == want, key
        assert want["zeros"] > 0 and want["min"] == 0.0
    if hoststats._kernel is not None:
        assert len(outs) == 2 and not any(_was_read(o, read) for o in outs)  # step 1
        assert len(dual) == 2  # the batch norm's output (learned in step 0) and the sum


def test_inplace_relu_written_again_by_a_hook_is_read(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A forward hook that writes the ReLU's output in place (before capture's own hook runs)
    leaves another value than max(x, 0): capture reads it."""
    torch.manual_seed(0)
    m = _ReluNet()
    x = torch.randn(2, 3, 16, 16)

    def double(mod, args, out):  # type: ignore[no-untyped-def]
        out.mul_(2.0)

    m.relu.register_forward_hook(double)
    seen: list[torch.Tensor] = []

    def keep(mod, args, out):  # type: ignore[no-untyped-def]
        seen.append(out.detach().clone())

    with capture(m, tmp_path / "t") as cap:
        m.relu.register_forward_hook(keep)
        for _ in range(2):
            with torch.no_grad():  # (the doubled output could not serve backward)
                m(x)
            cap.step()
    got = _relu_outputs(tmp_path / "t")
    for (step, call), st in got.items():
        want = compute_stats(seen[2 * step + call].numpy())
        assert st["max"] == want["max"] and st["zeros"] == want["zeros"]
        assert math.isclose(st["abs_sum"], want["abs_sum"], rel_tol=1e-6)


def test_param_grads_are_recorded_as_backward_produced_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    scale = 1024.0
    with capture(m, tmp_path / "t", payload="tensors", optimizer=opt) as cap:
        loss = m(torch.ones(3, 4)).pow(2).sum()
        (loss * scale).backward()
        scaled = m.weight.grad.detach().clone()
        for p in m.parameters():  # static loss scaling: unscale before the update
            p.grad.div_(scale)
        opt.step()
        cap.step()
    tr = open_trace(tmp_path / "t")
    (g,) = tr.records(kind="grad", module="weight")
    np.testing.assert_array_equal(tr.tensor(g), scaled.numpy())


class _AliasNet(torch.nn.Module):
    """Passes views of one tensor to submodules before and after an unrecorded in-place write."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 6)
        self.before = torch.nn.Identity()
        self.after = torch.nn.Identity()

    def forward(self, x):  # type: ignore[no-untyped-def]
        a = self.lin(x)
        b = self.before(a.view(-1))  # a new object over a's memory: stats are reused
        a.view(-1).mul_(2.0)  # not a module: unrecorded, but a's version counter moves
        return b.sum() + self.after(a.view(-1)).sum()  # same memory, new content


def test_stats_reuse_by_memory_sees_writes_through_views(tmp_path) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    m = _AliasNet()
    x = torch.randn(3, 4)
    with torch.no_grad():
        a = m.lin(x)
    with capture(m, tmp_path / "t", level="module") as cap:
        m(x)
        cap.step()
    recs = open_trace(tmp_path / "t").records(kind="module", direction="forward")
    got = {r.module: r for r in recs if r.role == "input" and r.module in ("before", "after")}
    for name, want in (("before", a), ("after", a * 2)):
        ref = compute_stats(want.reshape(-1).numpy())
        for k, v in ref.items():
            assert got[name].stats[k] == pytest.approx(v, rel=1e-6, abs=1e-9), (name, k)


class _InPlaceOps(nn.Module):
    def forward(self, x):  # type: ignore[no-untyped-def]
        y = x * 2.0
        y.relu_()
        z = torch.empty_like(y)
        torch.add(y, 1.0, out=z)
        z.add_(y)
        v = z.view(-1)
        v.mul_(0.5)  # through a view: the base changes too
        return z


def test_op_level_records_what_in_place_and_out_ops_wrote(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # An in-place op's output is its post-op value, not its input's (the reuse cache keyed on
    # (memory, version) handed out the input's statistics: autograd bumps the version only
    # after the dispatch mode returns).
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    m = _InPlaceOps()
    with capture(m, tmp_path / "t", level="op", payload="tensors") as cap:
        m(x)
        cap.step()
    tr = open_trace(tmp_path / "t")
    ops = [r for r in tr.records(kind="op", direction="forward")]

    def one(native: str, role: str, n: int = 0) -> np.ndarray:
        recs = [r for r in ops if r.native.startswith(native) and r.role == role]
        return np.asarray(tr.tensor(recs[n]))

    y = (x * 2.0).numpy()
    relu = np.maximum(y, 0)
    np.testing.assert_array_equal(one("aten.relu_", "input"), y)  # before it was overwritten
    np.testing.assert_array_equal(one("aten.relu_", "output"), relu)
    outs = [r for r in ops if r.native.startswith("aten.relu_") and r.role == "output"]
    assert outs[0].stats["min"] == 0.0
    np.testing.assert_allclose(one("aten.add.out", "output"), relu + 1.0)
    np.testing.assert_allclose(one("aten.add_", "output"), 2 * relu + 1.0)
    np.testing.assert_allclose(one("aten.mul_", "output"), (2 * relu + 1.0).reshape(-1) * 0.5)
