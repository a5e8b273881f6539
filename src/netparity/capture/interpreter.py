"""The interpreter a zero-code run launches: netparity's own, never another ``python`` on PATH.

``netparity run -- python train.py`` (and ``scan --run``, which goes through it) is often
started as ``.venv/bin/netparity`` with no virtual environment activated: a bare ``python`` on
``PATH`` is then another interpreter (the system's, without torch), and so are the ``python``
processes a launcher starts by name (``msrun`` runs ``python SCRIPT`` for each worker; a shell
script may too). The child's ``PATH`` therefore starts with

1. a temporary directory of ``python``, ``python3`` and ``python3.X`` shims that ``exec``
   :data:`sys.executable` (a shim, not a symlink: a symlinked venv interpreter would lose its
   venv), and
2. the directory of :data:`sys.executable` (the venv's ``bin``: ``torchrun``, ``msrun``).

A command given by path (``/usr/bin/python3 x.py``) is run as given.

Example:
    >>> import os
    >>> with own_interpreter({"PATH": "/usr/bin"}) as env:
    ...     shim = env["PATH"].split(os.pathsep)[0]
    ...     sorted(os.listdir(shim))[:2]
    ['python', 'python3']
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path


def shim_names() -> tuple[str, ...]:
    """The interpreter names a command may use: ``python``, ``python3``, ``python3.X``."""
    v = sys.version_info
    return ("python", f"python{v.major}", f"python{v.major}.{v.minor}")


@contextlib.contextmanager
def own_interpreter(env: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """``env`` with ``PATH`` leading to :data:`sys.executable` for every interpreter name
    (module docstring); the shim directory is removed on exit."""
    shim = tempfile.mkdtemp(prefix="netparity-python-")
    try:
        exe = shlex.quote(sys.executable)
        for name in shim_names():
            p = Path(shim) / name
            p.write_text(f'#!/bin/sh\nexec {exe} "$@"\n')
            p.chmod(0o755)
        out = dict(env)
        parts = [shim, str(Path(sys.executable).parent)]
        if out.get("PATH"):
            parts.append(out["PATH"])
        out["PATH"] = os.pathsep.join(parts)
        yield out
    finally:
        shutil.rmtree(shim, ignore_errors=True)
