"""Models built on a compatibility layer over MindSpore: torch-like ``Module`` classes that are
not ``nn.Cell``.

Libraries that port PyTorch code to MindSpore (MindNLP's ``mindnlp.core.nn.Module``, MSAdapter-
style layers) give their models PyTorch's ``Module`` protocol -- ``forward``, ``named_modules``,
``named_parameters``, ``register_forward_pre_hook(hook, with_kwargs=...)``,
``register_forward_hook(hook, with_kwargs=..., always_call=...)`` -- over MindSpore tensors and
``Parameter``\\ s, without deriving from ``nn.Cell``. MindSpore 2.10 itself ships no such base
class (``mindspore.mint.nn`` layers are Cells), so detection is by protocol and by what the
parameters are, never by a library's name:

* :func:`is_compat_model`: the protocol above, and a parameter that is a MindSpore tensor (a
  PyTorch ``nn.Module`` has the same protocol over torch tensors: it is PyTorch's).
* :class:`CellView`: the few ``nn.Cell`` methods the capture walks a network with
  (``cells_and_names``, ``parameters_and_names``, ``get_parameters``, ``trainable_params``),
  answered from the torch-like ones; the capture registers its forward hooks on the real
  modules, with the keyword arguments both APIs share.

What a compat model gets: forward inputs and outputs of every module, parameter gradients
(``Parameter.register_hook``), parameters after each step, operators at op level. Module-level
backward records need ``nn.Cell.register_backward_hook``: a compat module has none, so its
backward is seen through its parameters' gradients only.

Example:
    >>> is_compat_model(object())
    False
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

#: MindSpore's name for a Parameter nobody named (made unique as ``Parameter$N``)
_DEFAULT = re.compile(r"(Parameter(\$\d+)?)?")

_PROTOCOL = ("named_modules", "named_parameters", "register_forward_pre_hook",
             "register_forward_hook")


def is_compat_model(obj: Any) -> bool:
    """Whether ``obj`` is a torch-like ``Module`` over MindSpore parameters (not an ``nn.Cell``)."""
    if isinstance(obj, type) or not callable(obj):
        return False
    if not all(callable(getattr(obj, a, None)) for a in _PROTOCOL):
        return False
    from mindspore import nn
    from mindspore._c_expression import TensorPy

    if isinstance(obj, nn.Cell):
        return False
    try:
        return any(isinstance(p, TensorPy) for _, p in obj.named_parameters())
    except Exception:  # noqa: BLE001 - a foreign object's method failing: not ours
        return False


class CellView:
    """The ``nn.Cell`` walking methods of a compat model (see the module docstring); any other
    attribute is the model's own. Parameters still named MindSpore's default ``"Parameter"``
    (``"Parameter$3"`` once an optimizer made the names unique) are given their path (a Cell names its parameters so; gradient and update records need
    the names)."""

    def __init__(self, model: Any):
        self.module = model
        for name, p in model.named_parameters():
            if _DEFAULT.fullmatch(str(getattr(p, "name", "") or "")):
                p.name = name

    def __getattr__(self, name: str) -> Any:
        return getattr(self.module, name)

    def cells_and_names(self) -> Iterator[tuple[str, Any]]:
        yield from self.module.named_modules()

    def parameters_and_names(self, expand: bool = True) -> Iterator[tuple[str, Any]]:
        yield from self.module.named_parameters()

    def get_parameters(self) -> Iterator[Any]:
        for _, p in self.module.named_parameters():
            yield p

    def trainable_params(self) -> list[Any]:
        return [p for _, p in self.module.named_parameters() if p.requires_grad]


def cell_view(model: Any) -> Any:
    """``model`` itself when it is an ``nn.Cell`` (or anything else), a :class:`CellView` of
    it when it is a compat model."""
    return CellView(model) if is_compat_model(model) else model
