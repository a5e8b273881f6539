"""Result types of a comparison; they serialise to versioned JSON and back (for ``recheck``).

Example:
    >>> r = CompareResult()
    >>> bool(r), r.to_json()["netparity_result_version"]
    (True, 1)
"""

from __future__ import annotations

import dataclasses
import math
import operator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from netparity.errors import UsageError

RESULT_VERSION = 1
STATUSES = ("pass", "warn", "fail", "unknown")
#: a comparison's own status when nothing fails but evidence is missing (see ``incomplete``)
INCOMPLETE = "incomplete"
_RANK = {"pass": 0, "unknown": 0, "warn": 1, "fail": 2}
#: a pair table's status codes
_CODES = {"pass": 0, "warn": 1, "fail": 2, "unknown": 3}
#: the rank of a pair table's status code (pass, warn, fail, unknown)
CODE_RANK_F = np.array([0.0, 1.0, 2.0, 0.0])


def worst(statuses: list[str]) -> str:
    """The worst of several statuses (``fail`` > ``warn`` > ``pass``); ``pass`` when empty."""
    best = "pass"
    for s in statuses:
        if _RANK.get(s, 0) > _RANK[best]:
            best = s
    return best


def _clean(v: Any) -> Any:
    """JSON-safe numbers: inf/nan become strings (JSON has no spelling for them)."""
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def _unclean(v: Any) -> Any:
    if isinstance(v, str) and v in ("nan", "inf", "-inf"):
        return float(v)
    if isinstance(v, dict):
        return {k: _unclean(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_unclean(x) for x in v]
    return v


@dataclass
class PairResult:
    """One compared tensor pair (an input or output of matched calls, or a param/grad/loss)."""

    key: str
    kind: str
    direction: str
    step: int
    rank: int
    role: str
    arg: str
    module: str
    op: str
    cand_module: str
    cand_op: str
    ref_dtype: str
    cand_dtype: str
    ref_shape: list[int]
    cand_shape: list[int]
    rtol: float
    atol: float
    tol_source: str
    status: str = "pass"
    reason: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    call: str = ""  # key of the call this tensor belongs to ("" for params/loss/data)
    order: int = 0  # reference sequence number (execution order)
    source: str = ""
    fp64: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        base = self.module or self.op or "<root>"
        if self.kind == "op":
            base = f"{self.module or '<root>'}/{self.op}"
        if self.role in ("input", "output"):
            return f"{base} [{self.role}{(' ' + self.arg) if self.arg else ''}]"
        return base

    def error(self) -> float:
        """Normwise relative error ``rmse / rms(ref)`` (stats basis: the lower bound)."""
        m = self.metrics
        if m.get("basis") == "tensors":
            rms = m.get("ref_rms") or m.get("scale") or 0.0
            return float(m.get("rmse", 0.0)) / rms if rms else float(m.get("rmse", 0.0))
        if m.get("basis") == "stats":
            return float(m.get("max_rel_lb", 0.0))
        return 0.0


@dataclass(slots=True)
class CallResult:
    """One matched module/op call (or N:M group), judged from its tensors.

    Slotted (~200 bytes a call, not ~800 with a ``__dict__``: a 1M-op comparison holds 10^6
    of them); :func:`call_json` gives its fields as a dict, in their order."""

    key: str
    level: str
    module: str
    op: str
    native: str
    cand_module: str
    cand_op: str
    direction: str
    step: int
    rank: int
    source: str
    cand_source: str
    order: int
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    status: str = "pass"
    origin: str = ""  # "introduced" | "propagated" | ""
    note: str = ""
    method: str = ""
    confidence: float = 1.0
    in_error: float = 0.0
    out_error: float = 0.0
    #: the reference's module call index: the call's own (module level), the module call
    #: running it (op level); -1 where unknown (results saved before it was kept)
    module_call: int = -1

    @property
    def name(self) -> str:
        if self.level == "op":
            return f"{self.module or '<root>'}/{self.op}"
        return self.module or "<root>"


@dataclass
class Divergence:
    """Where the runs stop agreeing: the call, its verdict and the evidence."""

    module: str
    op: str
    direction: str
    step: int
    rank: int
    source: str
    verdict: str  # "introduced" | "propagated"
    status: str  # "fail" | "warn"
    metrics: dict[str, Any]
    key: str
    level: str = "module"
    cand_module: str = ""
    cand_op: str = ""
    cand_source: str = ""
    note: str = ""
    in_error: float = 0.0
    out_error: float = 0.0

    def describe(self) -> str:
        where = self.module or "<root>"
        if self.level == "op" or self.op:
            where = f"{where} ({self.op})" if self.op else where
        return f"{where}, {self.direction} step {self.step} rank {self.rank}"


_PAIR_FIELDS = [f.name for f in dataclasses.fields(PairResult)]


def call_json(c: CallResult) -> dict[str, Any]:
    """``dataclasses.asdict(c)`` made cleaned (its fields are flat: its fields' values, its
    two lists copied, its floats JSON-safe) -- ~20x faster over a 100k-op comparison's calls."""
    d = call_fields(c)
    d["inputs"], d["outputs"] = list(c.inputs), list(c.outputs)
    for k in ("confidence", "in_error", "out_error"):
        v = d[k]
        if isinstance(v, float) and not math.isfinite(v):
            d[k] = _clean(v)
    return d


def call_fields(c: CallResult) -> dict[str, Any]:
    """The fields of ``c`` as a dict, in their order (the values themselves, not copied)."""
    return dict(zip(_CALL_FIELDS, _call_values(c)))


def pair_from_dict(d: dict[str, Any]) -> PairResult:
    """A :class:`PairResult` from its saved fields (unknown keys ignored).

    Raises:
        TypeError, KeyError: a field missing or of the wrong kind.
    """
    return PairResult(**{k: d[k] for k in _PAIR_FIELDS if k in d})
_CALL_FIELDS = [f.name for f in dataclasses.fields(CallResult)]
_call_values = operator.attrgetter(*_CALL_FIELDS)
_DIV_FIELDS = [f.name for f in dataclasses.fields(Divergence)]


class _LazyPairs:
    """``CompareResult.pairs``: a plain list, made from the comparison's
    :class:`~netparity.compare.pairtable.PairTable` on first access (then the table is
    dropped: the list is the truth from there on)."""

    def __get__(self, obj: CompareResult | None, owner: type) -> Any:
        if obj is None:
            return ()  # the dataclass default (the __init__ argument): no pairs
        d = obj.__dict__
        table = d.get("_table")
        if table is not None:
            d["_pairs"] = table.pairs()
            d["_table"] = None
        return d["_pairs"]

    def __set__(self, obj: CompareResult, value: Any) -> None:
        obj.__dict__["_pairs"] = value if isinstance(value, list) else list(value)
        obj.__dict__["_table"] = None


@dataclass
class CompareResult:
    """Everything a comparison found. Truthy when nothing fails (warnings allowed).

    ``pairs`` holds the tensors of matched calls; ``params`` the parameter gradients and updated
    parameters; ``loss`` and ``data`` the loss and data records; ``unmatched`` what alignment
    could not pair (never dropped).

    A comparison's engine may hand the pairs of matched calls over as a
    :class:`~netparity.compare.pairtable.PairTable` (:meth:`set_table`): ``pairs`` is then made
    on first access, while ``status``, ``counts``, ``worst_pairs`` and localisation read the
    table without making every pair.
    """

    first_divergence: Divergence | None = None
    first_backward: Divergence | None = None
    first_update: Divergence | None = None
    pairs: list[PairResult] = _LazyPairs()  # type: ignore[assignment]
    calls: list[CallResult] = field(default_factory=list)
    params: list[PairResult] = field(default_factory=list)
    loss: list[PairResult] = field(default_factory=list)
    data: list[PairResult] = field(default_factory=list)
    unmatched: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    min_tolerance: list[dict[str, Any]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    runs: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: what each side held and the gaps (:func:`netparity.compare.coverage.coverage`)
    coverage: dict[str, Any] = field(default_factory=dict)
    #: a comparison of several ranks (:mod:`netparity.analyzers.ranks`): one summary per rank
    #: (status, counts, first divergences, gaps); the rest of the result is the lead rank's
    ranks: list[dict[str, Any]] = field(default_factory=list)
    #: a comparison of one rank a step at a time (:func:`netparity.analyzers.ranks.
    #: compare_steps`): one summary per step; the rest of the result is the lead step's
    steps: list[dict[str, Any]] = field(default_factory=list)

    # ---- the pairs of matched calls as a table (see the class docstring) ---------------------
    def set_table(self, table: Any) -> None:
        """Hand the pairs of matched calls over as a
        :class:`~netparity.compare.pairtable.PairTable` (replaces ``pairs``)."""
        self.__dict__["_pairs"] = []
        self.__dict__["_table"] = table

    @property
    def table(self) -> Any:
        """The :class:`~netparity.compare.pairtable.PairTable` of ``pairs`` while no one has
        asked for the pair objects, else None."""
        return self.__dict__.get("_table")

    def n_pairs(self) -> int:
        """How many pairs there are in all (without making them)."""
        t = self.table
        n = len(t) if t is not None else len(self.pairs)
        return n + len(self.params) + len(self.loss) + len(self.data)

    # ---- verdict ---------------------------------------------------------------------------
    def all_pairs(self) -> list[PairResult]:
        return [*self.pairs, *self.params, *self.loss, *self.data]

    def _others(self) -> list[PairResult]:
        return [*self.params, *self.loss, *self.data]

    @property
    def incomplete(self) -> list[str]:
        """The gaps in the evidence (steps, ranks, levels or directions one side lacks, a
        capture that has not finished), one line each; empty when complete."""
        return list(self.coverage.get("incomplete") or [])

    @property
    def pair_status(self) -> str:
        """The worst status of the pairs (``pass``, ``warn`` or ``fail``)."""
        t = self.table
        if t is not None:
            c = t.counts()
            best = "fail" if c[2] else "warn" if c[1] else "pass"
            return worst([best, *(p.status for p in self._others())])
        return worst([p.status for p in self.all_pairs()])

    @property
    def status(self) -> str:
        """``fail`` when a pair fails; else ``incomplete`` when evidence is missing
        (:attr:`incomplete`); else the pairs' ``warn`` or ``pass``."""
        got = self.pair_status
        return INCOMPLETE if got != "fail" and self.incomplete else got

    def __bool__(self) -> bool:
        return self.status not in ("fail", INCOMPLETE)

    @property
    def passed(self) -> bool:
        return bool(self)

    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in STATUSES}
        t = self.table
        if t is not None:
            for s, k in zip(STATUSES, t.counts().tolist()):
                out[s] += k
        for p in (self._others() if t is not None else self.all_pairs()):
            out[p.status] = out.get(p.status, 0) + 1
        return out

    def pairs_with_status(self, status: str, level: str | None = None) -> list[PairResult]:
        """Every pair (as :meth:`all_pairs` orders them) whose status is ``status``; of a
        table, only those are made. ``level`` (``"module"`` or ``"op"``) keeps, of the pairs
        of matched calls, only those of calls at that level (parameter, loss and data pairs
        stay): of a table, the others are not made (a 1M-op comparison's failing op pairs
        are millions of objects that a caller asking for module pairs would drop)."""
        t = self.table
        if t is None:
            return [p for p in self.all_pairs() if p.status == status and (
                level is None or p.call == "" or p.call.startswith(level + "|"))]
        t.refresh()
        code = _CODES.get(status, -1)
        hit = t.code == code
        if level is not None and len(t):
            at_level = np.array([c.level == level for c in self.calls] or [False], dtype=bool)
            hit &= at_level[t.call]
        return ([t.get(i) for i in t.perm[hit[t.perm]].tolist()]
                + [p for p in self._others() if p.status == status])

    def clear(self, direction: str, why: str) -> int:
        """Mark every failing or warning pair of ``direction`` (backward: parameter gradients
        too) and every such call as passing, with ``why`` as the pairs' reason: replay showed
        their difference is no one's own (agreeing inputs' rounding noise amplified), so the
        comparison a user reads says what the verdict says. Returns how many pairs changed."""
        n = 0
        for status in ("fail", "warn"):
            for p in self.pairs_with_status(status):
                if p.direction == direction or (direction == "backward" and p.kind == "grad"):
                    p.status, p.reason = "pass", why
                    n += 1
        if self.table is not None:
            self.table.refresh()
        for c in self.calls:
            if c.direction == direction and c.status in ("fail", "warn"):
                c.status = "pass"
        for attr in ("first_divergence", "first_backward"):
            d = getattr(self, attr)
            if d is not None and d.direction == direction:
                setattr(self, attr, None)
        if n:
            self.notes.append(f"{n} {direction} pair(s) differ only by amplified rounding "
                              f"noise: {why}")
        return n

    def divergent_params(self, kind: str) -> list[PairResult]:
        """Params of ``kind`` ("grad" or "param") that do not pass, in execution order."""
        return [p for p in self.params if p.kind == kind and p.status in ("fail", "warn")]

    def worst_pairs(self, n: int = 10) -> list[PairResult]:
        """The ``n`` pairs with the largest normwise relative error, failures first."""
        t = self.table
        if t is not None and n < len(t) and not np.isnan(err := t.errors()).any():
            # the table's n worst (same order as the sort below: stable, so ties keep the
            # pairs' order), then the other pairs; only those candidates are made
            perm = t.perm
            rank = CODE_RANK_F[t.code[perm]]
            o = np.lexsort((-err[perm], -rank))[:n]
            ps = [t.get(i) for i in perm[o].tolist()] + self._others()
            ps = [p for p in ps if p.metrics]
        else:
            ps = [p for p in self.all_pairs() if p.metrics]
        ps.sort(key=lambda p: (-_RANK.get(p.status, 0), -p.error()))
        return ps[:n]

    # ---- serialisation ---------------------------------------------------------------------
    def to_json(self, *, histograms: bool = True, pairs: bool = True,
                calls: bool = True) -> dict[str, Any]:
        """Versioned JSON-ready dict (``netparity_result_version`` first).

        ``histograms=False`` drops the per-pair error histograms (smaller file, but ``recheck``
        then estimates less). ``pairs=False`` leaves the pairs of matched calls out (a
        result file keeps them in a Parquet file beside it:
        :mod:`netparity.report.pairs_parquet`). ``calls=False`` leaves ``"calls"`` an empty
        list (a writer streams them: :func:`call_json` of each).
        """

        def pair(p: PairResult) -> dict[str, Any]:
            d = dataclasses.asdict(p)
            if not histograms:
                d["metrics"] = {k: v for k, v in d["metrics"].items() if k != "hist"}
            return d

        def div(d: Divergence | None) -> dict[str, Any] | None:
            return dataclasses.asdict(d) if d is not None else None

        out = {
            "netparity_result_version": RESULT_VERSION,
            "status": self.status,
            "passed": bool(self),
            "incomplete": self.incomplete,
            "coverage": self.coverage,
            "counts": self.counts(),
            "first_divergence": div(self.first_divergence),
            "first_backward": div(self.first_backward),
            "first_update": div(self.first_update),
            "divergent_grads": [p.key for p in self.divergent_params("grad")],
            "divergent_params": [p.key for p in self.divergent_params("param")],
            "loss": [pair(p) for p in self.loss],
            "data": [pair(p) for p in self.data],
            "min_tolerance": self.min_tolerance,
            "settings": self.settings,
            "runs": self.runs,
            "notes": self.notes,
            "unmatched": self.unmatched,
            "calls": [],
            "pairs": [pair(p) for p in self.pairs] if pairs else [],
            "params": [pair(p) for p in self.params],
        }
        if self.ranks:
            out["ranks"] = self.ranks
        if self.steps:
            out["steps"] = self.steps
        got: dict[str, Any] = _clean(out)
        if calls:
            got["calls"] = [call_json(c) for c in self.calls]
        return got

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> CompareResult:
        """Rebuild a result saved with :meth:`to_json` (for ``recheck``)."""
        if not isinstance(obj, dict) or "netparity_result_version" not in obj:
            raise UsageError("not a netparity compare result (no netparity_result_version)")
        v = obj["netparity_result_version"]
        if not isinstance(v, int) or v > RESULT_VERSION:
            raise UsageError(
                f"result version {v} is newer than this netparity supports ({RESULT_VERSION})"
            )
        obj = _unclean(obj)
        try:

            pair = pair_from_dict

            def div(d: dict[str, Any] | None) -> Divergence | None:
                return Divergence(**{k: d[k] for k in _DIV_FIELDS if k in d}) if d else None

            return cls(
                first_divergence=div(obj.get("first_divergence")),
                first_backward=div(obj.get("first_backward")),
                first_update=div(obj.get("first_update")),
                pairs=[pair(p) for p in obj.get("pairs", [])],
                calls=[
                    CallResult(**{k: c[k] for k in _CALL_FIELDS if k in c})
                    for c in obj.get("calls", [])
                ],
                params=[pair(p) for p in obj.get("params", [])],
                loss=[pair(p) for p in obj.get("loss", [])],
                data=[pair(p) for p in obj.get("data", [])],
                unmatched=obj.get("unmatched", {}),
                min_tolerance=obj.get("min_tolerance", []),
                settings=obj.get("settings", {}),
                runs=obj.get("runs", {}),
                notes=obj.get("notes", []),
                coverage=obj.get("coverage") or {},
                ranks=obj.get("ranks") or [],
                steps=obj.get("steps") or [],
            )
        except (TypeError, KeyError) as e:
            raise UsageError(f"corrupt compare result ({e})") from None
