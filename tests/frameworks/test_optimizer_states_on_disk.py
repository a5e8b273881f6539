"""Optimizer replay in bounded memory (issue 33 item 6), per framework: a watcher's states kept
on disk (``keep_on_disk``) are the states kept in memory, read back as fresh copies that a
replay may take as they are (``replay_step(..., owned=True)``) without changing what is kept; a
replay from a caller's state (``owned=False``) changes neither that state nor the optimizer's
own (which the replay no longer copies to restore it); ``load_optimizer_state`` swaps states in
and out (the replay runs with the small state before the first step in place of an Adam's
two-copies-of-the-weights one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from netparity.frameworks.registry import adapter_for
from netparity.statestore import StateStore

STEPS = 3
RNG = np.random.default_rng(1)
GRADS = [{"weight": RNG.standard_normal((2, 3)).astype(np.float32),
          "bias": RNG.standard_normal(2).astype(np.float32)} for _ in range(STEPS)]


def _values(adapter: Any, opt: Any, state: Any) -> dict[str, np.ndarray]:
    return {k: v[0].copy() for k, v in adapter.optimizer_moments(opt, state).items()}


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def _check(model: Any, opt: Any, step_with: Any, live: Any, tmp_path: Path) -> None:
    adapter = adapter_for(model)
    mem, disk = adapter.watch_steps(opt), adapter.watch_steps(opt)
    disk.keep_on_disk(StateStore(tmp_path))
    for k in range(STEPS):
        step_with(GRADS[k])
    mem.close()
    disk.close()
    assert len(disk.states) == len(mem.states) == STEPS and disk.states.fresh
    for k in range(STEPS):
        assert _same(_values(adapter, opt, disk.after(k)), _values(adapter, opt, mem.after(k)))
        assert _same(_values(adapter, opt, disk.states[k]), _values(adapter, opt, mem.states[k]))
    own = live()
    kept = _values(adapter, opt, mem.states[1])
    # owned: the fresh copy is the optimizer's to change; the copy on disk stays as it was
    left = adapter.replay_step(opt, model, disk.states[1], GRADS[1], keep_state=True,
                               owned=True)
    again = adapter.replay_step(opt, model, mem.states[1], GRADS[1], keep_state=True)
    assert _same(_values(adapter, opt, left), _values(adapter, opt, again))
    assert _same(_values(adapter, opt, disk.states[1]), kept)
    # not owned: the caller's state is not changed, and the optimizer's own state is restored
    assert _same(_values(adapter, opt, mem.states[1]), kept)
    assert _same(live(), own)
    # swapped out for the state before step 0 and back (optimizer replay's frame)
    adapter.load_optimizer_state(opt, disk.states[0])
    assert not _same(live(), own)
    adapter.load_optimizer_state(opt, disk.final)
    assert _same(live(), own)


def test_torch_adam(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)

    def step_with(g: dict[str, np.ndarray]) -> None:
        for n, p in model.named_parameters():
            p.grad = torch.from_numpy(g[n])
        opt.step()

    def live() -> dict[str, np.ndarray]:
        return {f"{i}.{k}": v.detach().numpy().copy() for i, st in opt.state_dict()[
            "state"].items() for k, v in st.items()}

    _check(model, opt, step_with, live, tmp_path)


def test_mindspore_adamw(tmp_path: Path) -> None:
    ms = pytest.importorskip("mindspore")
    from mindspore.experimental import optim

    model = ms.nn.Dense(3, 2)
    opt = optim.AdamW(model.trainable_params(), lr=0.1)

    def step_with(g: dict[str, np.ndarray]) -> None:
        opt(ms.mutable(tuple(ms.Tensor(g[p.name]) for p in opt.parameters)))

    net = {id(p) for p in opt.parameters}

    def live() -> dict[str, np.ndarray]:
        return {n: p.asnumpy().copy() for n, p in opt.parameters_and_names()
                if id(p) not in net}

    _check(model, opt, step_with, live, tmp_path)
