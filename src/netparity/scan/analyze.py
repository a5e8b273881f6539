"""Turn the uses found in scripts into findings: mapped, missing or trap, each with file and line.

The table (``mapping.json``, package data) says for each PyTorch API its MindSpore counterpart,
argument renames, notes, mode remarks and trap rules; :func:`scan_paths` looks every use up, runs
the trap rules on the arguments written at the call, and checks the counterparts it names against
the installed MindSpore (:mod:`netparity.frameworks.mindspore.api`; skipped, and said so, where
MindSpore is not installed).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from netparity.errors import UsageError
from netparity.scan import rules
from netparity.scan.static import Use, iter_python_files, module_names, read_source, scan_source

STATUSES = ("missing", "trap", "mapped")
TARGETS = ("mindspore",)


@dataclass
class Finding:
    """One API use and what porting it takes.

    ``status`` is ``mapped`` (counterpart available), ``missing`` (none; ``note`` suggests a
    composition where one exists), ``trap`` (counterpart computes other numbers unless ``note``'s
    advice is followed) or ``unlisted`` (not in the table: check by hand; never counted as missing).
    """

    name: str
    file: str
    line: int
    status: str
    target: str = ""
    note: str = ""
    confidence: str = "resolved"
    traps: list[str] = field(default_factory=list)
    #: where Graph mode (``mindspore.jit``) differs from PyNative for this API; "" = no difference known
    graph: str = ""

    def as_json(self) -> dict[str, Any]:
        """The JSON form (keys of the ``apis`` list)."""
        return asdict(self)


@dataclass
class RuntimeOp:
    """An aten op executed by ``scan --run`` and its MindSpore primitives."""

    name: str
    count: int
    status: str  #: mapped | missing | unlisted
    target: str = ""


@dataclass
class ScanResult:
    """Everything one scan found."""

    findings: list[Finding]
    files: list[str]
    mindspore: str | None  #: installed version checked against, None = check skipped
    runtime: list[RuntimeOp] | None = None
    runtime_note: str = ""

    def summary(self) -> dict[str, Any]:
        """Counts per status, files scanned and how the table was checked."""
        counts = Counter(f.status for f in self.findings)
        out: dict[str, Any] = {
            "files": len(self.files),
            "uses": len(self.findings),
            "apis": len({f.name for f in self.findings}),
            **{s: counts.get(s, 0) for s in (*STATUSES, "unlisted")},
            "graph_mode_differs": sum(1 for f in self.findings if f.graph),
            "mindspore_check": (f"verified against MindSpore {self.mindspore}" if self.mindspore
                                else "skipped (MindSpore is not installed)"),
        }
        if self.runtime is not None:
            rc = Counter(op.status for op in self.runtime)
            out["runtime_ops"] = len(self.runtime)
            out["runtime_missing"] = rc.get("missing", 0)
            out["runtime_unlisted"] = rc.get("unlisted", 0)
        return out

    @property
    def has_missing(self) -> bool:
        """True when an API (or an executed aten op) has no counterpart."""
        return any(f.status == "missing" for f in self.findings) or any(
            op.status == "missing" for op in self.runtime or [])

    def as_json(self) -> dict[str, Any]:
        """``{"apis": [...], "summary": {...}}`` (+ ``runtime`` when ``--run`` was used)."""
        out: dict[str, Any] = {"apis": [f.as_json() for f in self.findings],
                               "summary": self.summary()}
        if self.runtime is not None:
            out["runtime"] = [asdict(op) for op in self.runtime]
            out["runtime_note"] = self.runtime_note
        return out


@lru_cache(maxsize=1)
def load_table() -> dict[str, Any]:
    """The packaged PyTorch -> MindSpore table (``netparity/scan/mapping.json``)."""
    text = resources.files("netparity.scan").joinpath("mapping.json").read_text(encoding="utf-8")
    table: dict[str, Any] = json.loads(text)
    return table


def _describe(entry: Mapping[str, Any], use: Use) -> str:
    """Mapped-entry note: renames of the arguments used here, dropped ones, notes, modes."""
    parts: list[str] = []
    renames = entry.get("args") or {}
    used = [k for k in use.kwargs if k in renames]
    if used:
        parts.append("rename " + ", ".join(f"{k} -> {renames[k]}" for k in used))
    dropped = [k for k in use.kwargs if k in (entry.get("dropped") or [])]
    if dropped:
        parts.append("no counterpart for argument " + ", ".join(dropped))
    if entry.get("notes"):
        parts.append(str(entry["notes"]))
    for mode, remark in (entry.get("modes") or {}).items():
        parts.append(f"{mode} mode: {remark}")
    return "; ".join(parts)  # (PyNative is the reference mode: only differences are listed)


def classify(use: Use, table: Mapping[str, Any], problems: Mapping[str, list[str]]) -> Finding:
    """The finding for one use."""
    entry = table["apis"].get(use.name)
    base = Finding(name=use.name, file=use.file, line=use.line, status="unlisted",
                   confidence=use.confidence)
    if entry is None:
        base.note = "not in the mapping table: check this API by hand"
        return base
    if entry.get("status") == "not_needed":
        base.status = "mapped"
        base.target = "(none: drop the call)"
        base.note = str(entry.get("notes", ""))
        return base
    if entry.get("status") == "missing" or not entry.get("target"):
        base.status = "missing"
        base.note = str(entry.get("compose") or "no counterpart in MindSpore")
        return base
    base.graph = str((entry.get("modes") or {}).get("graph", ""))
    base.target = str(entry["target"])
    if entry.get("alt"):
        base.target += " (or " + ", ".join(entry["alt"]) + ")"
    if use.name in problems:  # the table names something this MindSpore lacks
        base.status = "missing"
        base.note = "; ".join(problems[use.name])
        return base
    base.note = _describe(entry, use)
    if use.is_call:
        base.traps = rules.evaluate(list(entry.get("traps", [])), use)
    base.status = "trap" if base.traps else "mapped"
    if base.traps:
        base.note = " | ".join(base.traps) + (f" | {base.note}" if base.note else "")
    return base


def scan_paths(paths: Iterable[str], to: str = "mindspore", verify: bool = True) -> ScanResult:
    """Scan files/directories; bad input -> ``UsageError`` (one line, with file and line)."""
    if to not in TARGETS:
        raise UsageError(f"--to {to}: only {', '.join(TARGETS)} is supported")
    table = load_table()
    known = set(table["apis"])
    modules = module_names(known)
    files: list[str] = []
    uses: list[Use] = []
    for path in iter_python_files(paths):
        files.append(str(path))
        uses.extend(scan_source(read_source(path), str(path), known, modules))
    version: str | None = None
    problems: dict[str, list[str]] = {}
    if verify:
        from netparity.frameworks.mindspore.api import check_entries

        check = check_entries(table["apis"], sorted({u.name for u in uses}))
        version, problems = check.version, check.problems
    findings = [classify(u, table, problems) for u in uses]
    return ScanResult(findings=findings, files=files, mindspore=version)


def map_aten(counts: Mapping[str, int], table: Mapping[str, Any],
             lacking: Mapping[str, list[str]]) -> list[RuntimeOp]:
    """aten op (``aten.x.overload`` or ``aten.x``) counts -> runtime ops with their primitives."""
    merged: Counter[str] = Counter()
    for native, n in counts.items():
        parts = native.split(".")
        merged[".".join(parts[:2]) if len(parts) > 2 else native] += n
    out = []
    aten = table["aten"]
    for name in sorted(merged):
        prims = aten.get(name)
        if prims is None:
            out.append(RuntimeOp(name, merged[name], "unlisted", ""))
        elif name in lacking:
            out.append(RuntimeOp(name, merged[name], "missing", "; ".join(lacking[name])))
        else:
            out.append(RuntimeOp(name, merged[name], "mapped",
                                 " + ".join(f"mindspore.ops.{p}" for p in prims)))
    return out
