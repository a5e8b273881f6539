"""Check a MindSpore counterpart three ways: it exists, it is not deprecated, it runs on the device.

What the installed MindSpore says about each of its APIs is read from the API's own docstring:
``Supported Platforms: ``Ascend`` ``GPU`` ``CPU````` (or ``Deprecated``) and the deprecation
warnings (``This interface is deprecated ...``, ``... is deprecated from version 2.9.0 ... Please
use :func:`mindspore.ops.communication.all_reduce` instead``). Where the docstring is wrong for
CPU, the facts measured by calling the API on small tensors win: ``mapping.json``'s ``cpu_runs``
section (target -> true/false, written by ``tools/probe_scan_cpu.py``), spot-checked by
``tests/scan/test_scan_targets.py``.

A target that does not run on the device is replaced by the entry's first alternative that does
(``mindspore.mint.stack`` -> ``mindspore.ops.stack`` on CPU), then by its ``device_alt``.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from contextlib import redirect_stderr
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

DEVICES = ("cpu", "gpu", "ascend")

_PLATFORMS = re.compile(r"Supported Platforms:\s*\n?\s*([^\n]*)")
_DEPRECATED = re.compile(r"(This interface|`[\w.]+`)\s+is\s+deprecated", re.I)
_REPLACEMENT = re.compile(r"[Pp]lease\s+use\s+:(?:func|class|meth):`~?([\w.]+)`")


@dataclass(frozen=True)
class TargetFacts:
    """What the installed MindSpore says about one dotted name."""

    exists: bool
    platforms: frozenset[str] | None = None  #: None: the docstring does not say
    deprecated: bool = False
    replacement: str = ""  #: named in the deprecation warning ("" when none is named)


def _doc_facts(obj: Any) -> tuple[frozenset[str] | None, bool, str]:
    doc = getattr(obj, "__doc__", None) or ""
    platforms: frozenset[str] | None = None
    m = _PLATFORMS.search(doc)
    deprecated = bool(_DEPRECATED.search(doc))
    if m:
        line = m.group(1).lower()
        if "deprecated" in line:
            deprecated = True
        found = frozenset(d for d in DEVICES if d in line)
        platforms = found or None
    rep = _REPLACEMENT.search(doc) if deprecated else None
    return platforms, deprecated, rep.group(1) if rep else ""


@lru_cache(maxsize=4096)
def facts(dotted: str) -> TargetFacts:
    """Existence, platforms and deprecation of ``dotted`` in the installed MindSpore."""
    from netparity.frameworks.mindspore.api import resolve

    with redirect_stderr(io.StringIO()):
        obj = resolve(dotted)
    if obj is None:
        return TargetFacts(exists=False)
    platforms, deprecated, replacement = _doc_facts(obj)
    return TargetFacts(True, platforms, deprecated, replacement)


def runs_on(dotted: str, device: str, measured: Mapping[str, bool] | None = None) -> bool | None:
    """True/False when known that ``dotted`` runs on ``device``; None when nothing says.

    For CPU a measured fact (``measured``: the table's ``cpu_runs``) wins over the docstring.
    """
    if device == "cpu" and measured is not None and dotted in measured:
        return bool(measured[dotted])
    f = facts(dotted)
    if not f.exists:
        return False
    if f.platforms is None:
        return None
    return device in f.platforms


def default_device() -> str:
    """The device the installed MindSpore can run here: its build's device target, lower case."""
    from netparity.frameworks.mindspore.api import device_target

    target = (device_target() or "cpu").lower()  # absent or not configurable: assume CPU
    return target if target in DEVICES else "cpu"


@dataclass
class Choice:
    """The counterpart to advise on a device and why it is not the table's primary target."""

    target: str
    reasons: list[str]
    blocked: bool = False  #: nothing in the entry runs on the device
    others: list[str] = field(default_factory=list)  #: other alternatives that run there


def choose(entry: Mapping[str, Any], device: str, version: str,
           measured: Mapping[str, bool] | None = None) -> Choice:
    """The entry's primary target when it exists, is current and runs on ``device``; else the
    first alternative (then ``device_alt``, then the replacement a deprecation names) that does,
    with the reasons for the switch; a deprecated one that runs only when nothing else does."""
    primary = str(entry["target"])
    candidates = [primary, *entry.get("alt", []), *entry.get("device_alt", [])]
    reasons: list[str] = []
    deprecated_ok = ""  # the first deprecated candidate that still runs: the last resort
    for cand in candidates:
        f = facts(cand)
        if not f.exists:
            reasons.append(f"{cand} does not exist in MindSpore {version}")
            continue
        runs = runs_on(cand, device, measured) is not False
        if f.deprecated:
            rep = f" (its docstring names {f.replacement})" if f.replacement else ""
            reasons.append(f"{cand} is deprecated in MindSpore {version}{rep}")
            if f.replacement and f.replacement not in candidates:
                candidates.append(f.replacement)
            deprecated_ok = deprecated_ok or (cand if runs else "")
            continue
        if not runs:
            why = ("measured: no CPU kernel" if device == "cpu" and measured
                   and cand in measured else
                   "Supported Platforms: " + ", ".join(sorted(f.platforms or ())))
            reasons.append(f"{cand} does not run on {device.upper()} in MindSpore {version} "
                           f"({why})")
            continue
        others = [a for a in entry.get("alt", []) if a != cand and facts(a).exists
                  and not facts(a).deprecated and runs_on(a, device, measured) is not False]
        return Choice(cand, reasons if cand != primary else [], others=others)
    if deprecated_ok:
        return Choice(deprecated_ok, [*reasons, f"no current counterpart: {deprecated_ok} "
                                                f"still runs"])
    return Choice(primary, reasons, blocked=True)
