"""netparity.compare: metrics, tolerances, verdicts and localisation of two traces.

``netparity.compare`` is both this package and the top-level function: importing a submodule
binds the package to the ``compare`` attribute of ``netparity``, replacing the function defined
there, so the package itself is made callable and forwards to :func:`engine.compare`.

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
        return compare(ref, cand, **kwargs)  # type: ignore[no-any-return]


sys.modules[__name__].__class__ = _CallablePackage
