"""Check names and signatures of the installed MindSpore (for ``netparity scan``'s table).

The only place the scan's mapping table touches MindSpore: a dotted name such as
``mindspore.nn.Conv2d`` is resolved in the installed package and its signature is read with
:func:`inspect.signature`, so a table entry that names a counterpart MindSpore does not have, or an
argument its signature lacks, is caught at scan time instead of during the port. MindSpore is
imported lazily, inside the functions: importing this module costs nothing.
"""

from __future__ import annotations

import importlib
import inspect
import io
import re
from collections.abc import Iterable, Mapping
from contextlib import redirect_stderr
from dataclasses import dataclass, field
from typing import Any

#: an argument name the table asks MindSpore to have (other values are prose, e.g. "(.batch())")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class ApiCheck:
    """Outcome of checking table entries against the installed MindSpore.

    ``version`` is None when MindSpore is not installed (the check was skipped); ``problems``
    maps a torch API name to what is wrong with its entry.
    """

    version: str | None
    problems: dict[str, list[str]] = field(default_factory=dict)
    checked: int = 0

    @property
    def skipped(self) -> bool:
        """True when MindSpore is not importable here."""
        return self.version is None


def mindspore_version() -> str | None:
    """Version of the installed MindSpore, or None when it cannot be imported."""
    try:
        # MindSpore prints its own warnings while importing; keep the scan's output clean
        with redirect_stderr(io.StringIO()):
            import mindspore
    except Exception:  # noqa: BLE001 -- any import failure means "not usable here"
        return None
    return str(getattr(mindspore, "__version__", "unknown"))


def device_target() -> str | None:
    """The installed MindSpore's device target ("CPU", "GPU", "Ascend"), or None without it."""
    import io
    from contextlib import redirect_stderr

    try:
        with redirect_stderr(io.StringIO()):
            import mindspore

            return str(mindspore.get_context("device_target"))
    except Exception:  # noqa: BLE001 -- MindSpore absent or not configurable
        return None


def resolve(dotted: str) -> Any | None:
    """The object a dotted MindSpore name denotes, or None when it does not exist."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p, None)
            if obj is None:
                return None
        return obj
    return None


def parameter_names(obj: Any) -> set[str] | None:
    """Names a callable (or a class's ``__init__``) accepts; None when the signature is opaque.

    A signature with ``**kwargs`` yields None too: it accepts any keyword, so an argument check
    against it would prove nothing.
    """
    try:
        sig = inspect.signature(obj.__init__ if inspect.isclass(obj) else obj)
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return None
    return {p.name for p in sig.parameters.values() if p.name != "self"}


def _required_args(entry: Mapping[str, Any]) -> set[str]:
    """MindSpore argument names an entry relies on: renames and the traps' ``ms_arg``."""
    names = {v for v in (entry.get("args") or {}).values() if _IDENT.match(str(v))}
    for trap in entry.get("traps", []):
        names.update(trap.get("ms_args", []))
        if trap.get("ms_arg"):
            names.add(trap["ms_arg"])
    return names


def check_entries(entries: Mapping[str, Mapping[str, Any]],
                  names: Iterable[str] | None = None) -> ApiCheck:
    """Check ``entries`` (torch name -> table entry), or only ``names`` of them.

    For every entry with a target: the target and each alternative exist in the installed
    MindSpore, and the target's signature (when it is inspectable) has every argument the entry
    renames to or tells the user to set.
    """
    version = mindspore_version()
    result = ApiCheck(version=version)
    if version is None:
        return result
    with redirect_stderr(io.StringIO()):
        for name in (entries if names is None else names):
            entry = entries.get(name)
            if not entry or not entry.get("target"):
                continue
            result.checked += 1
            problems: list[str] = []
            target = resolve(entry["target"])
            if target is None:
                problems.append(f"{entry['target']} does not exist in MindSpore {version}")
            for alt in entry.get("alt", []):
                if resolve(alt) is None:
                    problems.append(f"{alt} does not exist in MindSpore {version}")
            if target is not None:
                params = parameter_names(target)
                if params is not None:
                    lacking = sorted(_required_args(entry) - params)
                    if lacking:
                        problems.append(f"{entry['target']} has no argument "
                                        + ", ".join(lacking))
            if problems:
                result.problems[name] = problems
    return result


def check_primitives(table: Mapping[str, Iterable[str]]) -> ApiCheck:
    """Check an aten -> primitive table: every primitive exists in ``mindspore.ops``."""
    version = mindspore_version()
    result = ApiCheck(version=version)
    if version is None:
        return result
    ops = resolve("mindspore.ops")
    for aten, prims in table.items():
        result.checked += 1
        lacking = [p for p in prims if getattr(ops, p, None) is None]
        if lacking:
            result.problems[aten] = [f"mindspore.ops.{p} does not exist in MindSpore {version}"
                                     for p in lacking]
    return result
