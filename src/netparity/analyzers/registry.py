"""The one table of analyzers: name -> where it lives, what it takes, what it answers.

An analyzer is a stateless function in a module of this package that takes traces (paths or
:class:`~netparity.trace.Trace`), comparison results or a workflow's facts, and returns a typed
result: a dataclass that is truthy when healthy/passing and has ``to_json()``. Adding one is a new
module here plus one line below (and, for output, one section in :mod:`netparity.report.sections`).
Entries are resolved lazily, so importing the registry imports no analyzer.

Example:
    >>> sorted(ANALYZERS)
    ['divergence', 'numerics', 'perf', 'recheck', 'step', 'summary', 'updates']
    >>> get("summary").takes
    'trace'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from netparity.errors import UsageError


@dataclass(frozen=True)
class AnalyzerEntry:
    """One registered analyzer."""

    name: str
    target: str  # "module:function"
    takes: str  # "trace" | "traces" | "result" | "step run"
    returns: str  # the result type's name
    about: str

    def load(self) -> Callable[..., Any]:
        """The analyzer function (imports its module on first use)."""
        mod, fn = self.target.split(":")
        return getattr(importlib.import_module(mod), fn)  # type: ignore[no-any-return]


ANALYZERS: dict[str, AnalyzerEntry] = {e.name: e for e in (
    AnalyzerEntry("summary", "netparity.analyzers.summary:summarize", "trace", "TraceSummary",
                  "run facts, record counts, module tree of one step, first NaN/Inf records"),
    AnalyzerEntry("divergence", "netparity.analyzers.divergence:compare", "traces",
                  "CompareResult", "compare two traces; first divergence per direction, "
                  "introduced/propagated calls, minimum passing tolerances"),
    AnalyzerEntry("recheck", "netparity.analyzers.divergence:recheck", "result", "CompareResult",
                  "re-judge a saved comparison at new tolerances (no tensors read), re-localise"),
    AnalyzerEntry("numerics", "netparity.analyzers.numerics:analyze", "trace",
                  "NumericsResult", "NaN/Inf origin (forward and backward), float16/bfloat16 "
                  "range risk, weights not updating, loss explosion window"),
    AnalyzerEntry("perf", "netparity.analyzers.perf:analyze", "trace", "PerfResult", "step breakdown, first step, data starvation, hot modules (timing records)"),  # noqa: E501
    AnalyzerEntry("updates", "netparity.analyzers.health:weight_updates", "trace",
                  "tuple[list[ParamUpdate], list[ParamUpdate]]",
                  "per-parameter update ratio ||dw||/||w||, parameters that never change"),
    AnalyzerEntry("step", "netparity.analyzers.step:diagnose_step", "step run", "StepResult",
                  "the first diverging phase of one training step: setup, data, forward, loss, "
                  "backward, update, later steps, eval"),
)}


def get(name: str) -> AnalyzerEntry:
    """The entry of analyzer ``name`` (one-line :class:`UsageError` when unknown)."""
    try:
        return ANALYZERS[name]
    except KeyError:
        raise UsageError(f"unknown analyzer {name!r} (known: {', '.join(sorted(ANALYZERS))})") \
            from None


def run(name: str, *args: Any, **kwargs: Any) -> Any:
    """Run analyzer ``name`` on its inputs."""
    return get(name).load()(*args, **kwargs)
