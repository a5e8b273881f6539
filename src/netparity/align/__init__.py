"""Alignment: pair the calls of two traces (1:1 and N:M) and everything left over.

Example:
    >>> from netparity.align import align_traces, load_mapping   # doctest: +SKIP
    >>> al = align_traces(open_trace("runs/ref"), open_trace("runs/cand"))   # doctest: +SKIP
"""

from netparity.align.core import align_traces
from netparity.align.model import Alignment, Call, Match, ParamPair, calls_from_records
from netparity.align.vocab import canonical_op
from netparity.mapfile import Mapping, load_mapping, save_mapping

__all__ = [
    "Alignment",
    "Call",
    "Mapping",
    "Match",
    "ParamPair",
    "align_traces",
    "calls_from_records",
    "canonical_op",
    "load_mapping",
    "save_mapping",
]
