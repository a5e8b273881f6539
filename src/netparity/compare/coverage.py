"""Whether a comparison had all the evidence it asked for: the same steps, ranks, levels and
directions on both sides, and both captures finished (DESIGN: no verdict on missing evidence).

:func:`coverage` reads each side's index only (:mod:`netparity.trace.coverage`: the distinct
``(step, direction, kind)`` of each rank, answered from an index) and returns the
JSON-ready facts a :class:`~netparity.compare.results.CompareResult` keeps as ``coverage``:

* ``ref`` / ``cand``: ``steps``, ``ranks``, ``levels`` (module/op present), ``directions``
  (of the records in scope) and ``unfinished`` (why the capture has not finished, or None);
* ``incomplete``: one line per gap, e.g. ``candidate has steps 0-4 of 0-39``; empty when the
  evidence is complete. A non-empty list makes the verdict INCOMPLETE (exit 1) unless a pair
  fails (FAIL outranks it; both are said).

The scope is what the comparison was asked for: ``steps`` given (``--steps``) narrows the steps
to those (both sides hold them, or the comparison was refused), ``rank_given`` narrows the
ranks to the one compared; the record kinds are the calls of the level(s) compared plus the
parameters, gradients and losses (timing, data and custom records are not evidence a verdict
rests on). A level that neither side holds is missing evidence too (INCOMPLETE, exit 1:
``neither trace has op-level records (they hold module level); capture with level='op'``);
level ``both`` needs one of its two levels (it compares whichever were captured; one side
lacking a level the other holds is a gap). Traces holding nothing of the kinds in scope are
nothing to compare: a :class:`~netparity.errors.UsageError` (exit 2).

Example:
    >>> _gaps("candidate", {0: {("forward", "module")}}, {}, range(2), set())
    ['candidate has steps 0 of 0-1']
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from netparity.errors import UsageError
from netparity.trace import Trace
from netparity.trace.coverage import contents, ranges, unfinished

#: record kinds every comparison judges besides the calls of its level(s)
_OTHER_KINDS = ("param", "grad", "loss")
SIDES = ("reference", "candidate")


def _by_step(tr: Trace, rank: int, kinds: tuple[str, ...], steps: set[int] | None,
             directions: set[str] | None) -> dict[int, set[tuple[str, str]]]:
    """step -> {(direction, kind)} of the records of ``kinds`` (in ``steps`` and
    ``directions`` when given)."""
    out: dict[int, set[tuple[str, str]]] = {}
    for s, d, k in contents(tr, rank):
        if k in kinds and (steps is None or s in steps) and (directions is None
                                                              or d in directions):
            out.setdefault(s, set()).add((d, k))
    return out


def _gaps(side: str, mine: dict[int, set[tuple[str, str]]],
          other: dict[int, set[tuple[str, str]]], all_steps: Iterable[int],
          narrowed: set[int]) -> list[str]:
    """Lines naming what ``side`` lacks that the other side holds (within the scope)."""
    lines: list[str] = []
    want = sorted(set(all_steps))
    have = sorted(s for s in want if s in mine)
    if not narrowed and have != want:
        lines.append(f"{side} has steps {ranges(have)} of {ranges(want)}")
    lacking: dict[tuple[str, str], list[int]] = {}
    for s in sorted(set(mine) & set(other)):
        for d, k in sorted(other[s] - mine[s]):
            lacking.setdefault((d, k), []).append(s)
    for (d, k), ss in lacking.items():
        lines.append(f"{side} has no {d} {k} records at step{'s' if len(ss) > 1 else ''} "
                     f"{ranges(ss)}")
    return lines


def coverage(ref: Trace, cand: Trace, *, rank: int, rank_given: bool, level: str,
             steps: Iterable[int] | None,
             directions: Iterable[str] | None = None) -> dict[str, Any]:
    """The coverage of a comparison of ``ref`` and ``cand`` (see the module docstring);
    ``directions`` narrows the scope to those (``align --direction``).

    Raises:
        UsageError: neither trace holds a call of a level the comparison asks for.
    """
    levels = ("module", "op") if level == "both" else (level,)
    kinds = (*levels, *_OTHER_KINDS)
    narrowed = set(steps) if steps is not None else set()
    scope = narrowed or None
    dirs = set(directions) if directions is not None else None
    sides = [_by_step(t, rank, kinds, scope, dirs) for t in (ref, cand)]
    if not sides[0] and not sides[1]:
        raise UsageError(f"nothing to compare: neither trace holds {'/'.join(levels)}-level, "
                         "param, grad or loss records"
                         + (f" at step(s) {ranges(narrowed)}" if narrowed else "")
                         + (f" ({'/'.join(sorted(dirs))})" if dirs else "")
                         + " (empty traces?)")
    incomplete: list[str] = []
    # level "both" compares whichever levels were captured (op-only traces included); a
    # level neither side captured is missing evidence, not a pass: INCOMPLETE (exit 1)
    if not any(k in levels for side in sides for got in side.values() for _, k in got):
        lv = " or ".join(levels)
        held = sorted({k for t in (ref, cand)
                       for got in _by_step(t, rank, ("module", "op"), scope, dirs).values()
                       for _, k in got})
        incomplete.append(f"neither trace has {lv}-level records"
                          + (f" at step(s) {ranges(narrowed)}" if narrowed else "")
                          + (f" ({'/'.join(sorted(dirs))})" if dirs else "")
                          + (f" (they hold {'/'.join(held)} level)" if held else "")
                          + f"; capture with level={level!r}")
    all_steps = set(sides[0]) | set(sides[1])
    ranks = (ref.ranks, cand.ranks)
    if not rank_given and ranks[0] != ranks[1]:
        for side, mine, other in zip(SIDES, ranks, ranks[::-1]):
            if set(other) - set(mine):
                incomplete.append(f"{side} has ranks {ranges(mine)} of "
                                  f"{ranges(set(mine) | set(other))} (--rank N compares one)")
    for i, side in enumerate(SIDES):
        incomplete += _gaps(side, sides[i], sides[1 - i], all_steps, narrowed)
    facts: dict[str, Any] = {}
    for name, tr, got in zip(("ref", "cand"), (ref, cand), sides):
        why = unfinished(tr, [rank] if rank_given else tr.ranks)
        if why is not None:
            incomplete.append(f"{'reference' if name == 'ref' else 'candidate'} capture has not "
                              f"finished: {why}")
        facts[name] = {
            "steps": sorted(got), "ranks": list(tr.ranks),
            "levels": sorted({k for v in got.values() for _, k in v if k in ("module", "op")}),
            "directions": sorted({d for v in got.values() for d, _ in v}),
            "unfinished": why,
        }
    return {**facts, "scope": {"level": level, "rank": rank,
                               "steps": sorted(narrowed) if narrowed else None,
                               "directions": sorted(dirs) if dirs else None},
            "incomplete": incomplete}
