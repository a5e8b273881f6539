"""A minimal compatibility layer over MindSpore, written the way such libraries write theirs
(MindNLP's ``mindnlp.core.nn.Module``): a torch-like ``Module`` that is *not* an ``nn.Cell``,
holding MindSpore ``Parameter``\\ s, with PyTorch's hook API."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import mindspore as ms
import numpy as np


class _Handle:
    def __init__(self, table: dict[int, Any], key: int):
        self.table, self.key = table, key

    def remove(self) -> None:
        self.table.pop(self.key, None)


class Module:
    """PyTorch's ``nn.Module`` protocol over MindSpore tensors."""

    _next = 0

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_pre_hooks", OrderedDict())
        object.__setattr__(self, "_hooks", OrderedDict())
        self.training = True

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, ms.Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        for table in ("_parameters", "_modules"):
            d = self.__dict__.get(table, {})
            if name in d:
                return d[name]
        raise AttributeError(name)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def named_children(self) -> Iterator[tuple[str, Module]]:
        yield from self._modules.items()

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        yield prefix, self
        for n, m in self._modules.items():
            yield from m.named_modules(f"{prefix}.{n}" if prefix else n)

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, ms.Parameter]]:
        for p, m in self.named_modules(prefix):
            for n, q in m._parameters.items():
                yield (f"{p}.{n}" if p else n), q

    def parameters(self) -> list[ms.Parameter]:
        return [p for _, p in self.named_parameters()]

    def _add(self, table: dict[int, Any], entry: Any) -> _Handle:
        Module._next += 1
        table[Module._next] = entry
        return _Handle(table, Module._next)

    def register_forward_pre_hook(self, hook: Callable[..., Any], *,
                                  with_kwargs: bool = False) -> _Handle:
        return self._add(self._pre_hooks, (hook, with_kwargs))

    def register_forward_hook(self, hook: Callable[..., Any], *, with_kwargs: bool = False,
                              always_call: bool = False) -> _Handle:
        return self._add(self._hooks, (hook, with_kwargs, always_call))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        for hook, wk in list(self._pre_hooks.values()):
            r = hook(self, args, kwargs) if wk else hook(self, args)
            if r is not None:
                args, kwargs = r if wk else (r if isinstance(r, tuple) else (r,), kwargs)
        out, done = None, False
        try:
            out = self.forward(*args, **kwargs)
            done = True
        finally:
            for hook, wk, always in list(self._hooks.values()):
                if done or always:
                    r = hook(self, args, kwargs, out) if wk else hook(self, args, out)
                    if r is not None and done:
                        out = r
        return out


class Linear(Module):
    def __init__(self, n_in: int, n_out: int, seed: int):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.weight = ms.Parameter(ms.Tensor(rng.standard_normal((n_out, n_in)).astype(np.float32)
                                             * 0.3))
        self.bias = ms.Parameter(ms.Tensor(np.zeros(n_out, np.float32)))

    def forward(self, x: ms.Tensor) -> ms.Tensor:
        return ms.ops.matmul(x, self.weight.T) + self.bias


class MLP(Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = Linear(4, 8, 0)
        self.fc2 = Linear(8, 2, 1)

    def forward(self, x: ms.Tensor) -> ms.Tensor:
        return self.fc2(ms.ops.tanh(self.fc1(x)))
