"""Per-dtype precision standards and the float16-only operator classes.

Errors are measured normwise, ``||y - r||_2 / ||r||_2``, in units of the dtype's epsilon (one
ULP at 1.0: 2**-23 for float32, 2**-10 for float16, 2**-7 for bfloat16). An exact rounding of
the reference to the dtype is about 0.3-0.6 of that unit.

The standards are msprobe's ``run_ut`` ULP-error thresholds (MindStudio probe, "API accuracy
checker", ULP error comparison: 1 ULP for float16 and bfloat16, 32 ULP for float32), applied
to the normwise error; docs/precision.md says how they were calibrated.
"""

from __future__ import annotations

from netparity.errors import UsageError

#: ULP of each dtype (its epsilon)
EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
#: default tolerance per dtype, in ULP of that dtype (normwise)
STANDARD = {"float64": 32.0, "float32": 32.0, "float16": 1.0, "bfloat16": 1.0}
#: an op over its standard is only blamed when it also loses this many times what the same
#: operator computed in the same dtype on the reference CPU loses (msprobe's benchmark
#: comparison: a ratio above 2 to the benchmark device is an error)
KERNEL_RATIO = 2.0

#: float16-only operator classes (canonical op names, :mod:`netparity.trace.vocab`), and the
#: native names that are not in the vocabulary. The default set is the migration guide's
#: list of operators Ascend only has in float16 (reference 001: pooling, recurrent cells,
#: convolution, matrix multiplication, sort / top-k).
FP16_CLASSES: dict[str, tuple[str, ...]] = {
    "conv": ("conv", "conv_backward", "conv_transpose"),
    "pool": ("max_pool", "max_pool_backward", "avg_pool", "avg_pool_backward"),
    "lstm": ("lstm", "gru", "rnn", "dynamic_rnn", "lstm_cell", "gru_cell"),
    "matmul": ("matmul", "linear"),
    "sort": ("sort", "topk"),
}
ASCEND_FP16 = ("conv", "pool", "lstm", "matmul", "sort")
#: ``--emulate``: an op run in float16 on its captured inputs is a risk past this many ULP of
#: float16 (Inf: it overflows). Rounding its inputs alone costs about 1 ULP (a float16
#: convolution's backward on the test ResNet step: 1.14); past 4 it underflows or cancels.
EMULATE_RISK = 4.0


def eps(dtype: str) -> float:
    """The ULP at 1.0 of a floating dtype name."""
    return EPS[dtype]


def is_float(dtype: str) -> bool:
    return dtype in EPS


def parse_emulate(text: str | None) -> frozenset[str]:
    """``fp16-ops=conv,pool`` (or ``fp16-ops``: the Ascend list) -> the canonical ops to run
    in float16. Raises :class:`UsageError` for anything else."""
    if not text:
        return frozenset()
    key, _, value = text.partition("=")
    if key.strip() != "fp16-ops":
        raise UsageError(f"--emulate {text!r}: expected fp16-ops=CLASS,... (classes: "
                         f"{', '.join(FP16_CLASSES)})")
    names = [v.strip() for v in value.split(",") if v.strip()] or list(ASCEND_FP16)
    unknown = [n for n in names if n not in FP16_CLASSES]
    if unknown:
        raise UsageError(f"--emulate: unknown operator class {unknown[0]!r} (classes: "
                         f"{', '.join(FP16_CLASSES)})")
    return frozenset(op for n in names for op in FP16_CLASSES[n])
