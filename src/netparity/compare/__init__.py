"""netparity.compare: metrics, tolerances and per-pair verdicts of two traces.

``netparity.compare`` is both this package and the top-level function: importing a submodule
binds the package to the ``compare`` attribute of ``netparity``, so the package itself is made
callable and forwards to its ``compare`` attribute. This package only measures and judges pairs
(:func:`engine.compare`, :func:`engine.recheck`); what users call -- pairs judged, then calls
classified and the first divergences named -- is :func:`netparity.analyzers.divergence.compare`
/ ``recheck``, which ``netparity/__init__.py`` binds as ``netparity.compare.compare`` and
``netparity.compare.recheck`` (this package may not import the analyzers above it).

Example:
    >>> import netparity
    >>> callable(netparity.compare)
    True
"""

import sys
import types
from typing import Any

from netparity.compare.engine import compare, recheck
from netparity.compare.results import CallResult, CompareResult, Divergence, PairResult
from netparity.compare.tolerances import Tolerances

__all__ = [
    "CallResult", "CompareResult", "Divergence", "PairResult", "Tolerances", "compare", "recheck",
]


class _CallablePackage(types.ModuleType):
    def __call__(self, ref: Any, cand: Any, **kwargs: Any) -> CompareResult:
        # the attribute, not the engine function: netparity/__init__.py binds the localising one
        return self.compare(ref, cand, **kwargs)  # type: ignore[no-any-return]


sys.modules[__name__].__class__ = _CallablePackage
