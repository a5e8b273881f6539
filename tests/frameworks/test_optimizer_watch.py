"""Optimizer replay's view of an optimizer, per framework: the states a watcher keeps around
each step (``after(k)`` included: the last one is kept when it closes) and the per-parameter
entries (``optimizer_moments``) that show the gradients the optimizer was given -- a replay from
the state before a step, on the gradients the step used, must leave the state and the
parameters the run left, at that step's learning rate (a warm-up scheduler runs between steps;
MindSpore's experimental optimizers keep it outside the Cell's parameters)."""

from __future__ import annotations

import numpy as np
import pytest
from tests.frameworks.hand_adam import hand_adam

from netparity.ckpt.mapping import state_of
from netparity.frameworks.models import set_weights
from netparity.frameworks.registry import adapter_for

STEPS = 3
RNG = np.random.default_rng(0)
GRADS = [{"weight": RNG.standard_normal((2, 3)).astype(np.float32),
          "bias": RNG.standard_normal(2).astype(np.float32)} for _ in range(STEPS)]


def _close(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        np.allclose(a[k][0], b[k][0], rtol=1e-6, atol=0) for k in a)


def _check(adapter, model, opt, watch, step_with, scheduler) -> None:
    params = []
    for k in range(STEPS):
        before = state_of(model)
        step_with(GRADS[k])
        scheduler.step()  # warm-up: each step at another learning rate
        params.append((before, state_of(model)))
    watch.close()
    assert len(watch.states) == STEPS and watch.after(STEPS) is None
    moments = [adapter.optimizer_moments(opt, watch.after(k)) for k in range(STEPS)]
    # the first moment is there, never a step counter or learning rate
    assert moments[0] and any("exp_avg" in k and "sq" not in k for k in moments[0])
    assert not any("step" in k or "lr" in k or "learning_rate" in k for k in moments[0])
    # after(k) is the state the run left: a replay of step k on its gradients leaves the same
    for k in range(STEPS):
        left = adapter.replay_step(opt, model, watch.states[k], GRADS[k], keep_state=True)
        assert _close(adapter.optimizer_moments(opt, left), moments[k]), k
        set_weights(model, params[k][0])
        adapter.replay_step(opt, model, watch.states[k], GRADS[k])
        now = state_of(model)
        for n in GRADS[k]:
            np.testing.assert_allclose(now[n], params[k][1][n], rtol=1e-6, err_msg=f"{k} {n}")
    # and its change against a step on zero gradients halves on half the gradients (clipping)
    def moved(scale: float) -> dict:
        return adapter.optimizer_moments(opt, adapter.replay_step(
            opt, model, watch.states[1], {n: g * scale for n, g in GRADS[1].items()},
            keep_state=True))

    half, zero = moved(0.5), moved(0.0)
    key = next(k for k in sorted(half) if "exp_avg" in k and "sq" not in k)
    np.testing.assert_allclose(half[key][0] - zero[key][0],
                               (moments[1][key][0] - zero[key][0]) / 2, rtol=1e-5)


def _torch_step_with(model, opt):
    """One optimizer step on given gradients (by parameter name)."""
    import torch

    def step_with(g):
        for n, p in model.named_parameters():
            p.grad = torch.from_numpy(g[n])
        opt.step()

    return step_with


def test_torch_adam():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: (k + 1) / STEPS)
    adapter = adapter_for(model)
    watch = adapter.watch_steps(opt)
    _check(adapter, model, opt, watch, _torch_step_with(model, opt), scheduler)


def test_mindspore_adamw():
    ms = pytest.importorskip("mindspore")
    from mindspore.experimental import optim

    model = ms.nn.Dense(3, 2)
    opt = optim.AdamW(model.trainable_params(), lr=0.1)
    scheduler = optim.lr_scheduler.LambdaLR(opt, lambda k: (k + 1) / STEPS)
    adapter = adapter_for(model)
    watch = adapter.watch_steps(opt)

    def step_with(g):
        opt(ms.mutable(tuple(ms.Tensor(g[p.name]) for p in opt.parameters)))

    _check(adapter, model, opt, watch, step_with, scheduler)


def _check_counter_replayed(adapter, model, opt, watch, step_with) -> None:
    """A hand-written Adam keeping its step counter as a plain attribute: each step's replay
    from the state before it leaves what the run left (bias correction of *that* step), and
    the optimizer's own counter is as the run left it afterwards (issue 28: the counter kept
    advancing across replays, the first update came out 0.4888x)."""
    params = []
    for k in range(STEPS):
        before = state_of(model)
        step_with(GRADS[k])
        params.append((before, state_of(model)))
    watch.close()
    for _ in range(2):  # replaying twice must not move the counter either
        for k in range(STEPS):
            set_weights(model, params[k][0])
            adapter.replay_step(opt, model, watch.states[k], GRADS[k])
            now = state_of(model)
            for n in GRADS[k]:
                np.testing.assert_allclose(now[n], params[k][1][n], rtol=1e-5,
                                           err_msg=f"step {k} {n}")
    assert int(opt.t) == STEPS


def test_torch_hand_written_adam_with_a_python_counter():
    torch = pytest.importorskip("torch")

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = hand_adam(model.parameters())
    adapter = adapter_for(model)
    watch = adapter.watch_steps(opt)
    _check_counter_replayed(adapter, model, opt, watch, _torch_step_with(model, opt))


def test_mindspore_hand_written_adam_with_a_python_counter():
    ms = pytest.importorskip("mindspore")

    class HandAdam(ms.nn.Optimizer):
        def __init__(self, params, lr=0.1):
            super().__init__(lr, params)
            self.m = self.parameters.clone(prefix="m", init="zeros")
            self.v = self.parameters.clone(prefix="v", init="zeros")
            self.t = 0  # a Python int, not a Parameter

        def construct(self, gradients):
            self.t += 1
            c1, c2 = 1 - 0.9**self.t, 1 - 0.999**self.t
            for p, g, m, v in zip(self.parameters, gradients, self.m, self.v):
                ms.ops.assign(m, m * 0.9 + g * 0.1)
                ms.ops.assign(v, v * 0.999 + g * g * 0.001)
                ms.ops.assign(p, p - 0.1 * (m / c1) / (ms.ops.sqrt(v / c2) + 1e-8))
            return True

    model = ms.nn.Dense(3, 2)
    opt = HandAdam(model.trainable_params())
    adapter = adapter_for(model)
    watch = adapter.watch_steps(opt)

    def step_with(g):
        opt(ms.mutable(tuple(ms.Tensor(g[p.name]) for p in opt.parameters)))

    _check_counter_replayed(adapter, model, opt, watch, step_with)
