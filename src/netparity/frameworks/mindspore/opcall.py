"""What a MindSpore primitive call needs to be made again: recorded at op level, used by
op-level replay (``MindSporeAdapter.run_op``).

The op capture sees each primitive *after* it ran, through MindSpore's JIT context
(``jit_context().run_op(prim, result, *args)``). There ``args`` are every argument the kernel
received, in its order: for the generated (pyboost) primitives the ``__call__`` arguments
followed by the constructor's (``MatMul``: ``x, w, transpose_a, transpose_b``), for the legacy
ones (``Primitive.__call__`` -> ``_run_op``) the call's arguments (``BatchNorm`` appends its
constructor's itself). Tensors become the call's ``input`` records (argument paths ``0``,
``1``, ``2.0`` inside a tuple); everything else is kept as JSON on the call's first record:

* ``extra["scalars"]``: argument path -> value (numbers, bools, strings, ``None``, tuples of
  them as lists, MindSpore dtypes as ``{"dtype": "float32"}``), the same field the PyTorch
  capture fills;
* ``extra["prim"]``: ``{"class": "module.QualName", "init": {constructor argument: value}}`` --
  the primitive's class and the arguments it was built with (``Primitive.init_attrs``, what
  MindSpore's own ``__deepcopy__`` rebuilds a primitive from); ``"unrecorded"`` lists what could
  not be written as JSON (the call then cannot be replayed, and replay says so).

Example:
    >>> encode_value((1, 2, None))
    [1, 2, None]
    >>> decode_value([1, [2, 3]])
    (1, (2, 3))
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from netparity.errors import FrameworkError


class _Unrecordable(Exception):
    pass


def _dtype_name(v: Any) -> str | None:
    from netparity.frameworks.mindspore.adapter import _dtype_table

    hit = _dtype_table().get(id(v))
    return hit[1] if hit is not None and hit[0] is v else None


def encode_value(v: Any) -> Any:
    """A non-tensor argument as JSON (tuples and lists as lists, dtypes by canonical name);
    raises ``_Unrecordable`` for anything else."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (tuple, list)):
        return [encode_value(x) for x in v]
    name = _dtype_name(v)
    if name is not None:
        return {"dtype": name}
    item = getattr(v, "item", None)  # NumPy scalars
    if callable(item) and getattr(v, "shape", None) == ():
        return encode_value(item())
    raise _Unrecordable(type(v).__name__)


def decode_value(v: Any) -> Any:
    """The inverse of :func:`encode_value` (lists come back as tuples: what primitives take)."""
    if isinstance(v, list):
        return tuple(decode_value(x) for x in v)
    if isinstance(v, dict) and set(v) == {"dtype"}:
        import mindspore as ms

        from netparity.frameworks.mindspore.adapter import _MS_DTYPE_ATTRS

        attr = _MS_DTYPE_ATTRS.get(str(v["dtype"]))
        if attr is None or getattr(ms, attr, None) is None:
            raise FrameworkError(f"dtype {v['dtype']} is not a MindSpore dtype")
        return getattr(ms, attr)
    return v


def _has_tensor(obj: Any, is_tensor: Callable[[Any], bool]) -> bool:
    if is_tensor(obj):
        return True
    return isinstance(obj, (tuple, list)) and any(_has_tensor(x, is_tensor) for x in obj)


def call_scalars(args: tuple[Any, ...], is_tensor: Callable[[Any], bool]
                 ) -> tuple[dict[str, Any], list[str]]:
    """``({argument path: JSON value}, [paths that could not be recorded])`` for the non-tensor
    arguments of a primitive call (tensors are recorded as records under the same paths)."""
    scalars: dict[str, Any] = {}
    missing: list[str] = []

    def walk(obj: Any, path: str) -> None:
        if is_tensor(obj):
            return
        if isinstance(obj, (tuple, list)) and _has_tensor(obj, is_tensor):
            for i, x in enumerate(obj):
                walk(x, f"{path}.{i}")
            return
        try:
            scalars[path] = encode_value(obj)
        except _Unrecordable as e:
            missing.append(f"{path} ({e})")

    for i, a in enumerate(args):
        walk(a, str(i))
    return scalars, missing


def prim_info(prim: Any) -> dict[str, Any]:
    """``{"class", "init"[, "unrecorded"]}`` of a primitive (see the module docstring)."""
    cls = type(prim)
    info: dict[str, Any] = {"class": f"{cls.__module__}.{cls.__qualname__}"}
    init: dict[str, Any] = {}
    bad: list[str] = []
    for k, v in dict(getattr(prim, "init_attrs", None) or {}).items():
        try:
            init[str(k)] = encode_value(v)
        except _Unrecordable as e:
            bad.append(f"init {k} ({e})")
    info["init"] = init
    if bad:
        info["unrecorded"] = bad
    return info


def build_prim(info: dict[str, Any]) -> Any:
    """The primitive ``info`` describes, built again from its class and constructor arguments."""
    import mindspore as ms

    path = str(info.get("class", ""))
    mod, _, qual = path.rpartition(".")
    if not mod.startswith("mindspore."):
        raise FrameworkError(f"{path or 'an unknown class'} is not a MindSpore primitive")
    try:
        cls: Any = importlib.import_module(mod)
        for part in qual.split("."):
            cls = getattr(cls, part)
    except (ImportError, AttributeError) as e:
        raise FrameworkError(f"primitive class {path} is not in this MindSpore") from e
    if not (isinstance(cls, type) and issubclass(cls, ms.ops.Primitive)):
        raise FrameworkError(f"{path} is not a MindSpore primitive")
    init = {k: decode_value(v) for k, v in dict(info.get("init") or {}).items()}
    try:
        return cls(**init)
    except (TypeError, ValueError) as e:
        raise FrameworkError(f"{qual} cannot be built again from its recorded constructor "
                             f"arguments: {str(e).splitlines()[0] if str(e) else e}") from e


def call_prim(prim: Any, args: list[Any]) -> Any:
    """Call ``prim`` with every argument its kernel received at capture (see the module
    docstring): a generated primitive takes its ``__call__`` arguments (the constructor's
    follow them in ``args``), a legacy one all of them through ``Primitive.__call__``."""
    import mindspore as ms

    base_call = ms.ops.Primitive.__call__
    call = type(prim).__call__
    if call is base_call:
        return prim(*args)
    params = list(inspect.signature(call).parameters.values())[1:]
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        # a legacy primitive that appends its constructor arguments itself (BatchNorm): they
        # are already in ``args``
        return base_call(prim, *args)
    n = sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    required = sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                   and p.default is p.empty)
    if len(args) < required:
        raise FrameworkError(f"{type(prim).__name__} takes {required} arguments, the trace "
                             f"holds {len(args)}")
    return prim(*args[:n])
