"""netparity.analyzers: stateless analyses of traces and comparison results.

Each analyzer is a function in its own module that takes traces (and alignments / comparison
results / a workflow's facts) and returns a typed result -- a dataclass, truthy when
healthy/passing, with ``to_json()`` -- registered in :mod:`netparity.analyzers.registry`:

=============  ==========================================  ======================================
name           function                                    result
=============  ==========================================  ======================================
summary        :func:`summary.summarize` (one trace)       :class:`summary.TraceSummary`
divergence     :func:`divergence.compare` (two traces)     :class:`~netparity.compare.results.CompareResult`
recheck        :func:`divergence.recheck` (a saved result) :class:`~netparity.compare.results.CompareResult`
step           :func:`step.diagnose_step` (a step run)     :class:`step.StepResult`
numerics       :func:`numerics.analyze` (one trace)        :class:`numerics.NumericsResult`
updates        :func:`health.weight_updates` (one trace)   ``(rows, not_updating)``
=============  ==========================================  ======================================

:class:`Analysis` is the facade over one trace or a pair of traces (Holistic Trace Analysis's
``TraceAnalysis`` is the model): one method per analysis, each a thin call of the module function.

Example:
    >>> from netparity.analyzers import Analysis               # doctest: +SKIP
    >>> a = Analysis("runs/ref", "runs/cand")                  # doctest: +SKIP
    >>> a.summary().nonfinite_records, bool(a.divergence())    # doctest: +SKIP
    (0, False)
"""

from __future__ import annotations

import os
from typing import Any

from netparity.analyzers.divergence import compare, localise, recheck
from netparity.analyzers.registry import ANALYZERS, AnalyzerEntry, get, run
from netparity.analyzers.summary import TraceSummary, summarize
from netparity.compare.results import CompareResult
from netparity.errors import UsageError
from netparity.trace import Trace, open_trace

__all__ = [
    "ANALYZERS", "Analysis", "AnalyzerEntry", "CompareResult", "TraceSummary", "compare", "get",
    "localise", "recheck", "run", "summarize",
]


class Analysis:
    """The analyses of a reference trace and, optionally, a candidate trace.

    Args:
        ref: reference trace (path or :class:`~netparity.trace.Trace`).
        cand: candidate trace, for the analyses that compare two runs.
        **compare_options: defaults for :meth:`divergence` (``mapping``, ``level``, ``steps``,
            ``rtol``, ``atol``, ``tolerances``, ``profile``, ...).

    Traces given as paths are opened once, here; stateless otherwise (every call analyses
    afresh).
    """

    def __init__(self, ref: str | os.PathLike[str] | Trace,
                 cand: str | os.PathLike[str] | Trace | None = None,
                 **compare_options: Any) -> None:
        self.ref = ref if isinstance(ref, Trace) else open_trace(ref)
        self.cand = cand if cand is None or isinstance(cand, Trace) else open_trace(cand)
        self.compare_options = compare_options

    def _trace(self, which: str) -> Trace:
        if which == "ref":
            return self.ref
        if which == "cand" and self.cand is not None:
            return self.cand
        raise UsageError(f"no {which!r} trace in this Analysis (use 'ref' or 'cand')")

    def summary(self, which: str = "ref", **kwargs: Any) -> TraceSummary:
        """:func:`summary.summarize` of the reference (or ``which="cand"``) trace."""
        return summarize(self._trace(which), **kwargs)

    def divergence(self, **kwargs: Any) -> CompareResult:
        """:func:`divergence.compare` of the two traces (keyword arguments override defaults)."""
        if self.cand is None:
            raise UsageError("divergence needs two traces: Analysis(ref, cand)")
        return compare(self.ref, self.cand, **{**self.compare_options, **kwargs})

    def run(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Any registered analyzer that takes this object's trace(s)."""
        entry = get(name)
        if entry.takes == "trace":
            return entry.load()(self.ref, *args, **kwargs)
        if entry.takes == "traces":
            if self.cand is None:
                raise UsageError(f"analyzer {name!r} needs two traces: Analysis(ref, cand)")
            return entry.load()(self.ref, self.cand, *args, **kwargs)
        raise UsageError(f"analyzer {name!r} takes a {entry.takes}, not traces: call "
                         f"netparity.analyzers.run({name!r}, ...)")
