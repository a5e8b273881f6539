"""The bisection itself, framework-free: a tree of regions and a function that runs the step with
a set of regions switched back to the reference configuration and returns the loss.

At each level of the module tree the regions are a node's children in execution order; a run
switches a contiguous half of the remaining range back and keeps the half that removes most of
the loss difference (the other half is inferred, not run); then it descends into the chosen
child. The deepest region chosen is verified by a run of its own (unless the search already ran
it alone): it *fixes* the difference when switching it back leaves the loss within the
reference's noise or removes at least :data:`FIX` of the difference; if it does not, its
parent is tried, and so on up (the difference is then in the parent's own operations or spread
over several children). Finally one run switches every region *except* the culprit back: it
*reproduces* the difference when that recreates at least :data:`REPRODUCE` of it.

Runs: one per halving, ceil(log2 k) at a level of k regions, plus at most one verification and
one reproduction: about log2(modules) + 2 for one culprit.

Example:
    >>> tree = {"": ["a", "b"], "a": ["a.x", "a.y"], "b": []}
    >>> loss = lambda switched: 1.0 if "a.y" in switched or "a" in switched else 2.0
    >>> s = bisect_tree(tree.get, loss, ref_loss=1.0, cand_loss=2.0, tol=1e-6)
    >>> s.region, s.fix_share, s.reproduce_share, len(s.runs)
    ('a.y', 1.0, 1.0, 4)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

#: a region fixes the difference when switching it back removes this share of it (or leaves the
#: loss within the reference's noise)
FIX = 0.9
#: a region reproduces the difference when switching only it to the candidate's configuration
#: recreates this share of it
REPRODUCE = 0.5
#: a half is kept when switching it back removes at least this share of the difference
MAJORITY = 0.5


@dataclass
class Run:
    """One run of the step and what it did to the loss."""

    index: int
    purpose: str  # "halve", "verify", "reproduce"
    switched: list[str]  # regions in the reference's configuration in this run
    loss: float
    share: float  # share of the loss difference removed ("halve"/"verify") or recreated
    decision: str
    kept: list[str] = field(default_factory=list)  # "reproduce": the regions left candidate

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Search:
    """What :func:`bisect_tree` found."""

    region: str | None  # the smallest region that fixes the difference; None: none smaller
    chain: list[str]  # the regions chosen, level by level (outermost first)
    fix_share: float | None  # share of the difference switching ``region`` back removes
    reproduce_share: float | None  # share recreated with only ``region`` in the candidate's
    runs: list[Run]
    complete: bool = True  # False: the run budget ran out first


class _Budget(Exception):
    pass


class _Runs:
    """The runs of one search: each switch set measured once (cached), judged and logged."""

    def __init__(self, measure: Callable[[tuple[str, ...]], float], ref_loss: float,
                 cand_loss: float, tol: float, max_runs: int,
                 on_run: Callable[[Run], None] | None) -> None:
        self.measure, self.ref_loss, self.tol, self.max_runs = measure, ref_loss, tol, max_runs
        self.diff, self.on_run = cand_loss - ref_loss, on_run
        self.runs: list[Run] = []
        self.cache: dict[frozenset[str], float] = {}

    def removed(self, loss: float) -> float:
        # what is left of the difference, whichever side of the reference the loss lands on
        return 1.0 - abs(loss - self.ref_loss) / abs(self.diff) if self.diff else 0.0

    def fixes(self, loss: float) -> bool:
        return abs(loss - self.ref_loss) <= max(self.tol, (1 - FIX) * abs(self.diff))

    def run(self, switched: Sequence[str], purpose: str, kept: Sequence[str] = ()) -> float:
        key = frozenset(switched)
        if key in self.cache:
            return self.cache[key]
        if len(self.runs) >= self.max_runs:
            raise _Budget
        loss = float(self.measure(tuple(switched)))
        self.cache[key] = loss
        share = self.removed(loss) if purpose != "reproduce" else \
            (loss - self.ref_loss) / self.diff
        if purpose == "halve":
            what = "kept (removes most)" if share >= MAJORITY else "other half kept"
        elif purpose == "verify":
            what = "fixes" if self.fixes(loss) else "does not fix alone"
        else:
            what = "reproduces" if share >= REPRODUCE else "does not reproduce alone"
        self.runs.append(Run(len(self.runs) + 1, purpose, list(switched), loss, share, what,
                             list(kept)))
        if self.on_run is not None:
            self.on_run(self.runs[-1])
        return loss


def bisect_tree(children: Callable[[str], Sequence[str] | None],
                measure: Callable[[tuple[str, ...]], float], *, ref_loss: float,
                cand_loss: float, tol: float, max_runs: int = 64,
                on_run: Callable[[Run], None] | None = None) -> Search:
    """Find the smallest region whose switch back to the reference removes the loss difference.

    Args:
        children: a region's sub-regions in execution order (``""``: the whole model); empty or
            ``None`` for a leaf.
        measure: the loss of a run with the given regions switched back to the reference.
        ref_loss, cand_loss: the losses of the reference and of the unchanged candidate.
        tol: the reference's own noise on the loss (a loss this close to ``ref_loss`` agrees).
        max_runs: stop (``complete=False``) rather than run more than this.
        on_run: called after each run (progress display).
    """
    r = _Runs(measure, ref_loss, cand_loss, tol, max_runs, on_run)
    run, runs = r.run, r.runs
    diff, removed, fixes = r.diff, r.removed, r.fixes

    chain: list[str] = []
    levels: list[list[str]] = []
    try:
        node = ""
        while True:
            units = list(children(node) or [])
            if not units:
                break
            lo, hi = 0, len(units)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if removed(run(units[lo:mid], "halve")) >= MAJORITY:
                    hi = mid
                else:
                    lo = mid
            node = units[lo]
            chain.append(node)
            levels.append(units)
        region: str | None = None
        fix_share: float | None = None
        depth = len(chain)
        for depth in range(len(chain), 0, -1):
            loss = run([chain[depth - 1]], "verify")
            if fixes(loss):
                region, fix_share = chain[depth - 1], removed(loss)
                break
        reproduce_share: float | None = None
        if region is not None:
            others = [u for units, c in zip(levels[:depth], chain[:depth], strict=True)
                      for u in units if u != c]
            if others:
                reproduce_share = (run(others, "reproduce", [region]) - ref_loss) / diff
            else:  # the region is the whole model's only part: switching it is the candidate
                reproduce_share = 1.0
    except _Budget:
        return Search(None, chain, None, None, runs, complete=False)
    return Search(region, chain, fix_share, reproduce_share, runs)


def bisect_range(units: Sequence[str], measure: Callable[[tuple[str, ...]], float], *,
                 ref_loss: float, cand_loss: float, tol: float, max_runs: int = 64,
                 on_run: Callable[[Run], None] | None = None) -> Search:
    """The smallest contiguous run of ``units`` (operator calls, in order) whose switch fixes
    the difference, by descent: the whole range is verified, then a half is kept only when it
    fixes the difference alone (the first half is tried first, the second when the first does
    not), so the range found always fixes it; when neither half does alone, the range is the
    answer (the units act together). One reproduction run then switches all the others.
    ``region`` names the range (``"a .. b"``, or the unit when one); ``chain`` lists the
    ranges kept, outermost first.

    Example:
        >>> loss = lambda switched: 1.0 if any("c" in s for s in switched) else 2.0
        >>> s = bisect_range(list("abcd"), loss, ref_loss=1.0, cand_loss=2.0, tol=1e-6)
        >>> s.region, len(s.runs)
        ('c', 5)
    """
    r = _Runs(measure, ref_loss, cand_loss, tol, max_runs, on_run)
    items = list(units)

    def name(lo: int, hi: int) -> tuple[str, ...]:
        return tuple(items[lo:hi])

    chain: list[str] = []
    try:
        lo, hi = 0, len(items)
        if not items or not r.fixes(r.run(name(lo, hi), "verify")):
            return Search(None, [], None, None, r.runs)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            for a, b in ((lo, mid), (mid, hi)):
                if r.fixes(r.run(name(a, b), "verify")):
                    lo, hi = a, b
                    chain.append(_label(items[a:b]))
                    break
            else:
                break
        found = name(lo, hi)
        fix_share = r.removed(r.cache[frozenset(found)])
        others = [u for u in items if u not in found]
        reproduce = (r.run(others, "reproduce", [_label(list(found))]) - ref_loss) / r.diff \
            if others else 1.0
    except _Budget:
        return Search(None, chain, None, None, r.runs, complete=False)
    return Search(_label(list(found)), chain, fix_share, reproduce, r.runs)


def _label(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{items[0]} .. {items[-1]}"
