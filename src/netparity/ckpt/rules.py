"""Built-in parameter-name rules between PyTorch and MindSpore (``mindspore.nn``, 2.10).

=====================================  =============================================  ==========
PyTorch                                MindSpore                                      how told
=====================================  =============================================  ==========
BatchNorm ``weight bias``              ``gamma beta``                                 siblings
BatchNorm ``running_mean running_var`` ``moving_mean moving_variance``                siblings
BatchNorm ``num_batches_tracked``      (none: dropped with a note)                    name
LayerNorm/GroupNorm ``weight bias``    ``gamma beta``                                 1-D pair
Embedding ``weight``                   ``embedding_table``                            type/name
PReLU ``weight``                       ``w``                                          type
Conv1d ``weight`` (out, in, k)         ``weight`` (out, in, 1, k) in ``nn.Conv1d``    shape
Linear / Conv ``weight bias``          ``weight bias`` (``nn.Dense``, ``nn.Conv2d``)  -
=====================================  =============================================  ==========

Telling a BatchNorm ``weight`` from a Linear/Conv ``weight`` uses the neighbours: a module whose
parameters include ``running_mean`` and ``running_var`` is a BatchNorm; a module with only a 1-D
``weight`` and a same-sized 1-D ``bias`` is a norm layer (LayerNorm/GroupNorm/BatchNorm without
running statistics); Linear and Conv weights have 2+ dimensions. When a model is given its layer
types decide instead. The MindSpore -> PyTorch direction needs no guessing (``gamma`` is always a
norm scale), so matching compares names in the PyTorch spelling (:func:`canonical_leaf`).

Example:
    >>> shapes = {"bn.weight": (4,), "bn.bias": (4,), "bn.running_mean": (4,),
    ...           "bn.running_var": (4,), "bn.num_batches_tracked": (), "fc.weight": (2, 4)}
    >>> r = torch_to_mindspore_names(shapes)
    >>> r.names["bn.weight"], r.names["bn.running_var"], r.names["fc.weight"]
    ('bn.gamma', 'bn.moving_variance', 'fc.weight')
    >>> r.dropped
    {'bn.num_batches_tracked': 'PyTorch BatchNorm counter; MindSpore has none (the optimizer step replaces it)'}
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from netparity.param_names import BN_TORCH_TO_MS, MS_TO_TORCH_LEAF
from netparity.param_names import split_param as split_name

NBT = "num_batches_tracked"
NBT_NOTE = "PyTorch BatchNorm counter; MindSpore has none (the optimizer step replaces it)"
_EMB_NAME = re.compile(r"(^|[._])(emb|embed|embeds|embedding|embeddings|wte|wpe|tok_embeddings)$",
                       re.IGNORECASE)


def squeeze_key(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Shape without its 1s: equal keys mean a plain reshape converts one into the other.

    This is what makes a PyTorch Conv1d weight ``(o, i, k)`` and MindSpore's ``(o, i, 1, k)``
    the same parameter.
    """
    return tuple(d for d in shape if d != 1)


def shapes_compatible(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return tuple(a) == tuple(b) or squeeze_key(a) == squeeze_key(b)


def _group(names: list[str]) -> dict[str, dict[str, str]]:
    groups: dict[str, dict[str, str]] = {}
    for n in names:
        mod, leaf = split_name(n)
        groups.setdefault(mod, {})[leaf] = n
    return groups


def canonical_leaf(name: str, siblings: Mapping[str, object], mtype: str | None = None) -> str:
    """The PyTorch spelling of a parameter's leaf name (used to compare the two sides).

    Args:
        name: full parameter name.
        siblings: the leaf names of the same module (leaf -> anything).
        mtype: canonical layer type if known (``"prelu"``...).
    """
    _, leaf = split_name(name)
    if leaf in MS_TO_TORCH_LEAF:
        return MS_TO_TORCH_LEAF[leaf]
    if leaf == "w" and (mtype == "prelu" or (mtype is None and set(siblings) == {"w"})):
        return "weight"  # MindSpore nn.PReLU's only parameter
    return leaf


@dataclass
class RenameResult:
    """Outcome of a rule-only rename: new names, shape changes, dropped names and notes."""

    names: dict[str, str] = field(default_factory=dict)  # old -> new (kept names map to themselves)
    reshape: dict[str, tuple[int, ...]] = field(default_factory=dict)  # old -> new shape
    dropped: dict[str, str] = field(default_factory=dict)  # old -> reason
    added: dict[str, str] = field(default_factory=dict)  # new name -> reason
    notes: list[str] = field(default_factory=list)


def torch_to_mindspore_names(
    shapes: Mapping[str, tuple[int, ...]], types: Mapping[str, str] | None = None
) -> RenameResult:
    """Rename a PyTorch state dict's names to ``mindspore.nn`` names by the built-in rules.

    Args:
        shapes: name -> shape, in state-dict order.
        types: optional module path -> canonical layer type (from the model); decides cases the
            shapes cannot (Embedding vs Linear without bias, PReLU vs a norm without bias).

    Returns:
        A :class:`RenameResult`; Conv1d weights get MindSpore's ``(out, in, 1, k)`` shape.
    """
    types = types or {}
    res = RenameResult()
    groups = _group(list(shapes))
    unsure: list[str] = []
    for mod, leaves in groups.items():
        mtype = types.get(mod)
        is_bn = mtype == "batch_norm" or (
            mtype is None and "running_mean" in leaves and "running_var" in leaves
        )
        w = leaves.get("weight")
        b = leaves.get("bias")
        wshape = tuple(shapes[w]) if w else None
        bshape = tuple(shapes[b]) if b else None
        only_wb = set(leaves) <= {"weight", "bias"}
        is_norm = mtype in ("layer_norm", "group_norm", "instance_norm", "instance_norm1d",
                            "instance_norm2d", "instance_norm3d") or (
            mtype is None and only_wb and wshape is not None and len(wshape) == 1
            and bshape == wshape
        )
        is_emb = mtype == "embedding" or (
            mtype is None and set(leaves) == {"weight"} and wshape is not None
            and len(wshape) == 2 and bool(_EMB_NAME.search(mod))
        )
        is_prelu = mtype == "prelu"
        is_conv1d = mtype in (None, "conv") and wshape is not None and len(wshape) == 3
        for leaf, name in leaves.items():
            new_leaf = leaf
            if is_bn and leaf == NBT:
                res.dropped[name] = NBT_NOTE
                continue
            if is_bn and leaf in BN_TORCH_TO_MS:
                new_leaf = BN_TORCH_TO_MS[leaf]
            elif is_norm and leaf in ("weight", "bias"):
                new_leaf = BN_TORCH_TO_MS[leaf]  # LayerNorm/GroupNorm: gamma, beta as BN
            elif is_emb and leaf == "weight":
                new_leaf = "embedding_table"
            elif is_prelu and leaf == "weight":
                new_leaf = "w"
            elif is_conv1d and leaf == "weight":
                o, i, k = wshape  # type: ignore[misc]
                res.reshape[name] = (o, i, 1, k)
            new = f"{mod}.{new_leaf}" if mod else new_leaf
            res.names[name] = new
        if mtype is None and set(leaves) == {"weight"} and wshape is not None:
            if len(wshape) == 1:
                unsure.append(f"{mod}: 1-D weight without bias (PReLU 'w' or a norm 'gamma'?)")
            elif len(wshape) == 2 and not is_emb:
                unsure.append(f"{mod}: 2-D weight without bias (Linear or Embedding?)")
    if res.reshape:
        res.notes.append(
            f"{len(res.reshape)} 3-D weight(s) taken as Conv1d and reshaped to MindSpore's "
            "(out, in, 1, k)"
        )
    if res.dropped:
        res.notes.append(f"{len(res.dropped)} num_batches_tracked dropped ({NBT_NOTE})")
    if unsure:
        res.notes.append("kept as 'weight' (give a template or model to decide): "
                         + "; ".join(unsure[:5]) + (" ..." if len(unsure) > 5 else ""))
    return res


def mindspore_to_torch_names(
    shapes: Mapping[str, tuple[int, ...]], types: Mapping[str, str] | None = None
) -> RenameResult:
    """Rename ``mindspore.nn`` names to PyTorch names (``gamma`` -> ``weight``...).

    BatchNorm layers get a ``num_batches_tracked`` entry (reported in ``added``) so the result
    loads into a PyTorch module with ``strict=True``. MindSpore's ``(out, in, 1, k)`` Conv1d
    weights are ambiguous with Conv2d ``(1, k)`` kernels and are left alone unless ``types``
    says the layer is 1-D (use a template to be sure).
    """
    types = types or {}
    res = RenameResult()
    groups = _group(list(shapes))
    for mod, leaves in groups.items():
        mtype = types.get(mod)
        for name in leaves.values():
            new_leaf = canonical_leaf(name, leaves, mtype)
            res.names[name] = f"{mod}.{new_leaf}" if mod else new_leaf
        if "moving_mean" in leaves and "moving_variance" in leaves and NBT not in leaves:
            res.added[f"{mod}.{NBT}" if mod else NBT] = "int64 0 (MindSpore keeps no counter)"
    if res.added:
        res.notes.append(f"{len(res.added)} num_batches_tracked added as 0 for PyTorch BatchNorm")
    return res


def looks_like(names: list[str]) -> str:
    """Guess which framework's naming a state dict uses: ``"mindspore"``, ``"torch"`` or ``""``."""
    leaves = {split_name(n)[1] for n in names}
    if leaves & {"gamma", "moving_mean", "moving_variance", "embedding_table"}:
        return "mindspore"
    if leaves & {"running_mean", "running_var", NBT}:
        return "torch"
    return ""
