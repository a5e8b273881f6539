"""Non-finite values: the classic causes, and the live stop of ``stop_on_nonfinite``.

Framework-independent (statistics dictionaries and NumPy arrays only), shared by the live stop
in :mod:`netparity.frameworks` and by the trace analyzer :mod:`netparity.analyzers.numerics`,
so that a run stopped live and a trace analysed afterwards name the same cause in the same
words.

* :func:`classify` -- the classic cause an op's input/output statistics show: log/sqrt/div of
  zero or negative input, exp/softmax overflow, float16 overflow of a finite float32 value.
* :class:`NonFiniteStop` -- raised at the origin when a capture runs with
  ``stop_on_nonfinite=True``; its message is one line.
* :func:`save_origin` / :func:`load_origin` -- the origin op's inputs (``.npz``) and its
  description (``.json``) under ``<trace>/nonfinite/``, so the op can be replayed.

Example:
    >>> x = {"min": 0.0, "max": 2.0, "zeros": 3, "numel": 8, "dtype": "float32",
    ...      "posinf": 0, "neginf": 0, "nan": 0, "fp16_overflow": 0}
    >>> y = dict(x, min=None, neginf=3)
    >>> classify("log", [x], [y], "float32")
    'log of zero or negative input (min 0, 3 zeros of 8)'
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from netparity.errors import NetparityError, UsageError
from netparity.outputs import write_text_atomic
from netparity.untrusted import load_json

#: largest finite value, smallest normal and smallest subnormal of the formats a run may use
FORMATS: dict[str, tuple[float, float, float]] = {
    "float16": (65504.0, 2.0 ** -14, 2.0 ** -24),
    "bfloat16": (3.3895313892515355e38, 2.0 ** -126, 2.0 ** -133),
    "float32": (3.4028234663852886e38, 2.0 ** -126, 2.0 ** -149),
    "float64": (1.7976931348623157e308, 2.0 ** -1022, 2.0 ** -1074),
}
HALF = ("float16", "bfloat16")
#: canonical ops whose result is infinite or NaN at zero or for negative inputs -> family
SINGULAR = {"log": "log", "log2": "log", "log10": "log", "log1p": "log", "atanh": "log",
            "sqrt": "sqrt", "rsqrt": "sqrt", "acos": "sqrt", "asin": "sqrt",
            "div": "div", "reciprocal": "div", "true_divide": "div", "floor_divide": "div",
            "remainder": "div", "fmod": "div", "pow": "pow", "tensor_scalar": "pow"}
#: canonical ops that overflow when their input exceeds log(dtype max)
EXP_OPS = frozenset({"exp", "exp2", "expm1", "softmax", "log_softmax", "sinh", "cosh",
                     "logsumexp"})

Stats = Mapping[str, Any]


def classify(op: str, inputs: Sequence[Stats], outputs: Sequence[Stats], out_dtype: str) -> str:
    """The classic cause of a non-finite output that the statistics show, or ``""``.

    Args:
        op: canonical op name (``log``, ``div``, ``exp``, ``cast`` ...).
        inputs, outputs: statistics per tensor (``min``, ``max``, ``zeros``, ``numel``,
            ``dtype``, ``posinf``, ``neginf``, ``fp16_overflow``), inputs in argument order.
        out_dtype: the output's dtype name.

    Example:
        >>> big = {"min": -1.0, "max": 1e5, "zeros": 0, "numel": 4, "dtype": "float32",
        ...        "fp16_overflow": 1, "posinf": 0, "neginf": 0}
        >>> classify("cast", [big], [dict(big, dtype="float16", posinf=1)], "float16")
        'float16 overflow of a finite float32 value (1 values beyond 65504)'
    """
    fam = SINGULAR.get(op, "")
    if not inputs:
        return ""
    x = inputs[0]
    if fam in ("log", "sqrt") and x.get("min") is not None and x["min"] <= 0:
        what = "zero or negative" if x["min"] == 0 or x.get("zeros") else "negative"
        return (f"{op} of {what} input (min {x['min']:.3g}, {x.get('zeros', 0)} zeros of "
                f"{x.get('numel', '?')})")
    if fam == "div":
        den = inputs[1] if len(inputs) > 1 and op != "reciprocal" else x
        if den.get("zeros"):
            return (f"division by zero (the divisor holds {den['zeros']} zeros of "
                    f"{den.get('numel', '?')})")
    if fam == "pow" and x.get("min") is not None and x["min"] <= 0:
        return f"power of zero or negative base (min {x['min']:.3g})"
    big = FORMATS.get(out_dtype, FORMATS["float32"])[0]
    inf_out = any(o.get("posinf") or o.get("neginf") for o in outputs)
    if op in EXP_OPS and inf_out:
        mx = max((i["max"] for i in inputs if i.get("max") is not None), default=None)
        if mx is not None and mx > math.log(big):
            return f"{op} overflow: input max {mx:.4g} > log({out_dtype} max) = {math.log(big):.4g}"
    if inf_out and out_dtype == "float16":
        wide = [i for i in inputs if i.get("dtype") not in HALF and i.get("fp16_overflow")]
        if wide:
            return (f"float16 overflow of a finite {wide[0]['dtype']} value "
                    f"({wide[0]['fp16_overflow']} values beyond 65504)")
        return "float16 overflow: the result exceeds 65504"
    if inf_out and out_dtype == "bfloat16":
        return "bfloat16 overflow"
    return ""


class NonFiniteStop(NetparityError):
    """A capture with ``stop_on_nonfinite=True`` met the first NaN/Inf; ``origin`` holds what
    was saved (op, module, direction, step, source, cause, the ``.npz`` of its inputs)."""

    def __init__(self, message: str, origin: dict[str, Any]):
        super().__init__(message)
        self.origin = origin


def stop_message(o: Mapping[str, Any]) -> str:
    """The one line a live stop prints.

    Example:
        >>> stop_message({"verdict": "introduced", "op": "log", "module": "enc.norm",
        ...               "direction": "forward", "step": 3, "rank": 0, "source": "m.py:9",
        ...               "cause": "log of zero", "saved": "t/nonfinite/rank0.npz"})
        'NaN/Inf introduced by log in enc.norm (forward, step 3, rank 0) at m.py:9: log of zero; inputs saved to t/nonfinite/rank0.npz'
    """
    where = o.get("module") or "(root)"
    verb = "introduced by" if o.get("verdict") == "introduced" else "already in the inputs of"
    msg = (f"NaN/Inf {verb} {o.get('op')} in {where} ({o.get('direction')}, step "
           f"{o.get('step')}, rank {o.get('rank', 0)})")
    if o.get("source"):
        msg += f" at {o['source']}"
    if o.get("cause"):
        msg += f": {o['cause']}"
    if o.get("saved"):
        msg += f"; inputs saved to {o['saved']}"
    return msg


def save_origin(trace_dir: str | os.PathLike[str], rank: int, origin: dict[str, Any],
                arrays: Mapping[str, np.ndarray]) -> Path:
    """Write the origin op's inputs (``nonfinite/rank{N}.npz``, keys = argument paths) and its
    description (``rank{N}.json``) into the trace directory, atomically. Returns the ``.npz``.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> p = save_origin(d, 0, {"op": "log"}, {"0": np.zeros(2, np.float32)})
        >>> load_origin(d)[0]["op"], load_origin(d)[1]["0"].tolist()
        ('log', [0.0, 0.0])
    """
    out = Path(trace_dir) / "nonfinite"
    out.mkdir(parents=True, exist_ok=True)
    npz = out / f"rank{rank}.npz"
    fd, tmp = tempfile.mkstemp(prefix=".rank", suffix=".npz.tmp", dir=out)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **{k: np.asarray(v) for k, v in arrays.items()})
        os.replace(tmp, npz)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    origin = dict(origin, saved=str(npz), arrays=sorted(arrays))
    write_text_atomic(out / f"rank{rank}.json", json.dumps(origin, indent=1, default=str),
                      what="non-finite origin")
    return npz


def load_origin(trace_dir: str | os.PathLike[str], rank: int = 0
                ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """What :func:`save_origin` wrote: the description and the input arrays by argument path."""
    out = Path(trace_dir) / "nonfinite"
    try:
        info = load_json((out / f"rank{rank}.json").read_text(), what=f"rank{rank}.json")
        with np.load(out / f"rank{rank}.npz", allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise UsageError(f"{trace_dir}: no saved non-finite origin for rank {rank} ({e})") \
            from None
    return info, arrays
