"""CSV report: one row per compared tensor pair (calls' tensors, params, loss, data).

Example:
    >>> import tempfile, os
    >>> from netparity.compare.results import CompareResult
    >>> p = os.path.join(tempfile.mkdtemp(), "r.csv")
    >>> write_csv(CompareResult(), p)
    >>> open(p).readline().split(",")[:3]
    ['status', 'kind', 'direction']
"""

from __future__ import annotations

import csv
import os

from netparity.compare.results import CompareResult
from netparity.errors import UsageError

COLUMNS = (
    "status", "kind", "direction", "step", "rank", "module", "op", "role", "arg", "cand_module",
    "cand_op", "ref_dtype", "cand_dtype", "ref_shape", "cand_shape", "basis", "max_abs",
    "mean_abs", "max_rel", "mean_rel", "rmse", "cosine", "within", "q50", "q90", "q99",
    "nan_mismatch", "inf_mismatch", "min_atol", "min_rtol", "rtol", "atol", "tol_source",
    "source", "reason", "key",
)


def write_csv(result: CompareResult, path: str | os.PathLike[str]) -> None:
    """Write one row per pair in execution order; metric columns empty when not applicable."""
    try:
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(COLUMNS)
            for p in result.all_pairs():
                m = p.metrics
                row = []
                for c in COLUMNS:
                    if c in ("ref_shape", "cand_shape"):
                        row.append("x".join(map(str, getattr(p, c))))
                    elif hasattr(p, c):
                        row.append(getattr(p, c))
                    else:
                        v = m.get(c)
                        if v is None and c in ("max_abs", "max_rel"):
                            v = m.get(c + "_lb")
                        row.append("" if v is None else v)
                w.writerow(row)
    except OSError as e:
        raise UsageError(f"{path}: cannot write CSV report ({e.strerror})") from None
