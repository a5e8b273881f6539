"""MindSpore's graph-mode dump, turned on, run and imported by ``netparity run`` itself.

Graph-compiled MindSpore code (``GRAPH_MODE``, ``@ms.jit``, ``Model.train``, the
``TrainOneStepCell`` and optimizer graphs of a PyNative script) runs no Python hooks: MindSpore's
own synchronous dump is how it shows its kernels. ``netparity run -o OUT -- python train.py``
therefore, unless the user configured a dump already (``MINDSPORE_DUMP_CONFIG`` set) or asked for
``--profile`` (timing must not pay for a dump):

1. writes a dump configuration under ``OUT-msdump-raw/`` next to ``OUT`` (the capture refuses a
   trace folder holding anything else; every kernel's inputs and outputs as
   tensors; the iterations of ``--steps``, the first five when not given: a whole run's dump
   would fill the disk) and runs the command with
   ``MINDSPORE_DUMP_CONFIG`` naming it -- a PyTorch script never reads it. MindSpore refuses
   (and the script would fail on) a dump path with other characters than letters, digits,
   ``-``, ``_`` and ``/``: with such an ``OUT`` the dump goes to a folder of the system's temp
   directory, or, when that one is no better, is not turned on (one line says so);
2. when the command has ended, imports whatever MindSpore dumped into the trace ``OUT-graph``
   (:func:`netparity.frameworks.mindspore.dump.import_dump`: module path from each kernel's
   scope, forward / backward (``Gradients/``) / update (optimizer scope), parameters after each
   step; tensors stored with ``--payload tensors``, statistics otherwise), and removes the raw
   dump (the parameter names the zero-code bootstrap noted from the GRAPH_MODE Cells, in
   ``NETPARITY_MSDUMP_NAMES``, restore the ``.`` the dump writes as ``_``). One line says
   what was imported; a failed import is reported, never the run's exit
   status.

Example:
    >>> # netparity run -o runs/ms -- python train_graph_mode.py   -> runs/ms-graph (dump trace)
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from netparity.errors import NetparityError

ENV = "MINDSPORE_DUMP_CONFIG"
#: the file the zero-code bootstrap appends the GRAPH_MODE Cells' parameter names to
#: (:mod:`.zerocode`): the dump writes ``.`` in them as ``_``, the import maps them back
NAMES_ENV = "NETPARITY_MSDUMP_NAMES"
#: the imported dump trace: next to the run's output, its name with this suffix
GRAPH_TRACE = "-graph"


#: iterations dumped when ``--steps`` does not say: the dump writes every kernel's tensors to
#: disk while the script runs, and a whole training run would fill the disk
DEFAULT_ITERATIONS = "0-4"


def _iterations(steps: Any) -> str:
    """The dump's iteration selection for the capture's ``steps`` (``None``: the first five)."""
    if not steps:
        return DEFAULT_ITERATIONS
    return "|".join(str(int(s)) for s in sorted(steps))


def run_with_graph_dump(cmd: Sequence[str], out: str | os.PathLike[str],
                        options: Mapping[str, Any],
                        run: Callable[[Sequence[str], str | os.PathLike[str],
                                       Mapping[str, Any]], int]) -> int:
    """``run(cmd, out, options)`` with MindSpore's dump on, then its import (module docstring);
    returns the command's exit status."""
    if os.environ.get(ENV) or options.get("profile"):
        return run(cmd, out, options)
    from netparity.frameworks.mindspore.dump import write_dump_config

    work = _work_dir(Path(out))
    if work is None:
        print("netparity: MindSpore's graph dump not turned on: its path may hold only letters, "
              "digits, '-', '_' and '/'", file=sys.stderr)
        return run(cmd, out, options)
    shutil.rmtree(work, ignore_errors=True)
    data = work / "data"
    try:
        cfg = write_dump_config(work / "dump.json", data,
                                iteration=_iterations(options.get("steps")))
    except (OSError, NetparityError) as e:  # e.g. OUT's parent is read-only: run without it
        print(f"netparity: MindSpore's graph dump not turned on: {e}", file=sys.stderr)
        return run(cmd, out, options)
    names = work / "param_names.txt"
    os.environ[ENV] = str(cfg.resolve())
    os.environ[NAMES_ENV] = str(names.resolve())
    try:
        rc = run(cmd, out, options)
    finally:
        os.environ.pop(ENV, None)
        os.environ.pop(NAMES_ENV, None)
    try:
        line = _import(data, graph_trace(out), options, _names(names))
        if line:
            print(f"netparity: {line}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rc


def graph_trace(out: str | os.PathLike[str]) -> Path:
    """The trace the dump of a run into ``out`` is imported into: ``OUT-graph`` next to it."""
    o = Path(out).resolve()
    return o.parent / f"{o.name}{GRAPH_TRACE}"


def _work_dir(out: Path) -> Path | None:
    """Where the raw dump goes: ``OUT-msdump-raw`` when MindSpore accepts that path, else a
    new folder in the system's temp directory when it accepts that one, else ``None``."""
    ok = re.compile(r"[A-Za-z0-9_/-]+")
    work = out.resolve().parent / f"{out.resolve().name}-msdump-raw"
    if ok.fullmatch(str(work / "data")):
        return work
    tmp = Path(tempfile.mkdtemp(prefix="netparity_msdump_"))
    if ok.fullmatch(str(tmp / "data")):
        return tmp
    tmp.rmdir()
    return None


def _names(path: Path) -> list[str]:
    """The parameter names the zero-code bootstrap wrote (none when it wrote nothing)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return sorted({n for n in text.splitlines() if n})


def _import(data: Path, trace: Path, options: Mapping[str, Any],
            names: list[str] | None = None) -> str | None:
    """Import the dump in ``data`` into ``trace`` (``names``: the network's parameter names);
    the line to show (``None``: nothing dumped)."""
    if not data.is_dir() or not any(data.glob("rank_*")):
        return None
    from netparity.frameworks.mindspore.dump import import_dump

    try:
        counts = import_dump(data, trace, payload=options.get("payload") == "tensors",
                             overwrite=True, param_names=names or None,
                             manifest={"launcher": "netparity run (MindSpore graph dump)"})
    except NetparityError as e:
        return f"MindSpore's graph dump could not be imported: {e}"
    return (f"MindSpore's graph-compiled kernels: {counts['records']} tensors imported from its "
            f"dump into {trace}")
