"""User mapping files: exact module paths, regex rules, op groups (N:M) and parameter names.

One format shared by the trace aligner (``netparity.align``) and the checkpoint name mapper
(``netparity.ckpt``), so it sits below both (it was ``netparity.align.mapping``; the checkpoint
side importing the aligner ran against the flow).

A mapping overrides or extends the automatic alignment. The file is YAML or JSON::

    modules: {"fc": "classifier", "layer1.0.downsample": "layer1.0.down_sample"}
    rules:   [{"ref": "^(.*)\\\\.downsample(\\\\..*)?$", "cand": "\\\\1.down_sample\\\\2"}]
    ops:     [{"ref": ["linear"], "cand": ["matmul", "add"]}]
    params:  {"bn1.weight": "bn1.gamma"}

Every section is optional. ``netparity align --emit-mapping FILE`` writes one from what the
aligner found.

Example:
    >>> m = Mapping.from_dict({"modules": {"fc": "classifier"},
    ...                        "rules": [{"ref": "downsample", "cand": "down_sample"}]})
    >>> m.module_target("fc"), m.module_target("layer1.0.downsample.0"), m.module_target("x")
    ('classifier', 'layer1.0.down_sample.0', None)
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netparity import inputs
from netparity.errors import MappingError
from netparity.untrusted import load_json

SECTIONS = ("modules", "rules", "ops", "params")
_MAX_MAPPING = 64 << 20  # a mapping file of a huge model is a few MiB


@dataclass
class Mapping:
    """A validated mapping (see the module docstring for the file form)."""

    modules: dict[str, str] = field(default_factory=dict)
    rules: list[tuple[re.Pattern[str], str]] = field(default_factory=list)
    ops: list[tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=list)
    params: dict[str, str] = field(default_factory=dict)
    source: str = "<dict>"
    #: read from a user's file (:func:`load_mapping`): its names are checked against the traces
    #: it is applied to (``netparity.align.align_traces``); a mapping a program derives is not
    from_file: bool = False

    @classmethod
    def from_dict(cls, d: Any, source: str = "<dict>") -> Mapping:
        """Validate a mapping given as a dict; :class:`MappingError` (one line) when malformed."""
        if d is None:
            d = {}
        if not isinstance(d, dict):
            raise MappingError(f"{source}: a mapping must be an object with keys {', '.join(SECTIONS)}")
        unknown = sorted(set(d) - set(SECTIONS))
        if unknown:
            raise MappingError(
                f"{source}: unknown key(s) {', '.join(map(str, unknown))}; expected {', '.join(SECTIONS)}"
            )
        m = cls(source=source)
        m.modules = _str_map(d.get("modules"), "modules", source)
        m.params = _str_map(d.get("params"), "params", source)
        for name in ("modules", "params"):
            _no_shared_targets(getattr(m, name), name, source)
        rules = d.get("rules") or []
        if not isinstance(rules, list):
            raise MappingError(f"{source}: 'rules' must be a list of {{ref: REGEX, cand: REPLACEMENT}}")
        for i, r in enumerate(rules):
            if not isinstance(r, dict) or not isinstance(r.get("ref"), str) or not isinstance(
                r.get("cand"), str
            ):
                raise MappingError(f"{source}: rules[{i}] must be {{ref: REGEX, cand: REPLACEMENT}}")
            try:
                pat = re.compile(r["ref"])
                pat.sub(r["cand"], "")  # validates group references in the replacement early
            except re.error as e:
                raise MappingError(f"{source}: rules[{i}]: bad regular expression ({e})") from None
            m.rules.append((pat, r["cand"]))
        ops = d.get("ops") or []
        if not isinstance(ops, list):
            raise MappingError(f"{source}: 'ops' must be a list of {{ref: [OPS], cand: [OPS]}}")
        for i, g in enumerate(ops):
            if not isinstance(g, dict):
                raise MappingError(f"{source}: ops[{i}] must be {{ref: [OPS], cand: [OPS]}}")
            sides = []
            for side in ("ref", "cand"):
                v = g.get(side)
                if isinstance(v, str):
                    v = [v]
                if not isinstance(v, list) or not v or not all(isinstance(x, str) and x for x in v):
                    raise MappingError(f"{source}: ops[{i}].{side} must be a non-empty list of op names")
                sides.append(tuple(v))
            m.ops.append((sides[0], sides[1]))
        return m

    def to_dict(self) -> dict[str, Any]:
        return {
            "modules": dict(self.modules),
            "rules": [{"ref": p.pattern, "cand": rep} for p, rep in self.rules],
            "ops": [{"ref": list(a), "cand": list(b)} for a, b in self.ops],
            "params": dict(self.params),
        }

    def module_target(self, path: str) -> str | None:
        """Where the mapping sends a reference module path: exact entry first, then rules.

        A module under a mapped prefix follows it (``fc`` -> ``classifier`` sends ``fc.0`` to
        ``classifier.0``).
        """
        if path in self.modules:
            return self.modules[path]
        for pat, rep in self.rules:
            if pat.search(path):
                return pat.sub(rep, path, count=1)
        # longest mapped prefix
        best = ""
        for k in self.modules:
            if k and path.startswith(k + ".") and len(k) > len(best):
                best = k
        if best:
            return self.modules[best] + path[len(best):]
        return None

    def __bool__(self) -> bool:
        return bool(self.modules or self.rules or self.ops or self.params)


def _no_shared_targets(m: dict[str, str], name: str, source: str) -> None:
    """Two reference names sent to one candidate name: one of them would silently win (three
    sources mapped to ``1.gamma`` used to write a checkpoint with the wrong values)."""
    seen: dict[str, list[str]] = {}
    for ref, cand in m.items():
        seen.setdefault(cand, []).append(ref)
    dup = next(((c, rs) for c, rs in seen.items() if len(rs) > 1), None)
    if dup is not None:
        c, rs = dup
        raise MappingError(f"{source}: '{name}' maps {len(rs)} names to {c!r} "
                           f"({', '.join(map(repr, rs[:5]))}); each target may appear once")


def _str_map(v: Any, name: str, source: str) -> dict[str, str]:
    if v is None:
        return {}
    if not isinstance(v, dict) or not all(
        isinstance(k, str) and isinstance(x, str) for k, x in v.items()
    ):
        raise MappingError(f"{source}: '{name}' must map reference names to candidate names (strings)")
    return dict(v)


def load_mapping(path: str | os.PathLike[str]) -> Mapping:
    """Read and validate a YAML or JSON mapping file.

    Raises:
        MappingError: missing or unreadable file, bad syntax, unknown keys, bad regex.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "map.json"
        >>> _ = p.write_text('{"modules": {"fc": "classifier"}}')
        >>> load_mapping(p).modules
        {'fc': 'classifier'}
    """
    p = Path(path)
    text = inputs.read_text(p, error=MappingError, what="mapping file", limit=_MAX_MAPPING)
    if p.suffix.lower() == ".json":
        try:
            data = load_json(text, what="mapping")
        except ValueError as e:
            raise MappingError(f"{p}: not valid JSON ({e})") from None
    else:
        import yaml

        try:
            data = yaml.safe_load(text)  # safe_load: a mapping file never builds Python objects
        except yaml.YAMLError as e:
            line = str(e).replace("\n", " ")
            raise MappingError(f"{p}: not valid YAML ({line})") from None
        except RecursionError:  # PyYAML composes nested nodes recursively
            raise MappingError(f"{p}: YAML nested too deeply") from None
    m = Mapping.from_dict(data, source=str(p))
    m.from_file = True
    return m


def save_mapping(mapping: dict[str, Any] | Mapping, path: str | os.PathLike[str]) -> None:
    """Write a mapping as YAML (``.yaml``/``.yml``) or JSON (anything else), atomically."""
    d = mapping.to_dict() if isinstance(mapping, Mapping) else mapping
    p = Path(path)
    if p.suffix.lower() in (".yaml", ".yml"):
        import yaml

        text = yaml.safe_dump(d, sort_keys=False, default_flow_style=False)
    else:
        text = json.dumps(d, indent=2) + "\n"
    from netparity.outputs import write_text_atomic

    write_text_atomic(p, text, what="mapping")  # (fsync, rename; no temporary left on failure)
