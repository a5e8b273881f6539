"""Modules paired by the parameters they own.

Two faithful implementations of one network may organise their module trees differently: a port
flattens torchvision's conv + norm + activation groups into the parent sequence (every later
block index shifts by two), names blocks ``expand``/``dw``/``project`` instead of ``conv.0.0``,
or wraps layers in extra cells. Paths and positions then mislead; the parameters do not: the
weight mapping (:func:`netparity.ckpt.mapping.map_names`, the one ``netparity ckpt map`` uses,
from names, shapes and order) pairs the parameters, and a module owns a set of parameters.

* A module that holds parameters directly maps to the module holding their counterparts.
* A container maps to the candidate module whose subtree holds exactly the counterparts of its
  own subtree's parameters (so a block maps to a block, while a group the port flattened away --
  torchvision's ``features.0`` = conv + norm + ReLU6 -- maps to nothing and is left to the
  sequence alignment).

Example:
    >>> ref = [("f.0.0.weight", (8, 3, 3, 3)), ("f.0.1.weight", (8,)),
    ...        ("f.1.conv.0.weight", (8, 8, 1, 1)), ("f.1.conv.1.weight", (8,))]
    >>> cand = [("f.0.weight", (8, 3, 3, 3)), ("f.1.weight", (8,)),
    ...         ("f.3.proj.weight", (8, 8, 1, 1)), ("f.3.bn.weight", (8,))]
    >>> sorted(modules_by_ownership(ref, cand).items())  # f.0 was flattened away: no pair
    ... # doctest: +NORMALIZE_WHITESPACE
    [('f', 'f'), ('f.0.0', 'f.0'), ('f.0.1', 'f.1'), ('f.1', 'f.3'), ('f.1.conv.0', 'f.3.proj'),
     ('f.1.conv.1', 'f.3.bn')]
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np


def _module(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else ""


def _ancestors(path: str) -> list[str]:
    """``a.b.c`` -> ``["a.b.c", "a.b", "a"]`` (the root ``""`` is left out)."""
    parts = path.split(".") if path else []
    return [".".join(parts[:i]) for i in range(len(parts), 0, -1)]


def _common(paths: list[str]) -> str:
    split = [p.split(".") for p in paths]
    out: list[str] = []
    for tokens in zip(*split):
        if len(set(tokens)) != 1:
            break
        out.append(tokens[0])
    return ".".join(out)


def param_pairs(ref: list[tuple[str, tuple[int, ...]]], cand: list[tuple[str, tuple[int, ...]]],
                mapping: Any = None) -> dict[str, str]:
    """Reference parameter -> candidate parameter from names, shapes and order alone."""
    from netparity.ckpt.mapping import map_names

    def shapes(side: list[tuple[str, tuple[int, ...]]]) -> dict[str, Any]:
        # zero-size views: map_names looks at shapes and order only
        return {n: np.broadcast_to(np.float32(0), tuple(s)) for n, s in side}

    nm = map_names(shapes(ref), shapes(cand), mapping=mapping)
    return {p.ref: p.cand for p in nm.pairs if p.shape_ok}


def _holders(pairs: dict[str, str]) -> dict[str, str]:
    """Modules holding parameters directly -> the candidate module holding all their
    counterparts."""
    out: dict[str, str] = {}
    votes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r, c in pairs.items():
        votes[_module(r)][_module(c)] += 1
    for rm, vs in votes.items():
        cm, n = max(vs.items(), key=lambda kv: kv[1])
        if rm and cm and n == sum(vs.values()):
            out[rm] = cm
    return out


def follow_siblings(ref_paths: Iterable[str], cand_paths: Iterable[str],
                    known: dict[str, str]) -> dict[str, str]:
    """Numbered modules (``P.t``) that follow their paired siblings: where every paired
    numbered sibling ``P.j`` of the reference went to ``Q.(j + k)`` -- one candidate parent
    ``Q``, one shift ``k`` (a port that flattened a group into its parent, or added layers
    before it) -- ``P.t`` goes to ``Q.(t + k)``, when that candidate module is one of
    ``cand_paths`` and nobody's counterpart yet. A conv paired two places over takes its
    BatchNorm and activation with it: they never fall back to the module of the same index.

    Example:
        >>> follow_siblings(["f.1.2"], ["f.2", "f.5"], {"f.1.0": "f.3", "f.1.1": "f.4"})
        {'f.1.2': 'f.5'}
        >>> follow_siblings(["f.1.2"], ["f.5"], {"f.1.0": "f.3", "f.1.1": "g.4"})  # no one shift
        {}
    """
    shifts: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for r, c in known.items():
        rp, _, rt = r.rpartition(".")
        cp, _, ct = c.rpartition(".")
        if rt.isdigit() and ct.isdigit():
            shifts[rp].add((cp, int(ct) - int(rt)))
    cands = set(cand_paths)
    taken = set(known.values())
    out: dict[str, str] = {}
    for r in ref_paths:
        rp, _, rt = r.rpartition(".")
        sh = shifts.get(rp)
        if r in known or not rt.isdigit() or sh is None or len(sh) != 1:
            continue
        (cp, k), = sh
        c = f"{cp}.{int(rt) + k}" if cp else str(int(rt) + k)
        if c in cands and c not in taken:
            out[r] = c
            taken.add(c)
    return out


def _sibling_params(ref: list[tuple[str, tuple[int, ...]]],
                    cand: list[tuple[str, tuple[int, ...]]], pairs: dict[str, str],
                    holders: dict[str, str]) -> dict[str, str]:
    """Parameters of layers left unpaired (the weight mapping saw several equal candidates)
    paired through :func:`follow_siblings`: each tensor with its counterpart of the same role
    (``weight`` = ``gamma``...) and a compatible shape, and only when the whole layer pairs."""
    from netparity.ckpt.rules import canonical_leaf, shapes_compatible

    def layers(side: list[tuple[str, tuple[int, ...]]],
               paired: set[str]) -> dict[str, dict[str, tuple[str, tuple[int, ...]]]]:
        by_mod: dict[str, dict[str, tuple[int, ...]]] = defaultdict(dict)
        for n, shape in side:
            by_mod[_module(n)][n] = tuple(shape)
        out: dict[str, dict[str, tuple[str, tuple[int, ...]]]] = {}
        for m, ns in by_mod.items():
            if m and not paired & set(ns):
                leaves = {n.rsplit(".", 1)[-1]: None for n in ns}
                out[m] = {canonical_leaf(n, leaves): (n, shape) for n, shape in ns.items()}
        return out

    open_r, open_c = layers(ref, set(pairs)), layers(cand, set(pairs.values()))
    if not open_r or not open_c:
        return {}
    more: dict[str, str] = {}
    for rm, cm in follow_siblings(open_r, open_c, holders).items():
        roles_r, roles_c = open_r[rm], open_c[cm]
        shared = set(roles_r) & set(roles_c)
        if shared and len(shared) == min(len(roles_r), len(roles_c)) and all(
                shapes_compatible(roles_r[k][1], roles_c[k][1]) for k in shared):
            more.update({roles_r[k][0]: roles_c[k][0] for k in shared})
    return more


def modules_by_ownership(ref: list[tuple[str, tuple[int, ...]]],
                         cand: list[tuple[str, tuple[int, ...]]],
                         mapping: Any = None) -> dict[str, str]:
    """Reference module path -> candidate module path, from the parameters each owns.

    ``ref`` / ``cand``: (parameter name, shape) in the order the models create them.
    """
    pairs = param_pairs(ref, cand, mapping)
    if not pairs:
        return {}
    out = _holders(pairs)
    # layers the weights left open (several equal candidates) follow their paired siblings
    more = _sibling_params(ref, cand, pairs, out)
    if more:
        pairs.update(more)
        out = _holders(pairs)
    # containers: the candidate subtree that holds exactly the counterparts of theirs
    ref_under: dict[str, set[str]] = defaultdict(set)
    for r, _ in ref:
        for a in _ancestors(_module(r)):
            ref_under[a].add(r)
    cand_under: dict[str, set[str]] = defaultdict(set)
    for c, _ in cand:
        for a in _ancestors(_module(c)):
            cand_under[a].add(c)
    leaf_targets = set(out.values())
    containers: dict[str, list[str]] = {}
    for rm, owned in ref_under.items():
        if rm in out or not all(r in pairs for r in owned):
            continue
        targets = {pairs[r] for r in owned}
        common = _common([_module(c) for c in targets])
        if common in leaf_targets:
            continue  # a wrapper around one layer (Sequential(Dropout, Linear)): the layer pairs
        # candidate modules whose subtree holds exactly the counterparts; none when the common
        # ancestor holds more (the port flattened this group away). Several when wrappers nest
        # around the same layers: the same path if it is one of them, else the outermost.
        valid = [a for a in _ancestors(common) if cand_under.get(a, set()) == targets]
        if valid:
            containers.setdefault(rm if rm in valid else valid[-1], []).append(rm)
    for cm, rms in containers.items():
        # nested wrappers owning the same parameters (torchvision's block and its ``conv``
        # Sequential): the outermost computes what the candidate's module computes (the residual
        # add included); the inner ones have no counterpart
        out[min(rms, key=lambda m: m.count("."))] = cm
    return out
