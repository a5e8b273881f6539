"""Framework-neutral operations on models used by workflows: parameter counts, loading weights,
turning numbers into framework tensors, optimizer settings.

A compatibility layer with the historical function names: each dispatches through
:mod:`netparity.frameworks.registry` to the model's adapter (frameworks are never imported just
to detect one); new code can ask the adapter directly.

Example:
    >>> framework_of(object())
    Traceback (most recent call last):
    ...
    netparity.errors.FrameworkError: not a model of any imported framework (torch, mindspore): object
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from netparity.frameworks.base import ParamCounts
from netparity.frameworks.registry import framework_of, get_adapter

__all__ = ["ParamCounts", "as_tensor", "framework_of", "optimizer_settings", "param_counts",
           "in_float64", "run_module", "run_module_backward", "scalar_tensor", "set_weights"]


def param_counts(model: Any) -> ParamCounts:
    """Count parameters as frameworks report them; BatchNorm statistics count as buffers.

    PyTorch keeps running statistics as buffers; MindSpore keeps them as parameters with
    ``requires_grad=False``. Both are reported as ``buffers`` so the two sides compare.
    """
    return get_adapter(framework_of(model)).param_counts(model)


def set_weights(model: Any, arrays: Mapping[str, np.ndarray],
                dtypes: Mapping[str, str] | None = None) -> list[str]:
    """Copy ``arrays`` into the model's parameters/buffers of the same names, in place.

    Values are cast to each parameter's own dtype. Returns the names that were set.

    Raises:
        MappingError: a name is not in the model, or a shape does not fit.
    """
    return get_adapter(framework_of(model)).set_weights(model, arrays, dtypes or {})


def run_module(model: Any, path: str, inputs: Sequence[tuple[str, np.ndarray, str]],
               train: bool = True) -> list[tuple[str, np.ndarray]]:
    """Call the submodule ``path`` of ``model`` on ``(argument path, values, dtype)`` inputs,
    without gradients; its flattened outputs (see ``FrameworkAdapter.run_module``)."""
    return get_adapter(framework_of(model)).run_module(model, path, inputs, train)


def run_module_backward(model: Any, path: str, inputs: Sequence[tuple[str, np.ndarray, str]],
                        grad_outputs: Sequence[tuple[str, np.ndarray]],
                        train: bool = True, params: bool = False) -> list[tuple[str, np.ndarray]]:
    """Gradients of the submodule ``path`` with respect to its float inputs (and its
    parameters, ``params``), given its output gradients (see
    ``FrameworkAdapter.run_module_backward``)."""
    return get_adapter(framework_of(model)).run_module_backward(
        model, path, inputs, grad_outputs, train, params=params)


def rounding_jitter(model: Any, path: str, seed: int) -> Any:
    """Inside the submodule ``path``, every module's outputs and incoming gradients move one
    ulp while the context lasts (see ``FrameworkAdapter.rounding_jitter``)."""
    return get_adapter(framework_of(model)).rounding_jitter(model, path, seed)


def in_float64(model: Any, path: str) -> Any:
    """The submodule ``path`` computes in float64 while the context lasts (see
    ``FrameworkAdapter.in_float64``)."""
    return get_adapter(framework_of(model)).in_float64(model, path)


def scalar_tensor(value: float, framework: str) -> Any:
    """A float32 scalar tensor of ``framework`` holding ``value`` (to record a loss)."""
    return get_adapter(framework).scalar(value)


def as_tensor(arr: np.ndarray, framework: str) -> Any:
    """A framework tensor holding ``arr`` (to record data batches)."""
    return get_adapter(framework).from_numpy(arr)


def optimizer_settings(optimizer: Any, model: Any) -> dict[str, dict[str, Any]]:
    """Per-parameter optimizer settings: ``{name: {"weight_decay", "momentum", "lr"}}``.

    ``lr`` is ``None`` for schedules (compare the specs' ``lr_schedule`` instead). Unknown
    layouts give an empty dict. See the frameworks' ``models`` modules for the details.
    """
    if optimizer is None:
        return {}
    return get_adapter(framework_of(model)).optimizer_settings(optimizer, model)
