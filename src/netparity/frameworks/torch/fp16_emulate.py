"""Float16-only operators emulated on the CPU (``netparity.precision.emulate_fp16``): a
``TorchDispatchMode`` that runs the chosen aten operators on float16 copies of their float32 /
float64 inputs and hands their float16 results back in the inputs' dtype, as a device that only
has those kernels in float16 would (the migration guide's Ascend list: convolution, pooling,
recurrent cells, matmul, sort / top-k)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from netparity.trace.vocab import canonical_op

_WIDE = (torch.float32, torch.float64)


class _Fp16Mode(TorchDispatchMode):
    def __init__(self, ops: frozenset[str]) -> None:
        super().__init__()
        self.ops = ops
        self.calls: dict[str, int] = {}  # native name -> calls run in float16
        self._canon: dict[Any, str] = {}

    def _canonical(self, func: Any) -> str:
        c = self._canon.get(func)
        if c is None:
            c = self._canon[func] = canonical_op("torch", str(func))
        return c

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self._canonical(func) not in self.ops or "out" in kwargs or \
                func._schema.is_mutable:
            return func(*args, **kwargs)
        wide = [t.dtype for t in tree_flatten((args, kwargs))[0]
                if isinstance(t, torch.Tensor) and t.dtype in _WIDE]
        if not wide:
            return func(*args, **kwargs)

        def down(t: Any) -> Any:
            return t.half() if isinstance(t, torch.Tensor) and t.dtype in _WIDE else t

        def up(t: Any) -> Any:
            return t.to(wide[0]) if isinstance(t, torch.Tensor) and t.dtype == torch.float16 \
                else t

        out = func(*tree_map(down, args), **tree_map(down, kwargs))
        self.calls[str(func)] = self.calls.get(str(func), 0) + 1
        return tree_map(up, out)


@contextmanager
def fp16_ops(ops: frozenset[str]) -> Iterator[dict[str, int]]:
    """Run the aten operators whose canonical names are in ``ops`` in float16 while the block
    runs (forward and backward); yields the count of calls emulated per native name."""
    mode = _Fp16Mode(ops)
    with mode:
        yield mode.calls
