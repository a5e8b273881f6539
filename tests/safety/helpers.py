"""Shared by the safety tests: running the CLI, snapshotting directories, a small tmpfs."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")


def run_cli(*argv: str, cwd: str | os.PathLike[str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m netparity ARGV`` in a child process (exit status and stderr as a user sees
    them)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "netparity", *argv], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd, env=env)


def assert_one_line_error(p: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2 with exactly one ``netparity: error:`` line, no traceback, naming ``needles``."""
    # (MindSpore's own logger reports a failed save on stderr as "[CRITICAL] ME(pid...)"
    # before our line; it is MindSpore talking, not a second netparity message)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip() and " ME(" not in ln[:20]]
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("netparity: error: "), p.stderr[-2000:]
    for n in needles:
        assert n in lines[0], (n, lines[0])


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` (names and contents' digests), to prove nothing changed."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
        elif not p.is_dir() or p.is_symlink():
            out[str(p.relative_to(root))] = "special"
    return out


@contextmanager
def small_tmpfs(size: str = "1m") -> Iterator[Path]:
    """A tmpfs of ``size`` (a full disk on demand); skips the test where mounting is not
    allowed (not root, or a sandbox without CAP_SYS_ADMIN)."""
    d = Path(tempfile.gettempdir()) / f"netparity-tmpfs-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        d.rmdir()
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or 'mount failed'})")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)
        d.rmdir()
