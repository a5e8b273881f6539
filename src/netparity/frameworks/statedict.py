"""Where the tensors of a loaded checkpoint object are, whatever produced the object.

A training script saves a plain state dict, one nested under a wrapper key (``{"model":
sd, "epoch": 3}``) or nested dicts; :func:`locate_state` finds the tensors the same way for
every reader -- ``torch.load`` (:mod:`netparity.frameworks.torch.ckpt_io`) and the shape-only
reader of PyTorch's zip format that needs no PyTorch (:mod:`netparity.ckpt.torchzip`) -- so both
name the same tensors and write the same notes.

Example:
    >>> out = CheckpointData()
    >>> state = locate_state({"model": {"w": 1.0}, "epoch": 3}, lambda v: v == 1.0, out)
    >>> dict(state), out.source_key, out.extras
    ({'w': 1.0}, 'model', {'epoch': 3})
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from netparity.errors import CheckpointError
from netparity.frameworks.base import CheckpointData

#: keys under which training scripts commonly nest the state dict, in the order tried
WRAPPER_KEYS = ("state_dict", "model_state_dict", "model", "module", "net", "network",
                "model_state", "params", "weights")


def locate_state(obj: Any, is_tensor: Callable[[Any], bool],
                 out: CheckpointData) -> Mapping[Any, Any]:
    """The mapping of ``obj`` that holds its tensors (``is_tensor``): ``obj`` itself, the first
    :data:`WRAPPER_KEYS` entry holding tensors, or ``obj``'s nested dicts flattened into dotted
    names. Fills ``out``'s ``source_key``, ``extras`` (scalars beside the state) and ``notes``;
    non-tensor entries of the state are named in a note (the caller skips them).

    Raises:
        CheckpointError: ``obj`` is not a mapping or holds no tensors.
    """
    if not isinstance(obj, Mapping):
        raise CheckpointError(f"expected a state dict, found a {type(obj).__name__}")

    def tensors_in(m: Mapping[Any, Any]) -> int:
        return sum(bool(is_tensor(v)) for v in m.values())

    state: Mapping[Any, Any] = obj
    if tensors_in(obj) == 0:
        for key in WRAPPER_KEYS:
            inner = obj.get(key)
            if isinstance(inner, Mapping) and tensors_in(inner):
                state = inner
                out.source_key = key
                out.notes.append(f"state dict taken from key {key!r} of the checkpoint")
                break
        else:
            flat = _flatten(obj, is_tensor)
            if not flat:
                raise CheckpointError(
                    f"no tensors found (top-level keys: {', '.join(map(str, list(obj)[:10]))})"
                )
            state = flat
            out.notes.append("nested dicts flattened into dotted names")
    others = [k for k in obj if state is not obj and k != out.source_key]
    for k in others:
        v = obj[k]
        if isinstance(v, (int, float, str, bool)):
            out.extras[str(k)] = v
    if others:
        out.notes.append(f"other top-level keys ignored: {', '.join(map(str, others[:8]))}")
    skipped = [str(k) for k, v in state.items() if not is_tensor(v)]
    if skipped:
        out.notes.append(f"non-tensor entries skipped: {', '.join(skipped[:8])}")
    return state


def _flatten(m: Mapping[Any, Any], is_tensor: Callable[[Any], bool],
             prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in m.items():
        if is_tensor(v):
            flat[prefix + str(k)] = v
        elif isinstance(v, Mapping):
            flat.update(_flatten(v, is_tensor, f"{prefix}{k}."))
    return flat
