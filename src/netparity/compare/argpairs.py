"""Which tensor of a matched call is compared with which: arguments paired by meaning.

Alignment pairs calls (1:1, or N:M groups such as ``aten.addmm`` <-> ``MatMul + BiasAdd``);
this module pairs their tensors. Position is not meaning across frameworks: ``addmm(bias, x,
w.t())`` takes the bias first where ``MatMul(x, w)`` + ``BiasAdd(y, bias)`` take it last, a
group's first call may be a transpose of the second input while the other side's first call is
the attention product, and an ``x`` reshaped to 2-D on one side is 3-D on the other. Comparing
tensors of different shapes, or of the same shape but different meaning, reports divergences
that are not there (``shape mismatch: ref [32, 64] vs cand [2, 16, 64]`` on a correct port).

The rules:

* **Inputs of a group** are the inputs its calls take from outside the group: an input equal to
  an earlier member's output (same shape, dtype and statistics: the same tensor, as a trace
  records it twice) is internal and never compared. For a single call, its inputs.
* **Outputs** are the last call's outputs.
* Tensors of two single calls pair **by position** when both sides hold as many and every
  position has the same shape (up to size-1 dimensions), or when the two calls run the same
  native op (the same signature: a shape difference there is the finding, e.g. a padding bug).
* Otherwise **by shape and value**: each reference tensor, in order, takes the unused candidate
  tensor of the same shape (up to size-1 dimensions) whose statistics are closest. Tensors left
  over pair with one of the same number of elements only when both payloads are stored (then
  the comparison can look at them element by element in the other layout: a weight passed
  transposed, token ids flattened); statistics alone cannot compare two layouts.
* Inside an N:M group only **unambiguous** pairs are made: a shape (or, for the layout
  fallback, a size) held by exactly one tensor on each side, with related statistics. A group
  decomposes a computation differently, so its inputs are whatever each side happened to
  materialise: attention's ``q, k, v`` against ``q, k transposed, probabilities, v`` all
  ``[b, h, n, n]``, where statistics cannot tell ``k`` from its square transpose. Every such
  input is the output of an earlier call, compared there; the group's own verdict rests on
  its output.
* **Outputs**: outside the positional case only the primary (first) output is paired, by the
  rules above; the others are framework by-products (saved statistics, indices).
* The **primary output** (the first) of two calls of the same canonical op always pairs: a
  convolution whose output shape differs across frameworks is reported as a shape mismatch.
* Whatever stays unpaired is listed as unmatched, never compared.

Example:
    >>> from netparity.trace import Record
    >>> st = {"mean": 0.5, "std": 1.0, "min": -2.0, "max": 3.0, "norm": 8.0}
    >>> b = Record(kind="op", shape=(64,), stats=dict(st, mean=0.1), dtype="float32")
    >>> x2 = Record(kind="op", shape=(32, 64), stats=st, dtype="float32")
    >>> w = Record(kind="op", shape=(64, 64), stats=dict(st, mean=0.0), dtype="float32")
    >>> pairs = pair_tensors([b, x2, w], [x2, w], group=False)
    >>> [(list(a.shape), list(c.shape)) for a, c in pairs]
    [([32, 64], [32, 64]), ([64, 64], [64, 64])]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from netparity.align.features import STATS_VETO, row_distance, stat_row
from netparity.trace import Record


def squeezed(shape: Any) -> tuple[int, ...]:
    """A shape without its size-1 dimensions."""
    return tuple(int(d) for d in (shape or ()) if int(d) != 1)


def _identity(r: Record) -> tuple[Any, ...] | None:
    """What makes two records of one trace the same tensor: shape, dtype and statistics
    (None when the statistics are unknown: then nothing can be said)."""
    s = r.stats or {}
    vals = tuple(s.get(k) for k in ("mean", "std", "min", "max", "norm"))
    if any(v is None for v in vals):
        return None
    return (tuple(r.shape), r.dtype, *vals)


def group_inputs(calls: Sequence[Any]) -> list[Record]:
    """The inputs a run of calls takes from outside itself (see the module docstring)."""
    if len(calls) == 1:
        return list(calls[0].inputs)
    io = [(c.inputs, c.outputs) for c in calls]
    return external_inputs([(ins, list(map(_identity, ins)), list(map(_identity, outs)))
                            for ins, outs in io])


def external_inputs(calls: Sequence[tuple[Sequence[Any], list[Any], list[Any]]]) -> list[Any]:
    """:func:`group_inputs` of calls given as ``(inputs, identities of the inputs,
    identities of the outputs)`` (an identity: what makes two tensors of one trace the same,
    None when unknown, as :func:`_identity`); returns the external inputs."""
    made: set[Any] = set()
    out: list[Any] = []
    for ins, in_keys, out_keys in calls:
        for r, key in zip(ins, in_keys):
            if key is None or key not in made:
                out.append(r)
        made.update(k for k in out_keys if k is not None)
    return out


def _distance(a: Record, b: Record) -> float:
    d = float(row_distance(np.array([stat_row(a)]), np.array([stat_row(b)]))[0])
    return d if math.isfinite(d) else 1.0


def pair_tensors(rs: Sequence[Record], cs: Sequence[Record], *, group: bool = False,
                 positional: bool = False, primary: bool = False,
                 first_only: bool = False) -> list[tuple[Record, Record]]:
    """Pairs of reference and candidate tensors that mean the same value (module docstring).

    Args:
        rs, cs: the tensors of one role (inputs or outputs) of the two sides.
        group: the call is an N:M group on either side (only unambiguous, related pairs).
        positional: both sides run the same native op: equal counts pair by position.
        primary: the first tensors pair whatever their shapes (outputs of the same op).
        first_only: outside the positional case only the first reference tensor is paired
            (outputs: after the primary one, frameworks return by-products of their own --
            batch norm's saved statistics -- that a shape match would pair wrongly).
    """
    if not group and len(rs) == len(cs) and (
            positional or all(a.shape == b.shape or squeezed(a.shape) == squeezed(b.shape)
                              for a, b in zip(rs, cs))):
        return list(zip(rs, cs))  # the common case: one tuple comparison per tensor

    def matrix() -> list[list[float]]:
        a = np.array([stat_row(x) for x in rs], dtype=np.float64).reshape(len(rs), 5)
        b = np.array([stat_row(x) for x in cs], dtype=np.float64).reshape(len(cs), 5)
        return distances(a, b)

    got = pair_by_value(
        [squeezed(a.shape) for a in rs], [squeezed(b.shape) for b in cs],
        [a.numel for a in rs], [b.numel for b in cs],
        [a.has_payload for a in rs], [b.has_payload for b in cs], matrix,
        group=group, primary=primary, first_only=first_only)
    return [(rs[i], cs[j]) for i, j in got]


def distances(a: np.ndarray, b: np.ndarray) -> list[list[float]]:
    """:func:`_distance` of every row of ``a`` (``(n, 5)`` :func:`stat_row` rows) with every
    row of ``b``, as nested lists (the same element-wise float operations as one pair at a
    time; a non-finite distance counts as 1)."""
    m = row_distance(a[:, None, :], b[None, :, :])
    return np.where(np.isfinite(m), m, 1.0).tolist()  # type: ignore[no-any-return]


def _counts(xs: list[Any]) -> dict[Any, int]:
    out: dict[Any, int] = {}
    for x in xs:
        out[x] = out.get(x, 0) + 1
    return out


def pair_by_value(shapes_r: list[Any], shapes_c: list[Any], numel_r: list[int],
                  numel_c: list[int], payload_r: list[bool], payload_c: list[bool],
                  matrix: Any, *, group: bool = False, primary: bool = False,
                  first_only: bool = False) -> list[tuple[int, int]]:
    """:func:`pair_tensors` past its positional case, on the tensors' facts: squeezed shapes
    (any values that are equal exactly when the squeezed shapes are), element counts, whether
    a payload is stored, and ``matrix()`` -> the :func:`distances` of the two sides'
    :func:`stat_row` rows (asked for on first need). Returns the pairs as ``(ref index, cand
    index)``, sorted."""
    free = list(range(len(shapes_c)))
    got: list[tuple[int, int]] = []
    left: list[int] = []
    dmat: list[list[float]] = []

    def dist(i: int, j: int) -> float:
        if not dmat:
            dmat.extend(matrix())
        return dmat[i][j]

    count_r = _counts(shapes_r)
    count_c = _counts(shapes_c)
    for i, shape in enumerate(shapes_r[:1] if first_only else shapes_r):
        best: tuple[float, int] | None = None
        if group and not count_r.get(shape, 0) == count_c.get(shape, 0) == 1:
            left.append(i)
            continue
        for j in free:
            if shapes_c[j] != shape:
                continue
            d = dist(i, j)
            if group and d > STATS_VETO:
                continue
            if best is None or d < best[0]:
                best = (d, j)
        if best is None:
            left.append(i)
        else:
            free.remove(best[1])
            got.append((i, best[1]))
    if left:
        sizes_r = _counts(numel_r)
        sizes_c = _counts(numel_c)
    for i in left:  # another layout of the same elements: only element-wise evidence can tell
        n = numel_r[i]
        if not payload_r[i] or (group and not sizes_r.get(n, 0) == sizes_c.get(n, 0) == 1):
            continue
        fits = [j for j in free if payload_c[j] and numel_c[j] == n
                and not (group and dist(i, j) > STATS_VETO)]
        if fits:
            j = min(fits, key=lambda j: dist(i, j))
            free.remove(j)
            got.append((i, j))
    if primary and shapes_r and shapes_c and 0 in free and all(i != 0 for i, _ in got):
        got.append((0, 0))
    got.sort()
    return got
