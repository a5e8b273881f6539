"""Per-operator precision against a higher-precision reference (``netparity precision``):
docs/precision.md."""

from netparity.precision.emulate import emulate_fp16
from netparity.precision.engine import OpPrecision, PrecisionResult, check_precision
from netparity.precision.standards import ASCEND_FP16, FP16_CLASSES, STANDARD, parse_emulate

__all__ = ["ASCEND_FP16", "FP16_CLASSES", "STANDARD", "OpPrecision", "PrecisionResult",
           "check_precision", "emulate_fp16", "parse_emulate"]
