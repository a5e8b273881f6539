"""Tolerances: dtype-aware defaults, per-name overrides, global values.

Resolution order for one pair (first that applies wins, per component):

1. a per-name override: the first pattern (in insertion order, ``""`` excluded) whose glob
   matches the reference or candidate module path, the canonical op, the native op name, or
   ``module/op``;
2. the global ``rtol`` / ``atol`` (``--rtol`` / ``--atol``), each on its own;
3. the ``""`` key of the overrides;
4. the dtype default of the *lower-precision* side of the pair, from the ``same`` profile when
   both runs use the same framework and device, else from the ``cross`` profile.

``same`` is ``torch.testing.assert_close``'s table. ``cross`` (different framework, device, or
dtype) is looser because the two runs use different kernels (summation order, fused
multiply-add, convolution algorithms) and module outputs carry the error accumulated by every
module before them: float32 ``rtol=1e-4, atol=1e-4`` (tens of float32 ulps after a few dozen
layers), float16 ``1e-2 / 1e-3``, bfloat16 ``5e-2 / 1e-2``, float64 ``1e-7 / 1e-7``. Integer and
bool tensors must be equal.

The ``cross`` profile also judges *normwise*: a pair fails when ``rmse / rms(ref)`` exceeds
:data:`CROSS_NORM` (float32: 1e-3 forward, 5e-2 backward); elementwise violations under that bound
are a *warn* (parameters after the update use the backward bound: they carry the gradients'
noise). Why: different kernels make a few activations that sit at a ReLU/max-pool decision
boundary (values ~1e-7 from zero) fall on opposite sides; the gradients of those elements then
differ by their full size, and BatchNorm's backward spreads that over the whole tensor. Measured
on the ResNet demos: forward pairs agree to 1e-6..4e-5 normwise; backward to ~1e-3 (ResNet-18,
batch 2) and up to 1.5e-2 (ResNet-50 at 64 px, where one flip in layer4's 2x2 maps is spread
by BatchNorm over 16 samples), with cosine >= 0.9999 -- agreement that an elementwise
assert_close rule calls a failure. Seeded
migration bugs sit one to several orders of magnitude above these bounds.

In the ``cross`` profile the default ``atol`` is *relative to the reference tensor's RMS*
(``atol × rms(ref)``, from the captured L2 norm, or the candidate's when the reference is all
zeros). Why: an absolute ``1e-4`` says nothing about a gradient whose values are ``1e-6``
(a 1024x loss-scale mismatch in gradients passed under it), while it is too strict for
activations in the thousands. Scaled this way, a tensor passes when its elementwise error is
small against its own typical magnitude, whatever that magnitude is. Tolerances the user gives
(``--atol``, overrides) stay absolute.

Example:
    >>> from netparity.trace import Record
    >>> t = Tolerances(overrides={"fc*": (1e-2, 1e-3)})
    >>> t.resolve(Record(kind="module", module="fc", dtype="float32")).rtol
    0.01
    >>> t.resolve(Record(kind="module", module="conv1", dtype="bfloat16")).rtol
    0.016
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

from netparity.compare.metrics import record_rms
from netparity.errors import UsageError
from netparity.trace.schema import Record

#: torch.testing.assert_close defaults
SAME: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7),
    "complex128": (1e-7, 1e-7),
    "float32": (1.3e-6, 1e-5),
    "complex64": (1.3e-6, 1e-5),
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float8_e4m3fn": (1.25e-1, 1e-3),
    "float8_e5m2": (2.5e-1, 1e-3),
}
#: cross-framework / cross-device defaults (see the module docstring for why)
CROSS: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7),
    "complex128": (1e-7, 1e-7),
    "float32": (1e-4, 1e-4),
    "complex64": (1e-4, 1e-4),
    "float16": (1e-2, 1e-3),
    "bfloat16": (5e-2, 1e-2),
    "float8_e4m3fn": (2.5e-1, 1e-2),
    "float8_e5m2": (5e-1, 1e-2),
}
PROFILES = {"same": SAME, "cross": CROSS}
#: cross profile, normwise relative error that passes: (forward/update/loss/data, backward/grad)
CROSS_NORM: dict[str, tuple[float, float]] = {
    "float64": (1e-9, 1e-7),
    "complex128": (1e-9, 1e-7),
    "float32": (1e-3, 5e-2),
    "complex64": (1e-3, 5e-2),
    "float16": (1e-2, 5e-2),
    "bfloat16": (5e-2, 1e-1),
    "float8_e4m3fn": (2e-1, 3e-1),
    "float8_e5m2": (3e-1, 4e-1),
}
#: lower precision first: the pair uses the tolerance of whichever side comes first here
PRECISION_ORDER = (
    "float8_e5m2", "float8_e4m3fn", "bfloat16", "float16", "complex64", "float32",
    "complex128", "float64",
)


@dataclass(frozen=True)
class Tol:
    """Resolved tolerance of one pair and where it came from.

    ``norm`` (cross profile defaults only): largest normwise relative error ``rmse / rms(ref)``
    that passes; elementwise ``(rtol, atol)`` violations under it make a *warn*, not a fail.
    """

    rtol: float
    atol: float
    source: str
    norm: float | None = None


def scale_atol(tol: Tol, rms: float) -> Tol:
    """``tol`` with its ``atol`` factor multiplied by a pair's RMS (cross profile)."""
    return Tol(tol.rtol, tol.atol * rms, tol.source, tol.norm)


def lower_precision(a: str, b: str) -> str:
    """The dtype of lower precision (non-float dtypes count as exact)."""
    ia = PRECISION_ORDER.index(a) if a in PRECISION_ORDER else len(PRECISION_ORDER)
    ib = PRECISION_ORDER.index(b) if b in PRECISION_ORDER else len(PRECISION_ORDER)
    return a if ia <= ib else b


@dataclass
class Tolerances:
    """Tolerance settings of one comparison. See the module docstring for precedence."""

    rtol: float | None = None
    atol: float | None = None
    overrides: dict[str, tuple[float, float]] = field(default_factory=dict)
    profile: str = "same"

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise UsageError(f"unknown tolerance profile {self.profile!r} (same or cross)")
        for v in (self.rtol, self.atol):
            if v is not None and not (v >= 0):
                raise UsageError("tolerances must be non-negative numbers")
        clean: dict[str, tuple[float, float]] = {}
        for k, pair in (self.overrides or {}).items():
            try:
                r, a = float(pair[0]), float(pair[1])
            except (TypeError, ValueError, IndexError):
                raise UsageError(f"tolerance override {k!r} must be (rtol, atol)") from None
            if r < 0 or a < 0:
                raise UsageError(f"tolerance override {k!r} must be non-negative")
            clean[str(k)] = (r, a)
        self.overrides = clean
        self._named = any(self.overrides)  # a per-name pattern: names enter the cache key
        self._cache: dict[tuple[object, ...], tuple[Tol, bool]] = {}

    def resolve(self, ref: Record, cand: Record | None = None) -> Tol:
        """The tolerance of the pair ``(ref, cand)``."""
        tol, scaled = self.resolve_unscaled(ref, cand)
        if not scaled:
            return tol
        rms = record_rms(ref) or (record_rms(cand) if cand is not None else None) or 0.0
        return scale_atol(tol, rms)

    def resolve_unscaled(self, ref: Record, cand: Record | None = None) -> tuple[Tol, bool]:
        """The tolerance of a pair before its RMS scaling, and whether ``atol`` is still to be
        multiplied by the pair's RMS (``record_rms(ref) or record_rms(cand) or 0.0``; see
        :func:`scale_atol`). For callers that compute many RMS values at once."""
        # everything but the RMS scaling depends on a few fields only: resolved once per
        # distinct combination (a 100k-op comparison resolves ~300k pairs)
        key: tuple[object, ...] = (ref.dtype, cand.dtype if cand is not None else None,
               ref.direction == "backward" or ref.kind in ("grad", "param"))
        if self._named:
            key += (ref.module, ref.op, ref.native) + (
                (cand.module, cand.native) if cand is not None else ())
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._resolve(ref, cand)
        return hit

    def _resolve(self, ref: Record, cand: Record | None) -> tuple[Tol, bool]:
        """The tolerance of a pair and whether its ``atol`` is still to be multiplied by the
        pair's RMS (``atol`` then holds the factor)."""
        names = [ref.module, ref.op, ref.native, f"{ref.module}/{ref.op}"]
        if cand is not None:
            names += [cand.module, cand.native]
        for pat, (r, a) in self.overrides.items():
            if pat and any(fnmatch.fnmatchcase(n, pat) for n in names if n):
                return Tol(r, a, f"override:{pat}"), False
        dt = lower_precision(ref.dtype, cand.dtype if cand is not None else ref.dtype)
        table = PROFILES[self.profile]
        if dt in table:
            dr, da = table[dt]
            src = f"{self.profile}:{dt}"
        else:
            dr, da = 0.0, 0.0
            src = f"exact:{dt or 'unknown'}"
        if "" in self.overrides:
            dr, da = self.overrides[""]
            src = "override:''"
        scaled = self.profile == "cross" and not src.startswith(("override", "exact"))
        if scaled:
            src += "(atol x rms)"
        norm = None
        if self.profile == "cross" and not src.startswith(("override", "exact")) \
                and self.rtol is None and self.atol is None and dt in CROSS_NORM:
            # updated parameters carry gradient noise: a zero-initialised bias *is* -lr * grad
            backward = ref.direction == "backward" or ref.kind in ("grad", "param")
            norm = CROSS_NORM[dt][1 if backward else 0]
        r = self.rtol if self.rtol is not None else dr
        if self.atol is not None:
            a, scaled = self.atol, False
        else:
            a = da
        if self.rtol is not None or self.atol is not None:
            src = "global" if (self.rtol is not None and self.atol is not None) else src + "+global"
        return Tol(r, a, src, norm), scaled

    def to_json(self) -> dict[str, object]:
        return {
            "rtol": self.rtol,
            "atol": self.atol,
            "overrides": {k: list(v) for k, v in self.overrides.items()},
            "profile": self.profile,
        }


def parse_tol_arg(text: str) -> tuple[str, tuple[float, float]]:
    """Parse ``PATTERN=RTOL,ATOL`` (``=RTOL,ATOL`` sets the default key ``""``).

    Example:
        >>> parse_tol_arg("layer1.*=1e-3,1e-5")
        ('layer1.*', (0.001, 1e-05))
    """
    pat, sep, vals = text.rpartition("=")
    if not sep:
        raise UsageError(f"--tol {text!r}: expected PATTERN=RTOL,ATOL")
    try:
        r, a = (float(x) for x in vals.split(","))
    except ValueError:
        raise UsageError(f"--tol {text!r}: expected PATTERN=RTOL,ATOL with two numbers") from None
    if r < 0 or a < 0:
        raise UsageError(f"--tol {text!r}: tolerances must be non-negative")
    return pat, (r, a)
