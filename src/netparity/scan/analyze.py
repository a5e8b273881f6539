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
from netparity.scan.static import (
    Use,
    follow_imports,
    iter_python_files,
    module_names,
    read_source,
    scan_source,
)

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
    #: the port cannot go on without new code: no counterpart (on the device) and no composition
    blocking: bool = False

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
    device: str = ""  #: the device the targets were checked for ("" = not checked)

    def summary(self) -> dict[str, Any]:
        """Counts per status, files scanned and how the table was checked."""
        counts = Counter(f.status for f in self.findings)
        out: dict[str, Any] = {
            "files": len(self.files),
            "uses": len(self.findings),
            "apis": len({f.name for f in self.findings}),
            **{s: counts.get(s, 0) for s in (*STATUSES, "unlisted")},
            "graph_mode_differs": sum(1 for f in self.findings if f.graph),
            "blocking": sum(1 for f in self.findings if f.blocking),
            "mindspore_check": (f"checked against MindSpore {self.mindspore} for "
                                f"{self.device.upper()} (exists, not deprecated, runs there)"
                                if self.mindspore
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

    @property
    def has_blocking(self) -> bool:
        """True when something blocks the port (exit status 1): an API with no counterpart on
        the device and no composition to write, or an executed aten op with no primitive."""
        return any(f.blocking for f in self.findings) or any(
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


def _out_of_place(name: str, table: Mapping[str, Any]) -> str:
    """``torch.Tensor.x_`` with no in-place counterpart: the out-of-place form, where mapped."""
    if not (name.startswith("torch.Tensor.") and name.endswith("_")):
        return ""
    plain = table["apis"].get(name[:-1]) or {}
    if not plain.get("target"):
        return ""
    method = name.rsplit(".", 1)[1][:-1]
    return f"x = x.{method}(...) (out of place: {plain['target']})"


def classify(use: Use, table: Mapping[str, Any], problems: Mapping[str, list[str]],
             choices: Mapping[str, Any] | None = None) -> Finding:
    """The finding for one use; ``choices``: torch name -> :class:`targets.Choice` on the device."""
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
        compose = str(entry.get("compose") or _out_of_place(use.name, table))
        base.note = compose or "no counterpart in MindSpore"
        base.blocking = not compose
        return base
    base.graph = str((entry.get("modes") or {}).get("graph", ""))
    base.target = str(entry["target"])
    if entry.get("alt"):
        base.target += " (or " + ", ".join(entry["alt"]) + ")"
    if use.name in problems:  # the table names something this MindSpore lacks
        base.status = "missing"
        base.note = "; ".join(problems[use.name])
        base.blocking = True
        return base
    traps = list(entry.get("traps", []))
    device_note = ""
    choice = (choices or {}).get(use.name)
    if choice is not None and choice.blocked:
        base.status = "missing"
        base.note = "; ".join(choice.reasons) + (
            f" | compose: {entry['compose']}" if entry.get("compose") else "")
        base.blocking = not entry.get("compose")
        return base
    if choice is not None:
        base.target = choice.target + (
            " (or " + ", ".join(choice.others) + ")" if choice.others else "")
    if choice is not None and choice.target != entry["target"]:
        device_note = "use " + choice.target + ": " + "; ".join(choice.reasons)
        traps = list((entry.get("alt_traps") or {}).get(choice.target, []))
        if entry.get("compose"):
            device_note += f"; or compose: {entry['compose']}"
    base.note = "; ".join(p for p in (device_note, _describe(entry, use)) if p)
    if use.is_call or (entry.get("kind") == "module" and not use.type_check):
        # a module class passed on (act_layer=nn.GELU) is built later with its defaults: the
        # rules see no arguments, so the default-value traps speak (not in isinstance(m, X))
        base.traps = rules.evaluate(traps, use)
    base.status = "trap" if base.traps else "mapped"
    if base.traps:
        base.note = " | ".join(base.traps) + (f" | {base.note}" if base.note else "")
    return base


def scan_paths(paths: Iterable[str], to: str = "mindspore", verify: bool = True,
               device: str | None = None, follow: bool = True) -> ScanResult:
    """Scan files/directories; bad input -> ``UsageError`` (one line, with file and line).

    ``device`` (cpu | gpu | ascend; None = what the installed MindSpore runs): every counterpart
    advised is checked to exist, not to be deprecated and to run there (:mod:`.targets`).
    ``follow``: a scanned script's imports of local modules are scanned too.
    """
    from netparity.scan import targets

    if to not in TARGETS:
        raise UsageError(f"--to {to}: only {', '.join(TARGETS)} is supported")
    if device is not None and device not in targets.DEVICES:
        raise UsageError(f"--device {device}: one of {', '.join(targets.DEVICES)}")
    table = load_table()
    known = set(table["apis"])
    modules = module_names(known)
    files: list[str] = []
    uses: list[Use] = []
    found = list(iter_python_files(paths))
    if follow:
        found = follow_imports(found)
    for path in found:
        files.append(str(path))
        uses.extend(scan_source(read_source(path), str(path), known, modules))
    version: str | None = None
    problems: dict[str, list[str]] = {}
    choices: dict[str, targets.Choice] = {}
    dev = ""
    if verify:
        from netparity.frameworks.mindspore.api import check_entries

        names = sorted({u.name for u in uses})
        check = check_entries(table["apis"], names)
        version, problems = check.version, check.problems
        if version is not None:
            dev = device or targets.default_device()
            measured = table.get("cpu_runs", {})
            for n in names:
                entry = table["apis"].get(n)
                if entry and entry.get("target") and n not in problems:
                    choices[n] = targets.choose(entry, dev, version, measured)
    findings = [classify(u, table, problems, choices) for u in uses]
    return ScanResult(findings=findings, files=files, mindspore=version, device=dev)


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
