"""MindSpore's Tensor arithmetic operators at op level.

The op capture sees every primitive called from Python through MindSpore's JIT context
(:mod:`.capture`). ``x * y``, ``x - y``, ``x / y``, ``x ** y``, ``x % y``, ``abs(x)`` and
the elementwise methods (``x.mul(y)``, ``x.exp()``, ``x.rsqrt()``...) are
not: ``TensorPy`` (the C++ base of ``mindspore.Tensor`` and ``mindspore.Parameter``) implements
them and dispatches straight to its kernels. A port's own
arithmetic (a norm's ``weight * x``, an attention's ``q * scale``) then had no op to pair with
PyTorch's ``aten.mul``, so an op-level diagnosis named the next op it did see.

While an op-level capture runs, these operators are wrapped on ``mindspore.Tensor`` and
``mindspore.Parameter`` (class attributes, restored on removal). A wrapped operator runs the
original; when no primitive was seen while it ran (one that was -- ``x + 1.0`` goes through a
Python primitive -- is already recorded), the call is recorded as the primitive that computes
the same (``Mul``, ``Sub``, ``Div``, ``Pow``, ``FloorMod``, ``Add``, ``Abs``) with its operands,
so op replay can make it again. Reflected operators MindSpore writes in Python
(``Tensor.__rmul__`` is ``self.__mul__(other)``) reach the wrapped ones.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

#: TensorPy operator or elementwise method -> (the primitive class computing the same, how
#: many operands it takes besides the tensor). A call with other arguments
#: (``x.add(y, alpha=2)``) is not recorded: the primitive would not compute the same. Nor are
#: the in-place forms (``x += y``): the capture sees the operands after the call, when the
#: first one already holds the result.
OPERATORS = {
    "__add__": ("Add", 1), "add": ("Add", 1),
    "__sub__": ("Sub", 1), "sub": ("Sub", 1),
    "__mul__": ("Mul", 1), "mul": ("Mul", 1),
    "__truediv__": ("Div", 1), "div": ("Div", 1),
    "__pow__": ("Pow", 1), "pow": ("Pow", 1), "__mod__": ("FloorMod", 1),
    "maximum": ("Maximum", 1), "minimum": ("Minimum", 1),
    "__abs__": ("Abs", 0), "abs": ("Abs", 0), "neg": ("Neg", 0), "exp": ("Exp", 0),
    "log": ("Log", 0), "sqrt": ("Sqrt", 0), "rsqrt": ("Rsqrt", 0), "square": ("Square", 0),
    "reciprocal": ("Reciprocal", 0), "tanh": ("Tanh", 0), "sigmoid": ("Sigmoid", 0),
    "sin": ("Sin", 0), "cos": ("Cos", 0), "erf": ("Erf", 0),
}


class TensorOperators:
    """The wrapped operators of one capture: ``observe(prim, result, args)`` is called for each
    operator call that ran no primitive MindSpore reports itself; ``count()`` tells how many
    primitives were seen so far (the capture's own counter)."""

    def __init__(self, observe: Callable[[Any, Any, tuple[Any, ...]], None],
                 count: Callable[[], int], quiet: Callable[[], bool]) -> None:
        self._observe, self._count, self._quiet = observe, count, quiet
        self._patched: list[tuple[type, str]] = []

    def install(self) -> bool:
        """Wrap the operators; False (nothing done) when another capture has them wrapped."""
        import mindspore as ms
        from mindspore import ops

        classes = (ms.Tensor, ms.Parameter)
        if any(getattr(getattr(c, n, None), "_netparity_wrapped", False)
               for c in classes for n in OPERATORS):
            return False
        prims = {p: getattr(ops, p)() for p, _ in OPERATORS.values() if hasattr(ops, p)}
        for cls in classes:
            for name, (prim_name, arity) in OPERATORS.items():
                if name in cls.__dict__ or prim_name not in prims:
                    continue  # written in Python: the primitives it calls are seen already
                orig = getattr(cls, name, None)
                if orig is None:
                    continue
                setattr(cls, name, self._wrap(orig, prims[prim_name], arity))
                self._patched.append((cls, name))
        return True

    def remove(self) -> None:
        """Put the classes' operators back (the inherited ``TensorPy`` ones)."""
        for cls, name in self._patched:
            if name in cls.__dict__:
                delattr(cls, name)
        self._patched.clear()

    def _wrap(self, orig: Callable[..., Any], prim: Any, arity: int) -> Callable[..., Any]:
        observe, count, quiet = self._observe, self._count, self._quiet

        @functools.wraps(orig)
        def operator(this: Any, *args: Any, **kwargs: Any) -> Any:
            if kwargs or len(args) != arity or quiet():
                return orig(this, *args, **kwargs)
            seen = count()
            out = orig(this, *args)
            if count() == seen:  # no primitive reported itself: record the operator
                observe(prim, out, (this, *args))
            return out

        operator._netparity_wrapped = True  # type: ignore[attr-defined]
        return operator
