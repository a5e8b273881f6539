"""Argument groups and small helpers shared by subcommands (Polygraphy-style)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any


def add_json_out(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", metavar="FILE", help="also write the result as JSON ('-' = stdout)")


def write_json(obj: Any, dest: str) -> None:
    """Write JSON to a file atomically (never leaves a half-written file) or to stdout."""
    text = json.dumps(obj, indent=2, default=str)
    if dest == "-":
        print(text)
        return
    path = Path(dest)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def fmt_num(v: Any, digits: int = 4) -> str:
    if v is None:
        return "-"
    if isinstance(v, int):
        return str(v)
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    if f != f:
        return "nan"
    if f == 0:
        return "0"
    if abs(f) >= 1e4 or abs(f) < 1e-3:
        return f"{f:.{digits - 1}e}"
    return f"{f:.{digits}g}"


def fmt_bytes(n: int) -> str:
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if x < 1024 or unit == "GiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return f"{x:.1f} TiB"


def console() -> Any:
    """A rich console that stays readable when piped (fixed 120 columns instead of 80)."""
    import sys

    from rich.console import Console

    # A terminal reports its own width; piped output (CI logs, files) gets a fixed, readable 120
    # columns rather than whatever COLUMNS the parent process happened to export.
    width = None if sys.stdout.isatty() else max(120, int(os.environ.get("NETPARITY_COLUMNS", "120")))
    return Console(highlight=False, width=width, soft_wrap=False)
