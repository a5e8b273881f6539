"""Comparing two checkpoints parameter by parameter (across frameworks).

This is the check for "the first loss matches but later ones do not": save the weights of both
runs after one update and diff them; the parameters whose update differs are listed. Names are
matched by :func:`~netparity.ckpt.mapping.map_names`; values are compared in float64 (bf16/fp8
decoded), integers and booleans exactly.

Example:
    >>> import numpy as np
    >>> a = {"w": np.array([1.0, 2.0], np.float32), "b": np.zeros(2, np.float32)}
    >>> b = {"w": np.array([1.0, 2.5], np.float32), "b": np.zeros(2, np.float32)}
    >>> r = diff(a, b)
    >>> bool(r), r.differing(), r.params[0].max_abs
    (False, ['w'], 0.5)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from netparity.ckpt.io import CheckpointDict
from netparity.ckpt.mapping import is_model, map_names, model_info, state_of
from netparity.dtypes import decode

DEFAULT_RTOL = 1e-5
DEFAULT_ATOL = 1e-8


@dataclass
class ParamDiff:
    """Agreement of one matched parameter."""

    ref: str
    cand: str
    how: str
    ref_shape: tuple[int, ...]
    cand_shape: tuple[int, ...]
    ref_dtype: str
    cand_dtype: str
    shape_ok: bool
    max_abs: float | None = None  # None when shapes differ
    max_rel: float | None = None
    mismatched: int = 0  # elements outside tolerance
    ok: bool = False


@dataclass
class Counts:
    """Parameters stored on one side; ``trainable_*`` is None without a model ("all stored")."""

    tensors: int
    elements: int
    trainable_tensors: int | None = None
    trainable_elements: int | None = None


@dataclass
class DiffResult:
    """Result of :func:`diff`. Truthy when every parameter matches in shape and value."""

    params: list[ParamDiff] = field(default_factory=list)
    unmatched_ref: list[str] = field(default_factory=list)
    unmatched_cand: list[str] = field(default_factory=list)
    ambiguous: dict[str, list[str]] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    counts_ref: Counts | None = None
    counts_cand: Counts | None = None
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    notes: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return all(p.ok for p in self.params) and not (
            self.unmatched_ref or self.unmatched_cand or self.ambiguous
        )

    def differing(self) -> list[str]:
        """Reference names whose shape or values disagree."""
        return [p.ref for p in self.params if not p.ok]

    @property
    def max_abs(self) -> float:
        """Largest absolute difference over all comparable parameters (the atol that passes)."""
        vals = [p.max_abs for p in self.params if p.max_abs is not None]
        return max(vals) if vals else 0.0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = bool(self)
        d["differing"] = self.differing()
        d["max_abs"] = self.max_abs
        d["version"] = 1
        return d


def _values(ck: CheckpointDict, name: str) -> np.ndarray:
    arr = ck[name]
    dt = ck.dtype(name)
    if dt in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        return decode(arr, dt).astype(np.float64)
    return arr


def _compare(a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> tuple[float, float, int]:
    if a.dtype.kind in "biu" and b.dtype.kind in "biu":
        neq = int(np.count_nonzero(a != b))
        d = np.abs(a.astype(np.float64) - b.astype(np.float64)) if a.size else np.zeros(0)
        mx = float(d.max()) if d.size else 0.0
        den = np.maximum(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
        rel = float(np.max(np.divide(d, den, out=np.zeros_like(d), where=den > 0))) if d.size else 0.0
        return mx, rel, neq
    x = np.asarray(a, dtype=np.float64) if a.dtype.kind != "c" else a.astype(np.complex128)
    y = np.asarray(b, dtype=np.float64) if b.dtype.kind != "c" else b.astype(np.complex128)
    if not x.size:
        return 0.0, 0.0, 0
    both_nan = np.isnan(x) & np.isnan(y)
    with np.errstate(invalid="ignore", over="ignore"):
        delta = np.where(both_nan | (x == y), 0.0, np.abs(x - y))  # inf == inf is equal
        scale = np.maximum(np.abs(x), np.abs(y))
        ratio = np.divide(delta, scale, out=np.zeros_like(delta, dtype=np.float64),
                          where=scale > 0)
        close = np.isclose(x, y, rtol=rtol, atol=atol, equal_nan=True)
    return float(np.nanmax(delta)), float(np.nanmax(ratio)), int(np.count_nonzero(~close))


def _counts(ck: CheckpointDict, model: Any) -> Counts:
    c = Counts(tensors=len(ck), elements=int(sum(v.size for v in ck.values())))
    if model is not None:
        tr = model_info(model).trainable
        names = [n for n, t in tr.items() if t]
        c.trainable_tensors = len(names)
        c.trainable_elements = int(sum(ck[n].size for n in names if n in ck))
    return c


def diff(
    a: Any,
    b: Any,
    *,
    mapping: Any = None,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    a_model: Any = None,
    b_model: Any = None,
) -> DiffResult:
    """Compare checkpoint ``a`` (reference) with ``b`` (candidate), parameter by parameter.

    Args:
        a: reference checkpoint: path, ``{name: array}`` dict or model.
        b: candidate, same kinds (may use the other framework's names).
        mapping: user mapping (file, dict or NameMap).
        rtol, atol: ``|a - b| <= atol + rtol * |b|`` per element.
        a_model, b_model: models (give layer types and trainable counts).

    Returns:
        A :class:`DiffResult`; shapes that disagree are reported there, not raised.

    Example:
        >>> import numpy as np
        >>> r = diff({"bn.weight": np.ones(2), "bn.running_mean": np.zeros(2),
        ...           "bn.running_var": np.ones(2)},
        ...          {"bn.gamma": np.ones(2), "bn.moving_mean": np.zeros(2),
        ...           "bn.moving_variance": np.ones(2)})
        >>> bool(r), [p.how for p in r.params]
        (True, ['rule', 'rule', 'rule'])
    """
    if a_model is None and is_model(a):
        a_model = a
    if b_model is None and is_model(b):
        b_model = b
    sa, sb = state_of(a), state_of(b)
    nm = map_names(sa, sb, ref_model=a_model, cand_model=b_model, mapping=mapping)
    res = DiffResult(unmatched_ref=nm.unmatched_ref, unmatched_cand=nm.unmatched_cand,
                     ambiguous=nm.ambiguous, dropped=list(nm.dropped_ref) + list(nm.dropped_cand),
                     rtol=rtol, atol=atol, notes=list(nm.notes))
    res.counts_ref = _counts(sa, a_model)
    res.counts_cand = _counts(sb, b_model)
    for p in nm.pairs:
        pd = ParamDiff(p.ref, p.cand, p.how, tuple(p.ref_shape), tuple(p.cand_shape),
                       sa.dtype(p.ref), sb.dtype(p.cand), p.shape_ok)
        if p.shape_ok:
            x = _values(sa, p.ref).reshape(p.cand_shape)
            y = _values(sb, p.cand)
            pd.max_abs, pd.max_rel, pd.mismatched = _compare(x, y, rtol, atol)
            pd.ok = pd.mismatched == 0
        res.params.append(pd)
    dtypes_differ = [p.ref for p in res.params if p.ref_dtype != p.cand_dtype]
    if dtypes_differ:
        res.notes.append(f"{len(dtypes_differ)} parameter(s) differ in dtype (values compared "
                         f"in float64), e.g. {dtypes_differ[0]}")
    return res
