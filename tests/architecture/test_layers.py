"""The one-way flow, checked: a module imports only from its own package or from packages of a
lower rank (frameworks -> capture -> trace -> align -> compare -> analyzers -> report, with the
core below and the CLI on top). Imports inside functions count too, except a framework's own
(``import torch``), which only ``frameworks/`` may do at all."""

from __future__ import annotations

import ast
from pathlib import Path

import netparity

PKG = Path(netparity.__file__).parent
CORE = ("errors", "dtypes", "_fastvec", "param_names", "sequences", "gcpause", "heap", "mapfile",
        "outputs", "inputs", "untrusted", "statestore")
RANK: dict[str, int] = {
    **dict.fromkeys(CORE, 0),
    # the trace and the statistics it stores (STAT_FIELDS is the trace schema's)
    "trace": 1, "stats": 1, "hoststats": 1,
    "capture": 2,
    "frameworks": 3,
    "seeding": 3,  # dispatches to the framework adapters
    "ckpt": 4,
    "align": 5,
    "precision": 5,  # replays ops (frameworks); below compare, which judges with it
    "compare": 6,
    "analyzers": 7, "scan": 7,
    "report": 8,
    "workflow": 9, "examples": 9, "bisect": 9,
    "cli": 10,
}
EXEMPT = {"__init__", "__main__"}  # the package's facade sits on top of everything
FRAMEWORKS = ("torch", "mindspore", "jax", "torchvision")


def _imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = path.relative_to(PKG).parts[:-1]
                base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                out.append((node.lineno, ".".join(("netparity", *base, *([node.module] if
                                                                      node.module else [])))))
            elif node.module:
                out.append((node.lineno, node.module))
    return out


def _package(rel: Path) -> str:
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def test_no_import_runs_against_the_flow():
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        src = _package(rel)
        if src in EXEMPT:
            continue
        assert src in RANK, f"{rel}: package {src!r} has no rank in this test"
        for line, mod in _imports(path):
            parts = mod.split(".")
            if parts[0] in FRAMEWORKS and src not in ("frameworks", "examples"):
                # (the examples are model code written in those frameworks, like a user's)
                bad.append(f"{rel}:{line} imports the framework {mod}")
            if parts[0] != "netparity" or len(parts) < 2:
                continue
            dst = parts[1]
            if dst == src or dst in EXEMPT:
                continue
            if RANK.get(dst, -1) > RANK[src]:
                bad.append(f"{rel}:{line} ({src}, rank {RANK[src]}) imports {mod} "
                           f"(rank {RANK.get(dst)})")
    assert not bad, "\n".join(bad)


def test_sql_and_index_files_only_under_trace():
    """Only netparity.trace knows SQL and the index/shard file names (issue 15, item 1)."""
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if rel.parts[0] == "trace":
            continue
        text = path.read_text()
        for word in ("SELECT ", ".sqlite", "_query("):
            if word in text:
                bad.append(f"{rel}: {word.strip()}")
    assert not bad, bad
