"""Matching parameter names between two checkpoints (or models) of the same network.

:func:`map_names` pairs every reference parameter with a candidate parameter, in passes, each
recorded in ``Pair.how``:

1. ``user``: the mapping you give (``params`` exact names; ``modules``/``rules`` rename module
   paths, the leaf is matched by the built-in rules). A pair whose shapes do not fit raises
   :class:`~netparity.errors.MappingError`.
2. ``exact``: the same name on both sides.
3. ``rule``: the same name once MindSpore leaves are spelt the PyTorch way (``gamma`` ->
   ``weight``, ``moving_variance`` -> ``running_var``, ``embedding_table`` -> ``weight``, PReLU
   ``w`` -> ``weight``; see :mod:`.rules`).
4. ``structure``: the remaining parameters are grouped by module; a module's signature is its
   leaves and shapes (and layer type when models are given). Modules match when their signature
   is unique within the window the already-matched neighbours leave (so ``fc`` <-> ``classifier``
   needs no rule), or when one name is clearly the most similar (``downsample`` <->
   ``down_sample``). With models, equal signatures are paired in module-tree order. Otherwise the
   choice is **reported** in ``ambiguous`` with its candidates, never guessed.

``num_batches_tracked`` without a counterpart is dropped with a note. Shapes are compatible when
equal or equal up to 1s (PyTorch Conv1d ``(o, i, k)`` vs MindSpore ``(o, i, 1, k)``).

Example:
    >>> import numpy as np
    >>> ref = {"conv.weight": np.zeros((4, 3, 3, 3)), "bn.weight": np.zeros(4),
    ...        "bn.bias": np.zeros(4), "bn.running_mean": np.zeros(4),
    ...        "bn.running_var": np.zeros(4), "fc.weight": np.zeros((2, 4))}
    >>> cand = {"conv.weight": np.zeros((4, 3, 3, 3)), "bn.moving_mean": np.zeros(4),
    ...         "bn.moving_variance": np.zeros(4), "bn.gamma": np.zeros(4),
    ...         "bn.beta": np.zeros(4), "classifier.weight": np.zeros((2, 4))}
    >>> m = map_names(ref, cand)
    >>> m.ref_to_cand()["bn.weight"], m.ref_to_cand()["fc.weight"], bool(m)
    ('bn.gamma', 'classifier.weight', True)
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from netparity.ckpt.io import (
    CheckpointDict,
    as_checkpoint,
    is_stand_in,
    load_checkpoint,
    torch_to_numpy,
)
from netparity.ckpt.rules import NBT, NBT_NOTE, canonical_leaf, shapes_compatible, split_name
from netparity.errors import CheckpointError, MappingError


@dataclass
class Pair:
    """One matched parameter."""

    ref: str
    cand: str
    how: str  # "user" | "exact" | "rule" | "structure" | "order"
    ref_shape: tuple[int, ...]
    cand_shape: tuple[int, ...]
    note: str = ""

    @property
    def shape_ok(self) -> bool:
        return shapes_compatible(self.ref_shape, self.cand_shape)

    @property
    def reshape(self) -> bool:
        """True when converting needs a reshape (same data, different 1-dims)."""
        return self.shape_ok and tuple(self.ref_shape) != tuple(self.cand_shape)


@dataclass
class NameMap:
    """Result of :func:`map_names`. Truthy when every parameter found its counterpart."""

    pairs: list[Pair] = field(default_factory=list)
    unmatched_ref: list[str] = field(default_factory=list)
    unmatched_cand: list[str] = field(default_factory=list)
    ambiguous: dict[str, list[str]] = field(default_factory=dict)  # ref -> candidate names
    dropped_ref: dict[str, str] = field(default_factory=dict)  # name -> why
    dropped_cand: dict[str, str] = field(default_factory=dict)
    #: tied/shared tensors: name -> the name it is an alias of (same side, identical tensor)
    aliases_ref: dict[str, str] = field(default_factory=dict)
    aliases_cand: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return not (self.unmatched_ref or self.unmatched_cand or self.ambiguous) and all(
            p.shape_ok for p in self.pairs
        )

    def ref_to_cand(self) -> dict[str, str]:
        return {p.ref: p.cand for p in self.pairs}

    def cand_to_ref(self) -> dict[str, str]:
        return {p.cand: p.ref for p in self.pairs}

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.pairs:
            out[p.how] = out.get(p.how, 0) + 1
        return out

    def shape_mismatches(self) -> list[Pair]:
        return [p for p in self.pairs if not p.shape_ok]

    def check_shapes(self) -> None:
        """Raise :class:`MappingError` naming the first pair whose shapes do not fit."""
        bad = self.shape_mismatches()
        if bad:
            p = bad[0]
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            raise MappingError(
                f"shape mismatch: {p.ref} {tuple(p.ref_shape)} vs {p.cand} {tuple(p.cand_shape)}{more}"
            )

    def to_mapping(self) -> dict[str, Any]:
        """The mapping-file form (``{"params": {ref: cand}}``), readable by ``load_mapping``."""
        return {"params": self.ref_to_cand()}

    def to_json(self) -> dict[str, Any]:
        """Everything, for reports."""
        d = asdict(self)
        d["pairs"] = [dict(asdict(p), shape_ok=p.shape_ok) for p in self.pairs]
        d["ok"] = bool(self)
        return d

    def save(self, path: str | os.PathLike) -> Path:
        """Write the mapping file (JSON ``{"params": {...}}``), atomically."""
        from netparity.outputs import write_text_atomic

        p = Path(path)
        write_text_atomic(p, json.dumps(self.to_mapping(), indent=1) + "\n", what="mapping")
        return p

    @classmethod
    def load(cls, path: str | os.PathLike) -> NameMap:
        """Read a mapping file's ``params`` back as ``user`` pairs (shapes unknown: ``()``)."""
        from netparity.mapfile import load_mapping

        m = load_mapping(path)
        return cls(pairs=[Pair(r, c, "user", (), ()) for r, c in m.params.items()])


# --- inputs: checkpoints, paths, models --------------------------------------------------------


def _model_adapter(obj: Any) -> Any:
    """The framework adapter of a model (PyTorch ``nn.Module``, MindSpore ``nn.Cell`` or a
    subclass from any library), or None for anything else."""
    from netparity.errors import FrameworkError
    from netparity.frameworks.registry import adapter_for

    try:
        a = adapter_for(obj)
    except FrameworkError:
        return None
    return a if a.is_model(obj) else None


def is_model(obj: Any) -> bool:
    """Whether ``obj`` is a model of an imported framework."""
    return _model_adapter(obj) is not None


@dataclass
class ModelInfo:
    """Per parameter: its layer's canonical type and whether it is trainable."""

    types: dict[str, str]  # module path -> canonical type
    trainable: dict[str, bool]  # param name -> trainable
    framework: str


def model_info(model: Any) -> ModelInfo:
    """A model's layer types and trainable flags, through its framework's adapter."""
    a = _model_adapter(model)
    if a is None:
        raise MappingError(f"not a model of an imported framework: {type(model).__name__}")
    types, trainable = a.model_layout(model)
    return ModelInfo(types, trainable, a.name)


def state_of(obj: Any, *, shapes_only: bool = False) -> CheckpointDict:
    """A checkpoint dict from a path, a mapping of arrays, or a model's parameters
    (``shapes_only``: a file's tensors are read as shape-only stand-ins)."""
    if isinstance(obj, (str, os.PathLike)):
        return load_checkpoint(obj, shapes_only=shapes_only)
    a = _model_adapter(obj)
    if a is not None:
        out = CheckpointDict()
        for k, arr, dtype in a.model_state(obj):
            out[k], out.dtypes[k] = arr, dtype
        out.format = f"{a.name}-model"
        return out
    if isinstance(obj, Mapping):
        return as_checkpoint({k: _arr(v) for k, v in obj.items()}, getattr(obj, "dtypes", None))
    raise CheckpointError(f"cannot read parameters from a {type(obj).__name__}")


def _arr(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return v
    if hasattr(v, "detach") and hasattr(v, "dtype"):
        return torch_to_numpy(v)[0]
    if hasattr(v, "asnumpy"):
        return v.asnumpy()
    return np.asarray(v)


def _shapes(d: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    return {k: tuple(int(x) for x in np.shape(v)) for k, v in d.items()}


def _mapping_obj(mapping: Any) -> Any:
    if mapping is None:
        return None
    from netparity.mapfile import Mapping as UserMapping
    from netparity.mapfile import load_mapping

    if isinstance(mapping, UserMapping):
        return mapping
    if isinstance(mapping, NameMap):
        return UserMapping.from_dict(mapping.to_mapping(), source="<NameMap>")
    if isinstance(mapping, (str, os.PathLike)):
        return load_mapping(mapping)
    if isinstance(mapping, Mapping):
        if set(mapping) <= {"modules", "rules", "ops", "params"}:
            return UserMapping.from_dict(dict(mapping))
        return UserMapping.from_dict({"params": dict(mapping)})  # plain {ref: cand}
    raise MappingError(f"a mapping must be a file, a dict or a NameMap, not {type(mapping).__name__}")


# --- the matcher --------------------------------------------------------------------------------


class _Side:
    def __init__(self, shapes: dict[str, tuple[int, ...]], info: ModelInfo | None) -> None:
        self.shapes = shapes
        self.order = {n: i for i, n in enumerate(shapes)}
        self.info = info
        self.groups: dict[str, dict[str, str]] = {}
        for n in shapes:
            mod, leaf = split_name(n)
            self.groups.setdefault(mod, {})[leaf] = n
        self.canon: dict[str, str] = {}
        seen: dict[str, list[str]] = {}
        for mod, leaves in self.groups.items():
            mtype = info.types.get(mod) if info else None
            for n in leaves.values():
                c = canonical_leaf(n, leaves, mtype)
                c = f"{mod}.{c}" if mod else c
                self.canon[n] = c
                seen.setdefault(c, []).append(n)
        for ns in seen.values():  # two names collapsing to one: keep both as they are
            if len(ns) > 1:
                for n in ns:
                    self.canon[n] = n
        self.free = set(shapes)

    def leaf(self, n: str) -> str:
        return split_name(self.canon[n])[1]

    def mtype(self, mod: str) -> str | None:
        return self.info.types.get(mod) if self.info else None


def _norm(path: str) -> str:
    return path.lower().replace("_", "")


def _sim(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, _norm(a), _norm(b), autojunk=False).ratio()


class _Sims:
    """:func:`_sim` (reference module, candidate module) for many pairs, each computed once per
    matching (the structural pass asks the same questions again after every match it makes)."""

    def __init__(self) -> None:
        self.done: dict[tuple[str, str], float] = {}

    def get(self, refs: list[str], cand: str) -> list[float]:
        todo = [r for r in refs if (r, cand) not in self.done]
        if todo:
            sm = difflib.SequenceMatcher(None, autojunk=False)
            sm.set_seq2(_norm(cand))  # analysed once for all the references
            for r in todo:
                sm.set_seq1(_norm(r))
                self.done[r, cand] = sm.ratio()
        return [self.done[r, cand] for r in refs]

    def one(self, ref: str, cand: str) -> float:
        return self.get([ref], cand)[0]


def _check_modules_exist(um: Any, names: Any) -> None:
    """Every module a mapping names must hold a reference parameter (itself or below it): a
    misspelt name used to be ignored silently, leaving the pairs it meant to fix unmatched."""
    mods = {split_name(n)[0] for n in names}
    for m in um.modules:
        if m not in mods and not any(x.startswith(m + ".") for x in mods):
            raise MappingError(f"{um.source}: mapping names module {m!r}, which holds no "
                               "reference parameter")


def map_names(
    ref: Any,
    cand: Any,
    *,
    ref_model: Any = None,
    cand_model: Any = None,
    mapping: Any = None,
) -> NameMap:
    """Pair the parameters of ``ref`` with those of ``cand``.

    Args:
        ref: reference checkpoint: a path, a ``{name: array}`` dict, or a model.
        cand: candidate checkpoint, same kinds.
        ref_model: optional torch ``nn.Module`` / MindSpore ``nn.Cell`` of the reference side
            (gives layer types and tree order; ``ref`` itself may be that model).
        cand_model: same for the candidate side.
        mapping: user mapping: a file, ``{"params": ..., "modules": ..., "rules": ...}``, a plain
            ``{ref: cand}`` dict or a :class:`NameMap`.

    Returns:
        A :class:`NameMap`.

    Raises:
        MappingError: the user mapping names a parameter that does not exist or whose shapes
            do not fit.

    Example:
        >>> import numpy as np
        >>> z = np.zeros((2, 2))
        >>> m = map_names({"a.weight": z, "b.weight": z}, {"x.weight": z, "y.weight": z})
        >>> [(p.ref, p.cand, p.how) for p in m.pairs]  # same layer sequence: paired in order
        [('a.weight', 'x.weight', 'order'), ('b.weight', 'y.weight', 'order')]
        >>> m = map_names({"a.weight": z, "b.weight": z},
        ...               {"x.weight": z, "y.weight": z, "w.weight": z})
        >>> m.ambiguous["a.weight"]  # three candidates for two: nothing is guessed
        ['x.weight', 'y.weight', 'w.weight']
    """
    if ref_model is None and is_model(ref):
        ref_model = ref
    if cand_model is None and is_model(cand):
        cand_model = cand
    # files: names and shapes are all the matching needs (values only for tied weights, below)
    rs = ref if isinstance(ref, Mapping) else state_of(ref, shapes_only=True)
    cs = cand if isinstance(cand, Mapping) else state_of(cand, shapes_only=True)
    R = _Side(_shapes(rs), model_info(ref_model) if ref_model is not None else None)
    C = _Side(_shapes(cs), model_info(cand_model) if cand_model is not None else None)
    out = NameMap()
    both_models = R.info is not None and C.info is not None

    def pair(r: str, c: str, how: str, note: str = "") -> None:
        out.pairs.append(Pair(r, c, how, R.shapes[r], C.shapes[c], note))
        R.free.discard(r)
        C.free.discard(c)

    # 1. user mapping
    um = _mapping_obj(mapping)
    if um is not None:
        for r, c in um.params.items():
            if r not in R.shapes:
                raise MappingError(f"mapping names reference parameter {r!r}, which does not exist")
            if c not in C.shapes:
                raise MappingError(f"mapping names candidate parameter {c!r}, which does not exist")
            if not shapes_compatible(R.shapes[r], C.shapes[c]):
                raise MappingError(
                    f"shape mismatch in mapping: {r} {R.shapes[r]} vs {c} {C.shapes[c]}"
                )
            pair(r, c, "user")
        _check_modules_exist(um, R.shapes)
        if um.modules or um.rules:
            cand_by_canon = {C.canon[n]: n for n in C.shapes}
            for r in sorted(R.free, key=R.order.__getitem__):
                mod, _ = split_name(r)
                tgt = um.module_target(mod) if mod else None
                if tgt is None:
                    continue
                c = cand_by_canon.get(f"{tgt}.{R.leaf(r)}" if tgt else R.leaf(r))
                if c is None or c not in C.free:
                    continue
                if not shapes_compatible(R.shapes[r], C.shapes[c]):
                    raise MappingError(
                        f"shape mismatch in mapping: {r} {R.shapes[r]} vs {c} {C.shapes[c]}"
                    )
                pair(r, c, "user")

    # 2. exact names, 3. rule names (shape mismatches are kept and flagged, not hidden)
    for r in sorted(R.free, key=R.order.__getitem__):
        if r in C.free:
            pair(r, r, "exact")
    cand_by_canon = {C.canon[n]: n for n in C.free}
    for r in sorted(R.free, key=R.order.__getitem__):
        c = cand_by_canon.get(R.canon[r])
        if c is not None and c in C.free:
            pair(r, c, "rule")

    # num_batches_tracked: no MindSpore counterpart
    for side, dropped in ((R, out.dropped_ref), (C, out.dropped_cand)):
        for n in list(side.free):
            if split_name(n)[1] == NBT:
                dropped[n] = NBT_NOTE
                side.free.discard(n)

    # 4. structure, 5. order within the gaps the matches leave
    _structural(R, C, out, pair, both_models)
    if R.free and C.free:
        _by_order(R, C, out, pair)

    # 6. tied weights: a leftover identical to a tensor of its own side is that tensor again
    # (an LM head tied to the embedding: PyTorch lists both names, MindSpore stores it once)
    for side, src, state, aliases in ((R, ref, rs, out.aliases_ref),
                                      (C, cand, cs, out.aliases_cand)):
        if side.free and isinstance(src, (str, os.PathLike)):
            state = load_checkpoint(src)  # the values, now that some are left over
        for n, of in _aliases(sorted(side.free, key=side.order.__getitem__), state,
                              side.order).items():
            aliases[n] = of
            side.free.discard(n)
            out.ambiguous.pop(n, None)
    if out.aliases_ref or out.aliases_cand:
        k, v = next(iter({**out.aliases_ref, **out.aliases_cand}.items()))
        out.notes.append(f"{len(out.aliases_ref) + len(out.aliases_cand)} tied tensor(s) kept "
                         f"as aliases, e.g. {k} = {v}")
    out.unmatched_ref = sorted(R.free, key=R.order.__getitem__)
    out.unmatched_cand = sorted(C.free, key=C.order.__getitem__)
    for r in out.ambiguous:
        if r in out.unmatched_ref:
            out.unmatched_ref.remove(r)
    out.pairs.sort(key=lambda p: R.order[p.ref])
    if out.dropped_ref or out.dropped_cand:
        out.notes.append(f"{len(out.dropped_ref) + len(out.dropped_cand)} num_batches_tracked "
                         "dropped (MindSpore has no such counter)")
    bad = out.shape_mismatches()
    if bad:
        out.notes.append(f"{len(bad)} pair(s) with incompatible shapes, e.g. {bad[0].ref} "
                         f"{bad[0].ref_shape} vs {bad[0].cand} {bad[0].cand_shape}")
    if out.ambiguous:
        out.notes.append(f"{len(out.ambiguous)} parameter(s) ambiguous: give a mapping "
                         "(--mapping) or the models")
    return out


def _signature(side: _Side, mod: str, names: list[str], with_type: bool) -> tuple:
    sig = tuple(sorted((side.leaf(n), tuple(d for d in side.shapes[n] if d != 1)) for n in names))
    return (side.mtype(mod) if with_type else None, sig)


def _structural(R: _Side, C: _Side, out: NameMap, pair: Any, both_models: bool) -> None:
    def modules(side: _Side) -> dict[str, list[str]]:
        mods: dict[str, list[str]] = {}
        for n in sorted(side.free, key=side.order.__getitem__):
            mods.setdefault(split_name(n)[0], []).append(n)
        return mods

    sims = _Sims()
    changed = True
    while changed:
        changed = False
        rmods, cmods = modules(R), modules(C)
        if not rmods or not cmods:
            return
        rsig = {m: _signature(R, m, ns, both_models) for m, ns in rmods.items()}
        csig = {m: _signature(C, m, ns, both_models) for m, ns in cmods.items()}
        cby, rby = _by_signature(csig), _by_signature(rsig)
        rpos = {m: min(R.order[n] for n in ns) for m, ns in rmods.items()}
        cpos = {m: min(C.order[n] for n in ns) for m, ns in cmods.items()}
        anchors = _monotone_anchors([(R.order[p.ref], C.order[p.cand]) for p in out.pairs])

        def window(
            pos: int, fwd: bool, anchors: list[tuple[int, int]] = anchors
        ) -> tuple[float, float]:
            lo, hi = -1.0, float("inf")
            for a, b in anchors:
                x, y = (a, b) if fwd else (b, a)
                if x < pos:
                    lo = max(lo, y)
                elif x > pos:
                    hi = min(hi, y)
            return lo, hi

        for rm in sorted(rmods, key=rpos.__getitem__):
            same = cby.get(rsig[rm], [])
            if not same:
                continue
            lo, hi = window(rpos[rm], True)
            inwin = [cm for cm in same if lo < cpos[cm] < hi] or same
            rivals = rby[rsig[rm]]
            choice, note = None, ""
            if len(inwin) == 1:
                cm = inwin[0]
                clo, chi = window(cpos[cm], False)
                back = [m for m in rivals if clo < rpos[m] < chi] or rivals
                if back == [rm]:
                    choice, note = cm, "unique layer signature in its place"
            if choice is None and len(inwin) > 1:
                scores = sorted(((sims.one(rm, cm), cm) for cm in inwin), reverse=True)
                best, second = scores[0], scores[1]
                rev = sorted(zip(sims.get(rivals, best[1]), rivals), reverse=True) if (
                    best[0] - second[0] >= 0.1) else []
                rev_clear = len(rev) == 1 or (len(rev) > 1 and rev[0][0] - rev[1][0] >= 0.1)
                if rev and rev[0][1] == rm and rev_clear:
                    choice, note = best[1], f"name similarity {best[0]:.2f}"
                elif both_models and len(rivals) == len(same):
                    k = sorted(rivals, key=rpos.__getitem__).index(rm)
                    choice = sorted(same, key=cpos.__getitem__)[k]
                    note = "module-tree order (same type and shapes)"
            if choice is None:
                continue
            by_leaf = {C.leaf(n): n for n in cmods[choice]}
            for rn in rmods[rm]:
                pair(rn, by_leaf[R.leaf(rn)], "structure", note)
            changed = True
            break  # recompute modules and anchors with the new match
    # what is left with several equally good candidates is reported, not guessed
    rmods, cmods = modules(R), modules(C)
    csig = {m: _signature(C, m, ns, both_models) for m, ns in cmods.items()}
    rsig = {m: _signature(R, m, ns, both_models) for m, ns in rmods.items()}
    cby, rby = _by_signature(csig), _by_signature(rsig)
    for rm, ns in rmods.items():
        same = cby.get(rsig[rm], [])
        rivals = rby[rsig[rm]]
        if len(same) > 1 or (same and len(rivals) > 1):
            for rn in ns:
                out.ambiguous[rn] = [n for cm in same for n in cmods[cm] if C.leaf(n) == R.leaf(rn)]


def _by_signature(sigs: dict[str, tuple]) -> dict[tuple, list[str]]:
    """Modules by signature, each list in the order of ``sigs``."""
    out: dict[tuple, list[str]] = {}
    for m, sig in sigs.items():
        out.setdefault(sig, []).append(m)
    return out


def _aliases(names: list[str], state: Mapping[str, Any],
             order: dict[str, int]) -> dict[str, str]:
    """Leftover name -> an earlier-or-other tensor of the same checkpoint with identical shape,
    dtype and bytes (a tied weight); only where the values are really there."""
    out: dict[str, str] = {}
    for n in names:
        a = np.asarray(state[n])
        if a.size < 2 or is_stand_in(a):
            continue
        flat = a.reshape(-1)
        if np.array_equal(flat, np.full_like(flat, flat[0])):
            continue  # constant (fresh zeros/ones): equal to many tensors without being tied
        for m in sorted(state, key=order.__getitem__):
            if m == n or m in out:
                continue
            b = np.asarray(state[m])
            if b.shape == a.shape and b.dtype == a.dtype and not is_stand_in(b) and np.array_equal(
                    a.view(np.uint8) if a.flags.c_contiguous else a, b.view(np.uint8)
                    if b.flags.c_contiguous else b):
                out[n] = m
                break
    return out


def _by_order(R: _Side, C: _Side, out: NameMap, pair: Any) -> None:
    """Pair what is still free gap by gap between order anchors (the pairs so far that keep
    both sides' order), layer by layer: in each gap the free parameters are grouped by the
    module holding them (a layer, in the order its first tensor is listed), and where a gap
    holds the same sequence of layers on both sides -- each layer the same roles and shapes
    (:func:`_signature`), whatever order its own tensors are listed in -- the layers pair in
    order and their tensors by role (``weight`` = ``gamma``, ``running_var`` =
    ``moving_variance``...). A port that reorganises the module tree (flattened groups, other
    block names) keeps the order in which layers create their parameters, while a checkpoint
    file may list a layer's tensors in another order (MindSpore's BatchNorm: ``moving_mean,
    moving_variance, gamma, beta``); equal layers then stop being ambiguous, as they were when
    only the two files were given. A role that only one side lists anywhere (MindSpore's
    BatchNorm statistics are parameters, recorded with the weights; PyTorch's are buffers, absent
    from a list of parameters) has nothing to pair with: it is left out of the comparison and
    stays unmatched. Gaps whose layer sequences differ stay unpaired and ambiguous: nothing is
    guessed there."""
    anchors = _monotone_anchors([(R.order[p.ref], C.order[p.cand]) for p in out.pairs])
    bounds = [(-1, -1), *anchors, (len(R.order), len(C.order))]
    shared = {R.leaf(n) for n in R.shapes} & {C.leaf(n) for n in C.shapes}
    rl, cl = _layers(R, shared), _layers(C, shared)
    for (a0, b0), (a1, b1) in zip(bounds, bounds[1:]):
        rs = [(m, ns) for pos, m, ns in rl if a0 < pos < a1]
        cs = [(m, ns) for pos, m, ns in cl if b0 < pos < b1]
        if not rs or len(rs) != len(cs):
            continue
        if all(_signature(R, rm, rn, False)[1] == _signature(C, cm, cn, False)[1]
               for (rm, rn), (cm, cn) in zip(rs, cs)):
            for (_, rn), (_, cn) in zip(rs, cs):
                by_role = {C.leaf(c): c for c in cn}
                for r in rn:
                    pair(r, by_role[R.leaf(r)], "order",
                         "same layer sequence between matched neighbours")
                    out.ambiguous.pop(r, None)


def _layers(side: _Side, roles: set[str]) -> list[tuple[int, str, list[str]]]:
    """The free tensors of ``roles`` grouped by the module holding them, each layer placed where
    its first tensor is listed (PyTorch lists a model's buffers after all its parameters: a
    BatchNorm's running statistics still belong where its weight is)."""
    groups: dict[str, list[str]] = {}
    for n in sorted(side.free, key=side.order.__getitem__):
        if side.leaf(n) in roles:
            groups.setdefault(split_name(n)[0], []).append(n)
    pos = {m: min(side.order[n] for n in side.groups[m].values()) for m in groups}
    return sorted((pos[m], m, ns) for m, ns in groups.items())


def _monotone_anchors(pts: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Longest chain of matched pairs increasing on both sides (order anchors)."""
    from netparity.sequences import longest_increasing

    pts = sorted(pts)
    return [pts[i] for i in longest_increasing([b for _, b in pts])]
