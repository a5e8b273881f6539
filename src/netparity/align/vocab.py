"""Re-export of :mod:`netparity.trace.vocab` (the canonical op vocabulary moved down to
``trace`` so that ``frameworks``, below ``align``, can use it). Kept for the imports in
``align``, ``ckpt.mapping``, tests and benchmarks that still name this module."""

from netparity.trace.vocab import (
    ALIASES,
    VIEW_OPS,
    canonical_op,
    is_view_op,
    normalise,
    primary_input,
)

__all__ = ["ALIASES", "VIEW_OPS", "canonical_op", "is_view_op", "normalise", "primary_input"]
