"""Repeated calls of one module within a step pair by content, arrival order breaking ties.

A module called several times in one step and direction -- gradient accumulation's micro-batches,
shared weights, a recurrent cell -- gets call indices 0, 1, 2 ... in the order the calls arrive.
Two faithful runs need not run them in the same order: a framework may run micro-batch 2's
backward first. Pairing call ``i`` with call ``i`` then pairs different data crosswise and
reports a divergence where there is none. So, after the module pass, the pairs of each
(reference module, candidate module) that holds more than one call are re-assigned by the
statistics of the calls' first output and first input (the statistics distance of
:mod:`netparity.align.features`); the arrival order is kept unless another assignment is
clearly closer (by :data:`MARGIN` per call moved), and breaks ties.

Only groups of more than one pair are looked at, so a trace whose modules run once per step
pays one ``np.unique`` per bucket.

Example:
    >>> import numpy as np
    >>> from netparity.align.repeats import best_assignment
    >>> d = np.array([[0.6, 0.0], [0.0, 0.6]])   # call 0 looks like call 1 and back
    >>> best_assignment(d).tolist()
    [1, 0]
"""

from __future__ import annotations

import itertools

import numpy as np

from netparity.align.features import Feats, stats_distance
from netparity.align.passes import Chunk, filled, pair_codes

#: how much closer (statistics distance, per call moved) another assignment must be than the
#: arrival order: rounding noise (fp32 vs bf16: ~0.02) never reorders; another micro-batch's
#: data (~0.3 and more) does
MARGIN = 0.05
#: groups up to this size are solved exactly (every permutation); larger ones greedily
_EXACT = 6
NOTE = "paired by content: the calls ran in another order"


def best_assignment(d: np.ndarray) -> np.ndarray:
    """For a ``(k, k)`` distance matrix (reference call ``i`` x candidate call ``j``, both in
    arrival order), the candidate of each reference call: the identity unless an assignment is
    closer by more than :data:`MARGIN` per call it moves.

    Small groups try every permutation (the closest, then the fewest calls moved); larger ones
    (a recurrent cell over many time steps) take the closest remaining pair first, the nearest
    in arrival order among equals.
    """
    k = len(d)
    ident = np.arange(k)
    if k < 2:
        return ident
    base = float(np.trace(d))
    if k <= _EXACT:
        best, best_key = ident, (base, 0)
        for perm in itertools.permutations(range(k)):
            p = np.array(perm)
            key = (float(d[ident, p].sum()), int((p != ident).sum()))
            if key < best_key:
                best, best_key = p, key
    else:
        i, j = np.meshgrid(ident, ident, indexing="ij")
        order = np.lexsort((np.abs(i - j).ravel(), d.ravel()))
        best = np.full(k, -1)
        used = np.zeros(k, dtype=bool)
        for c in order.tolist():
            a, b = divmod(c, k)
            if best[a] < 0 and not used[b]:
                best[a] = b
                used[b] = True
    moved = int((best != ident).sum())
    if not moved or float(d[ident, best].sum()) >= base - MARGIN * moved:
        return ident
    return best


def pair_by_content(ch: Chunk, A: Feats, B: Feats, mod_a: np.ndarray,
                    mod_b: np.ndarray) -> None:
    """Re-assign, in place, the module pairs of ``ch`` (positions into ``A``/``B``, whose
    module ids are ``mod_a``/``mod_b``) within each (reference module, candidate module) that
    holds several calls (see the module docstring). Moved pairs get method ``content``."""
    if len(ch.a) < 2:
        return
    code, _ = pair_codes(mod_a[ch.a], mod_b[ch.b], mod_a[:0], mod_b[:0])
    u, inv, counts = np.unique(code, return_inverse=True, return_counts=True)
    many = np.nonzero(counts > 1)[0]
    if not len(many):
        return
    inv = inv.reshape(-1)
    for g in many.tolist():
        at = np.nonzero(inv == g)[0]  # pairs of the group, in reference arrival order
        o = np.argsort(ch.a[at], kind="stable")
        at = at[o]
        ia = ch.a[at]
        ib = np.sort(ch.b[at])  # the candidate's calls in its arrival order
        d = stats_distance(A.stats[ia], B.stats[ib])
        d = d + stats_distance(A.in_stats(ia), B.in_stats(ib))
        perm = best_assignment(d / 2.0)
        new_b = ib[perm]
        moved = new_b != ch.b[at]
        if not moved.any():
            continue
        ch.b[at] = new_b
        ch.cost[at[moved]] = (d / 2.0)[np.arange(len(at)), perm][moved]
        mv = at[moved]
        ch.method[mv] = filled(len(mv), "content")
        ch.note[mv] = filled(len(mv), NOTE)
