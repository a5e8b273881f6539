"""Converting a checkpoint to the other framework's names, shapes and file format.

With a ``template`` (a checkpoint or model of the target side) names are matched against it by
:func:`~netparity.ckpt.mapping.map_names`, so renamed layers need no rules; without one the
built-in rules of :mod:`.rules` are applied. Values are copied bit for bit (dtype kept); only
reshapes that keep the data order (Conv1d ``(o, i, k)`` <-> ``(o, i, 1, k)``) are applied.

Example:
    >>> import numpy as np, tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> src = {"bn.weight": np.ones(3, np.float32), "bn.bias": np.zeros(3, np.float32),
    ...        "bn.running_mean": np.zeros(3, np.float32), "bn.running_var": np.ones(3, np.float32),
    ...        "bn.num_batches_tracked": np.array(5)}
    >>> rep = convert(src, os.path.join(d, "w.npz"), target="mindspore")
    >>> sorted(rep.names.values()), list(rep.dropped)
    (['bn.beta', 'bn.gamma', 'bn.moving_mean', 'bn.moving_variance'], ['bn.num_batches_tracked'])
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from netparity.ckpt.io import CheckpointDict, save_checkpoint
from netparity.ckpt.mapping import (
    _check_modules_exist,
    _mapping_obj,
    is_model,
    map_names,
    model_info,
    state_of,
)
from netparity.ckpt.rules import (
    looks_like,
    mindspore_to_torch_names,
    shapes_compatible,
    split_name,
    torch_to_mindspore_names,
)
from netparity.errors import CheckpointError, MappingError, UsageError

_TARGET_BY_SUFFIX = {".ckpt": "mindspore", ".pt": "torch", ".pth": "torch", ".bin": "torch"}


@dataclass
class ConvertReport:
    """What :func:`convert` did. Truthy when every target parameter was written."""

    src: str
    dst: str
    target: str  # "mindspore" | "torch" | "" (names kept)
    written: int = 0
    names: dict[str, str] = field(default_factory=dict)  # source name -> written name
    how: dict[str, str] = field(default_factory=dict)  # source name -> user/exact/rule/structure
    reshaped: dict[str, list[tuple[int, ...]]] = field(default_factory=dict)  # src -> [from, to]
    dropped: dict[str, str] = field(default_factory=dict)  # source names not written -> why
    added: dict[str, str] = field(default_factory=dict)  # written names with no source -> why
    missing: list[str] = field(default_factory=list)  # template names nothing was written for
    dtype_changes: dict[str, str] = field(default_factory=dict)  # name -> "src vs template"
    notes: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return not self.missing

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = bool(self)
        return d


def _target_for(dst: str | os.PathLike, target: str | None) -> str:
    if target:
        t = {"ms": "mindspore", "pt": "torch", "pytorch": "torch"}.get(target, target)
        if t not in ("mindspore", "torch"):
            raise UsageError(f"target must be 'mindspore' or 'torch', not {target!r}")
        return t
    return _TARGET_BY_SUFFIX.get(Path(dst).suffix.lower(), "")


def convert(
    src: Any,
    dst: str | os.PathLike,
    *,
    mapping: Any = None,
    target: str | None = None,
    template: Any = None,
    src_model: Any = None,
    fmt: str | None = None,
    overwrite: bool = True,
) -> ConvertReport:
    """Convert checkpoint ``src`` into ``dst`` with the target framework's names.

    Args:
        src: source checkpoint (path, ``{name: array}`` dict or model).
        dst: file to write; its suffix picks the format (``.ckpt`` MindSpore, ``.pt/.pth/.bin``
            PyTorch, ``.safetensors``, ``.npz``) and, unless ``target`` is given, the naming.
        mapping: user mapping (file, dict or NameMap), applied before any rule.
        target: ``"mindspore"`` or ``"torch"``; inferred from ``dst``'s suffix when None.
        template: checkpoint (path/dict) or model of the target side to map names against.
        src_model: optional source model (layer types help the rules and the matcher).
        fmt: force the output format.
        overwrite: replace an existing ``dst`` (the CLI passes False unless ``--force``); the
            file is written atomically either way, so a failure leaves the old one intact.

    Returns:
        A :class:`ConvertReport`.

    Raises:
        MappingError: a mapped pair's shapes do not fit, or a match is ambiguous.
        CheckpointError: unreadable source or template, unwritable destination, or an
            existing ``dst`` with ``overwrite=False`` (refused before any work).

    Example:
        >>> import numpy as np, tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "w.safetensors")
        >>> rep = convert({"emb.weight": np.zeros((5, 2), np.float32)}, p, target="mindspore")
        >>> rep.names
        {'emb.weight': 'emb.embedding_table'}
    """
    if not overwrite and os.path.lexists(dst):  # say so before reading anything
        raise CheckpointError(f"{dst}: exists; pass --force (overwrite=True) to replace it")
    src_ck = state_of(src)
    if src_model is None and is_model(src):
        src_model = src
    tgt = _target_for(dst, target)
    rep = ConvertReport(src=str(getattr(src_ck, "path", None) or "<memory>"), dst=str(dst),
                        target=tgt)
    out = CheckpointDict()
    if template is not None:
        _convert_with_template(src_ck, src_model, template, mapping, out, rep)
    else:
        _convert_with_rules(src_ck, src_model, mapping, tgt, out, rep)
    # .ckpt by netparity's encoder (MindSpore's layout, streamed tensor by tensor; importing
    # MindSpore to write bytes it lays out the same way took seconds)
    save_checkpoint(out, dst, fmt, overwrite=overwrite, use_mindspore=False)
    rep.written = len(out)
    return rep


def _convert_with_template(src_ck: CheckpointDict, src_model: Any, template: Any, mapping: Any,
                           out: CheckpointDict, rep: ConvertReport) -> None:
    tmpl_model = template if is_model(template) else None
    tmpl = state_of(template, shapes_only=True)  # its names, shapes and dtypes are what counts
    values_read = not isinstance(template, (str, os.PathLike))
    nm = map_names(src_ck, tmpl, ref_model=src_model, cand_model=tmpl_model, mapping=mapping)
    if nm.ambiguous:
        r, cands = next(iter(nm.ambiguous.items()))
        raise MappingError(
            f"ambiguous: {r} could be {' or '.join(cands)} ({len(nm.ambiguous)} such); "
            "give a mapping (--mapping) for them"
        )
    nm.check_shapes()
    by_cand = {p.cand: p for p in nm.pairs}
    for name in tmpl:  # the template's order is the order the target model expects
        p = by_cand.get(name)
        if p is None:
            if name in nm.dropped_cand:  # e.g. num_batches_tracked: keep the template's value
                if not values_read:
                    tmpl, values_read = state_of(template), True  # read when one is needed
                out[name] = tmpl[name]
                out.dtypes[name] = tmpl.dtype(name)
                rep.added[name] = "copied from the template (" + nm.dropped_cand[name] + ")"
            else:
                rep.missing.append(name)
            continue
        arr = src_ck[p.ref]
        if p.reshape:
            rep.reshaped[p.ref] = [tuple(arr.shape), tuple(p.cand_shape)]
            arr = arr.reshape(p.cand_shape)
        out[name] = arr
        out.dtypes[name] = src_ck.dtype(p.ref)
        if src_ck.dtype(p.ref) != tmpl.dtype(name):
            rep.dtype_changes[name] = f"{src_ck.dtype(p.ref)} (source) vs {tmpl.dtype(name)} (template)"
        rep.names[p.ref] = name
        rep.how[p.ref] = p.how
    for n in nm.unmatched_ref:
        rep.dropped[n] = "no counterpart in the template"
    rep.dropped.update(nm.dropped_ref)
    rep.notes.extend(nm.notes)
    if rep.dtype_changes:
        rep.notes.append(f"{len(rep.dtype_changes)} parameter(s) keep the source dtype, which "
                         "differs from the template's")


def _convert_with_rules(src_ck: CheckpointDict, src_model: Any, mapping: Any, tgt: str,
                        out: CheckpointDict, rep: ConvertReport) -> None:
    shapes = {k: tuple(v.shape) for k, v in src_ck.items()}
    types = model_info(src_model).types if src_model is not None else None
    style = looks_like(list(shapes))
    if tgt == "mindspore" and style != "mindspore":
        rr = torch_to_mindspore_names(shapes, types)
        how = "rule"
    elif tgt == "torch" and style == "mindspore":
        rr = mindspore_to_torch_names(shapes, types)
        how = "rule"
    else:
        from netparity.ckpt.rules import RenameResult

        rr = RenameResult(names={k: k for k in shapes})
        how = "exact"
        if tgt:
            rep.notes.append(f"names already look like {tgt}'s; kept")
        else:
            rep.notes.append("no target framework (give target= or a .ckpt/.pt destination); "
                             "names kept")
    um = _mapping_obj(mapping)
    user: dict[str, str] = {}
    if um is not None:
        _check_modules_exist(um, shapes)
        for k in shapes:
            if k in um.params:
                user[k] = um.params[k]
            else:  # module renames keep the leaf the rules chose (gamma, moving_mean...)
                mod = split_name(k)[0]
                t = um.module_target(mod) if mod else None
                if t is not None:
                    user[k] = f"{t}.{split_name(rr.names.get(k, k))[1]}"
        missing = [r for r in um.params if r not in shapes]
        if missing:
            raise MappingError(f"mapping names source parameter {missing[0]!r}, which does not exist")
    for k, arr in src_ck.items():
        if k in rr.dropped and k not in user:
            rep.dropped[k] = rr.dropped[k]
            continue
        new = user.get(k) or rr.names[k]
        if new in out:
            raise MappingError(f"two source parameters map to {new!r} (second: {k!r})")
        if k in rr.reshape and k not in user:
            to = rr.reshape[k]
            if not shapes_compatible(tuple(arr.shape), to):
                raise MappingError(f"shape mismatch: {k} {tuple(arr.shape)} vs {new} {to}")
            rep.reshaped[k] = [tuple(arr.shape), to]
            arr = arr.reshape(to)
        out[new] = arr
        out.dtypes[new] = src_ck.dtype(k)
        rep.names[k] = new
        rep.how[k] = "user" if k in user else (how if new != k else "exact")
    for name, why in rr.added.items():
        if name not in out:
            out[name] = np.array(0, dtype=np.int64)
            out.dtypes[name] = "int64"
            rep.added[name] = why
    rep.notes.extend(rr.notes)
