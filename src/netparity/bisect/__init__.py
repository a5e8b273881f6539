"""``netparity bisect``: find the smallest region of the candidate's model whose switch back to
the reference's configuration removes the loss difference (docs/bisect.md).

Example:
    >>> from netparity.bisect import run_bisect                     # doctest: +SKIP
    >>> run_bisect("ref_spec.py", "cand_spec.py").region            # doctest: +SKIP
    'blocks.4.norm2'
"""

from netparity.bisect.runner import RESULT_VERSION, BisectResult, module_pairs, run_bisect
from netparity.bisect.search import FIX, MAJORITY, REPRODUCE, Run, Search, bisect_tree

__all__ = ["FIX", "MAJORITY", "REPRODUCE", "RESULT_VERSION", "BisectResult", "Run", "Search",
           "bisect_tree", "module_pairs", "run_bisect"]
