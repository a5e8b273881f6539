"""What to capture: level, payload mode, steps, ranks, name filters, directions, byte budget.

Shared by every framework's capture so the same flags mean the same thing everywhere.

Example:
    >>> p = CapturePolicy(steps={0, 1}, include=["layer1.*"], exclude=["*.relu"])
    >>> p.wants_step(1), p.wants_step(2), p.wants_name("layer1.0.conv1"), p.wants_name("layer1.relu")
    (True, False, True, False)
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass, field

from netparity.errors import UsageError

LEVELS = ("module", "op", "both")
PAYLOADS = ("stats", "tensors", "hash")


@dataclass
class CapturePolicy:
    """Capture policy.

    Attributes:
        level: ``module`` (module/Cell boundaries), ``op`` (every primitive), or ``both``.
        payload: ``stats`` (statistics only), ``tensors`` (statistics and full tensors), or
            ``hash`` (statistics and a content hash).
        steps: step numbers to capture (``None``: all).
        ranks: ranks to capture (``None``: all).
        include: glob patterns; when given, only modules/ops whose path or op name matches one are
            captured (parameters, gradients and the loss are matched by their path too).
        exclude: glob patterns removed after ``include``.
        directions: any of ``forward``, ``backward`` (``update`` — parameters after the optimizer
            step — is always captured when ``forward`` or ``backward`` is).
        max_bytes: stop storing tensor payloads after this many bytes (statistics continue).
    """

    level: str = "module"
    payload: str = "stats"
    steps: set[int] | None = None
    ranks: set[int] | None = None
    include: list[str] | None = None
    exclude: list[str] | None = None
    directions: tuple[str, ...] = ("forward", "backward")
    max_bytes: int | None = None
    _name_cache: dict[str, bool] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise UsageError(f"level must be one of {', '.join(LEVELS)}, not {self.level!r}")
        if self.payload not in PAYLOADS:
            raise UsageError(f"payload must be one of {', '.join(PAYLOADS)}, not {self.payload!r}")
        self.directions = tuple(self.directions)
        for d in self.directions:
            if d not in ("forward", "backward", "update"):
                raise UsageError(f"unknown direction {d!r} (forward, backward, update)")
        if self.steps is not None:
            self.steps = set(_ints(self.steps))
        if self.ranks is not None:
            self.ranks = set(_ints(self.ranks))
        if isinstance(self.include, str):
            self.include = [self.include]
        if isinstance(self.exclude, str):
            self.exclude = [self.exclude]

    # Derived flags, plain attributes (capture reads them several times per record; a property
    # is a Python call each time): kept in step with ``level`` and ``payload`` by __setattr__.
    #: module boundaries are captured (level module or both)
    modules: bool = field(init=False, repr=False, compare=False, default=True)
    #: primitives are captured (level op or both)
    ops: bool = field(init=False, repr=False, compare=False, default=False)
    #: full tensors are stored (payload tensors)
    tensors: bool = field(init=False, repr=False, compare=False, default=False)
    #: content hashes are computed (payload hash)
    hashes: bool = field(init=False, repr=False, compare=False, default=False)

    def __setattr__(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)
        if name == "level":
            object.__setattr__(self, "modules", value in ("module", "both"))
            object.__setattr__(self, "ops", value in ("op", "both"))
        elif name == "payload":
            object.__setattr__(self, "tensors", value == "tensors")
            object.__setattr__(self, "hashes", value == "hash")

    def wants_step(self, step: int) -> bool:
        return self.steps is None or step in self.steps

    def wants_rank(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks

    def wants_direction(self, direction: str) -> bool:
        return direction == "update" or direction in self.directions

    def wants_name(self, *names: str) -> bool:
        """True when any of ``names`` passes include/exclude (cached: it runs per op)."""
        if self.include is None and self.exclude is None:
            return True
        key = "\0".join(names)
        hit = self._name_cache.get(key)
        if hit is None:
            hit = (
                self.include is None
                or any(fnmatch.fnmatchcase(n, p) for n in names if n for p in self.include)
            ) and not (
                self.exclude is not None
                and any(fnmatch.fnmatchcase(n, p) for n in names if n for p in self.exclude)
            )
            self._name_cache[key] = hit
        return hit


def _ints(v: Iterable[int] | int | str) -> list[int]:
    """Accept 3, [0, 1], "0,2-4"."""
    if isinstance(v, int):
        return [v]
    if isinstance(v, str):
        out: list[int] = []
        for part in v.split(","):
            part = part.strip()
            if not part:
                continue
            try:
                if "-" in part:
                    a, b = part.split("-", 1)
                    if int(b) < int(a):
                        raise UsageError(f"empty range {part!r} in {v!r} (write low-high)")
                    out.extend(range(int(a), int(b) + 1))
                else:
                    out.append(int(part))
            except ValueError:
                raise UsageError(f"bad step/rank list {v!r} (use e.g. 0,2-4)") from None
        return out
    return [int(x) for x in v]


def parse_int_set(v: str | None) -> set[int] | None:
    """CLI helper: ``"0,2-4"`` -> ``{0, 2, 3, 4}``; ``None`` stays ``None``."""
    return None if v is None else set(_ints(v))
