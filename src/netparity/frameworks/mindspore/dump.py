"""Import MindSpore's own graph-mode dump into a netparity trace, and write its configuration.

MindSpore's synchronous ("e2e") dump is how graph-mode runs (``GRAPH_MODE``, ``Model.train``,
``@ms.jit``) expose every kernel's inputs and outputs. It is enabled by a JSON file named in the
``MINDSPORE_DUMP_CONFIG`` environment variable (read when MindSpore initialises: set it before the
network runs). Verified with MindSpore 2.10.0 on CPU, the layout is::

    {path}/rank_{id}/execution_order/ms_execution_order_graph_{g}.csv   full scope names, in order
    {path}/rank_{id}/{net_name}/{graph_id}/{iteration}/
        {op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}.{input|output}.{index}.{format}.{dtype}.npy
        Parameter.{param_name}.{task}.{stream}.{timestamp}.output.0.{format}.{dtype}.npy

where ``op_name`` is the full scope name with ``/`` replaced by ``_``
(``Default_network-WithLossCell__backbone-Net_conv1-Conv2d_Conv2D-op0``). The importer maps it back
through the execution-order CSV (underscores inside Cell names make the file name ambiguous on its
own) and derives:

* ``module``: the Cell attribute names of the scope after the training wrappers
  (``Default/network-WithLossCell/_backbone-Net/conv1-Conv2d/Conv2D-op0`` -> ``conv1``);
* ``direction``: ``backward`` under ``Gradients/``, ``update`` under the optimizer scope,
  ``forward`` otherwise;
* ``step``: the iteration directory; ``call``: the op's index in its Cell in execution order;
* ``kind="param"`` records from the ``Parameter.*`` files (values after the step's update; the
  dump writes ``.`` in parameter names as ``_``, pass ``param_names`` to restore them).

Example:
    >>> import tempfile, os
    >>> cfg = write_dump_config(os.path.join(tempfile.mkdtemp(), "dump.json"), "/tmp/msdump")
    >>> cfg.name
    'dump.json'
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from netparity import inputs
from netparity.capture.notes import write_notes
from netparity.dtypes import encode_bf16
from netparity.errors import TraceError, UsageError
from netparity.frameworks.mindspore.dumpderive import UPDATE_KERNELS, Derived, derive
from netparity.hoststats import host_stats
from netparity.outputs import write_text_atomic
from netparity.trace.schema import Record
from netparity.trace.vocab import canonical_op
from netparity.trace.writer import TraceWriter

#: dtype tag in dump file names -> canonical netparity dtype
_DTYPE_TAGS = {
    "Float64": "float64", "Float32": "float32", "Float16": "float16", "BFloat16": "bfloat16",
    "Int64": "int64", "Int32": "int32", "Int16": "int16", "Int8": "int8", "UInt64": "uint64",
    "UInt32": "uint32", "UInt16": "uint16", "UInt8": "uint8", "Bool": "bool",
    "Complex64": "complex64", "Complex128": "complex128",
}
_TAIL = re.compile(
    r"^(?P<name>.+)\.(?P<task>\d+)\.(?P<stream>\d+)\.(?P<ts>\d+)\."
    r"(?P<io>input|output)\.(?P<idx>\d+)\.(?P<fmt>[A-Za-z0-9_]+)(?:\.(?P<dtype>[A-Za-z0-9]+))?\.npy$"
)
#: scope components of MindSpore's training wrappers, skipped when deriving module paths
DEFAULT_WRAPPERS = ("network", "_backbone", "_network", "backbone")


def write_dump_config(
    path: str | os.PathLike[str],
    dump_dir: str | os.PathLike[str],
    *,
    net_name: str = "Net",
    iteration: str = "all",
    saved_data: str = "tensor",
    input_output: int = 0,
    kernels: Iterable[str] = (),
    support_device: Iterable[int] = range(8),
    trans_flag: bool = True,
) -> Path:
    """Write a MindSpore (graph-mode, synchronous) dump configuration file.

    Enable it with ``MINDSPORE_DUMP_CONFIG=<path>`` before MindSpore initialises.

    Args:
        path: the JSON file to write.
        dump_dir: where MindSpore writes the dump (made absolute: MindSpore requires it).
        net_name: the directory name under ``rank_{id}``.
        iteration: ``"all"`` or e.g. ``"0|5-8"``.
        saved_data: ``tensor`` (needed by :func:`import_dump`), ``statistic`` or ``full``.
        input_output: 0 inputs and outputs, 1 inputs only, 2 outputs only.
        kernels: restrict to these full-scope op names (empty: all).
        support_device: device ids that dump.
        trans_flag: convert device formats to the host format.

    Returns:
        The path written.

    Example:
        >>> import tempfile, json, os
        >>> p = write_dump_config(os.path.join(tempfile.mkdtemp(), "d.json"), "dumps", iteration="0|1")
        >>> json.loads(p.read_text())["common_dump_settings"]["iteration"]
        '0|1'
    """
    if saved_data not in ("tensor", "statistic", "full"):
        raise UsageError(f"saved_data must be tensor, statistic or full, not {saved_data!r}")
    if input_output not in (0, 1, 2):
        raise UsageError("input_output must be 0 (both), 1 (inputs) or 2 (outputs)")
    if not re.fullmatch(r"all|\d+(-\d+)?(\|\d+(-\d+)?)*", iteration):
        raise UsageError(f"bad iteration spec {iteration!r} (use all or e.g. 0|5-8)")
    cfg = {
        "common_dump_settings": {
            "op_debug_mode": 0,
            "dump_mode": 1 if list(kernels) else 0,
            "path": str(Path(dump_dir).resolve()),
            "net_name": net_name,
            "iteration": iteration,
            "saved_data": saved_data,
            "input_output": input_output,
            "kernels": list(kernels),
            "support_device": list(support_device),
        },
        "e2e_dump_settings": {"enable": True, "trans_flag": trans_flag},
    }
    out = Path(path)
    # atomic, never through a symlink nor into a FIFO or device (netparity.outputs)
    write_text_atomic(out, json.dumps(cfg, indent=2) + "\n", what="dump configuration")
    return out


@dataclass
class DumpFile:
    """One parsed dump file name."""

    path: Path
    op_type: str
    op_name: str  # as in the file name ("/" written as "_")
    io: str
    index: int
    fmt: str
    dtype_tag: str
    timestamp: int


def parse_dump_name(path: Path) -> DumpFile | None:
    """Parse ``{op_type}.{op_name}.{task}.{stream}.{ts}.{io}.{idx}.{fmt}[.{dtype}].npy``."""
    m = _TAIL.match(path.name)
    if not m:
        return None
    head = m.group("name")
    if "." not in head:
        return None
    op_type, op_name = head.split(".", 1)
    return DumpFile(path, op_type, op_name, m.group("io"), int(m.group("idx")), m.group("fmt"),
                    m.group("dtype") or "", int(m.group("ts")))


def scope_module(scope: str, wrappers: Iterable[str] = DEFAULT_WRAPPERS) -> tuple[str, str]:
    """(module path, direction) of a full scope name.

    Example:
        >>> scope_module("Default/network-WithLossCell/_backbone-Net/conv1-Conv2d/Conv2D-op1")
        ('conv1', 'forward')
        >>> scope_module("Gradients/Default/network-WithLossCell/_backbone-Net/fc-Dense/Grad_MatMul/MatMul-op1")
        ('fc', 'backward')
    """
    parts = scope.split("/")
    direction = "forward"
    if parts and parts[0] == "Gradients":
        direction = "backward"
        parts = parts[1:]
    if parts and parts[0] in ("Default", "recompute_Default"):
        parts = parts[1:]
    parts = parts[:-1]  # the op itself
    wrappers = tuple(wrappers)
    names: list[str] = []
    for comp in parts:
        if "-" not in comp:  # "Grad_MatMul" and similar autodiff scopes
            continue
        attr = comp.split("-", 1)[0]
        if attr == "optimizer" and not names:
            direction = "update"
        if not names and attr in wrappers:
            continue
        names.append(attr)
    if direction == "update":
        names = names[1:]
    return ".".join(names), direction


def _load_order(rank_dir: Path) -> tuple[dict[str, str], dict[str, int]]:
    """File-name form -> full scope name, and full scope name -> execution position."""
    names: dict[str, str] = {}
    order: dict[str, int] = {}
    eo = rank_dir / "execution_order"
    files = sorted(eo.glob("ms_execution_order_graph_*.csv")) if eo.is_dir() else []
    pos = 0
    for f in files:
        text = inputs.read_text(f, within=rank_dir, error=TraceError, what="execution order",
                                tree="the dump folder")
        for row in csv.reader(io.StringIO(text, newline="")):
                if not row or row[0].startswith("NodeExecutionOrder"):
                    continue
                full = row[0].strip()
                names.setdefault(full.replace("/", "_"), full)
                order.setdefault(full, pos)
                pos += 1
    return names, order


def _guess_scope(op_name: str) -> str:
    """Without the execution order: split on "_" before components that look like "x-Class"."""
    # components "attr-Class" are separated by "_"; an attribute name may itself start with "_"
    prefix = ""
    for head in ("Gradients_", "recompute_Default_", "Default_"):
        if op_name.startswith(head):
            prefix += head[:-1] + "/"
            op_name = op_name[len(head):]
            if head != "Gradients_":
                break
    comps = re.split(r"(?<!_)_(?=_?[A-Za-z0-9]+-[A-Z])|(?<!_)_(?=[A-Za-z0-9]+-op\d+$)"
                     r"|(?<!_)_(?=Grad_)", op_name)
    return prefix + "/".join(comps)


def _read(path: Path, tag: str, root: Path) -> tuple[np.ndarray, str]:
    """Load one dump .npy as (storage array, canonical dtype); it must lie in the dump folder
    ``root`` and hold what its header declares (:func:`netparity.inputs.load_npy`)."""
    arr = inputs.load_npy(path, within=root, error=TraceError, what="dump file",
                          tree="the dump folder")
    name = _DTYPE_TAGS.get(tag)
    if name == "bfloat16":
        if arr.dtype.itemsize == 2 and arr.dtype.kind in "uV":
            return arr.view(np.uint16), name
        return encode_bf16(arr.astype(np.float32)), name
    if name is None or np.dtype(arr.dtype).kind == "V":
        if arr.dtype.kind == "V":
            raise TraceError(f"unsupported dtype {tag or arr.dtype} in {path.name}")
        name = "bool" if arr.dtype == np.bool_ else str(arr.dtype)
    return arr, name


def _write_derived(w: TraceWriter, derived: Derived, step: int, rank: int, root: Path,
                   payload: bool, pmap: dict[str, str]) -> int:
    """Write step ``step``'s gradients by parameter name and its loss (:mod:`.dumpderive`);
    the number of records written."""
    todo = [(Record(kind="grad", op="grad", module=pmap.get(name, name), direction="backward",
                    role="grad", source="mindspore-dump"), df)
            for name, df in derived.grads.get(step, [])]
    if step in derived.loss:
        todo.append((Record(kind="loss", op="loss", source="mindspore-dump"),
                     derived.loss[step]))
    for rec, df in todo:
        arr, dtype = _read(df.path, df.dtype_tag, root)
        rec.step, rec.rank, rec.event, rec.dtype = step, rank, w.next_event(), dtype
        rec.shape = tuple(int(d) for d in arr.shape)
        rec.stats = host_stats(arr, dtype)
        w.add(rec, arr if payload else None, nbytes=arr.nbytes, store=payload)
    return len(todo)


def import_dump(
    dump_dir: str | os.PathLike[str],
    out_trace: str | os.PathLike[str],
    *,
    payload: bool = True,
    wrappers: Iterable[str] = DEFAULT_WRAPPERS,
    param_names: Iterable[str] | None = None,
    overwrite: bool = False,
    manifest: dict[str, Any] | None = None,
) -> dict[str, int]:
    """Convert a MindSpore dump directory into a netparity trace (one trace rank per dump rank).

    Args:
        dump_dir: the dump ``path`` of the configuration (holding ``rank_*``), or one ``rank_*``.
        out_trace: trace directory to write.
        payload: store the tensors too (statistics are always computed).
        wrappers: scope attribute names of training wrappers to drop from module paths.
        param_names: the network's parameter names, to map ``fc_bias`` back to ``fc.bias``.
        overwrite: replace an existing trace.
        manifest: extra manifest facts.

    Returns:
        Counts: ``{"records": n, "files": n, "skipped": n, "ranks": n}``.

    Example:
        >>> # MINDSPORE_DUMP_CONFIG=dump.json python train.py; then:
        >>> # import_dump("/tmp/msdump", "runs/ms_graph")
    """
    root = Path(dump_dir)
    if not root.is_dir():
        raise TraceError(f"{root} is not a directory")
    rank_dirs = sorted(p for p in root.glob("rank_*") if p.is_dir())
    if not rank_dirs and root.name.startswith("rank_"):
        rank_dirs = [root]
    if not rank_dirs:
        raise TraceError(f"{root} holds no MindSpore dump (no rank_* directory)")
    pmap = {n.replace(".", "_"): n for n in param_names or ()}
    counts = {"records": 0, "files": 0, "skipped": 0, "ranks": 0}
    for rdir in rank_dirs:
        try:
            rank = int(rdir.name.split("_", 1)[1])
        except ValueError:
            continue
        names, order = _load_order(rdir)
        # (step, position, timestamp, file)
        entries: list[tuple[int, float, int, str, DumpFile]] = []
        net_dirs = [d for d in rdir.iterdir() if d.is_dir() and d.name != "execution_order"]
        net_names = []
        for net in net_dirs:
            net_names.append(net.name)
            for gdir in (g for g in net.iterdir() if g.is_dir() and g.name.isdigit()):
                for idir in (i for i in gdir.iterdir() if i.is_dir() and i.name.isdigit()):
                    step = int(idir.name)
                    for f in idir.glob("*.npy"):
                        df = parse_dump_name(f)
                        if df is None:
                            counts["skipped"] += 1
                            continue
                        full = names.get(df.op_name) or _guess_scope(df.op_name)
                        pos = order.get(full, float("inf")) if df.op_type != "Parameter" else 1e18
                        entries.append((step, pos, df.timestamp, full, df))
        if not entries:
            continue
        entries.sort(key=lambda e: (e[0], e[1], e[2], e[4].io != "input", e[4].index))
        facts: dict[str, Any] = {"framework": "mindspore", "source": "mindspore-dump",
                                 "dump_dir": str(root.resolve()), "net_names": net_names,
                                 "execution_mode": "GRAPH"}
        facts.update(manifest or {})
        counts["ranks"] += 1
        derived = derive([(e[0], e[3], e[4]) for e in entries],
                         lambda df: _read(df.path, df.dtype_tag, root)[0])
        with TraceWriter(out_trace, rank=rank, manifest=facts, overwrite=overwrite) as w:
            events: dict[tuple[int, str], int] = {}
            op_index: dict[tuple[int, str, str], int] = {}
            for n, (step, _pos, _ts, full, df) in enumerate(entries):
                if n and entries[n - 1][0] != step:
                    counts["records"] += _write_derived(w, derived, entries[n - 1][0], rank,
                                                        root, payload, pmap)
                arr, dtype = _read(df.path, df.dtype_tag, root)
                counts["files"] += 1
                key = (step, full)
                if key not in events:
                    events[key] = w.next_event()
                if df.op_type == "Parameter":
                    name = pmap.get(df.op_name, df.op_name)
                    kind = derived.kinds.get(df.op_name, "param")
                    rec = Record(kind=kind, op={"param": "param", "data": "data"}.get(
                                     kind, "optimizer_state"), native="Parameter",
                                 module=name, direction="update", role="param")
                else:
                    module, direction = scope_module(full, wrappers)
                    if df.op_type in UPDATE_KERNELS or full in derived.update_scopes:
                        # an optimizer's, whatever its scope
                        direction = "update"
                    mk = (step, direction, module)
                    if (step, full, "call") not in op_index:
                        op_index[(step, full, "call")] = op_index.get(mk, 0)
                        op_index[mk] = op_index.get(mk, 0) + 1
                    extra = {"scope": full, "format": df.fmt}
                    grad_of = [c for c in full.split("/")[:-1] if c.startswith("Grad_")]
                    if direction == "backward" and grad_of:  # the forward op it derives
                        extra["node"] = grad_of[-1]
                    rec = Record(kind="op", op=canonical_op("mindspore", df.op_type),
                                 native=df.op_type, module=module,
                                 call=op_index[(step, full, "call")], direction=direction,
                                 role=df.io, arg=str(df.index), extra=extra)
                rec.step = step
                rec.rank = rank
                rec.event = events[key]
                rec.dtype = dtype
                rec.shape = tuple(int(d) for d in arr.shape)
                rec.stats = host_stats(arr, dtype)
                w.add(rec, arr if payload else None, nbytes=arr.nbytes, store=payload)
                counts["records"] += 1
            counts["records"] += _write_derived(w, derived, entries[-1][0], rank, root,
                                                payload, pmap)
        if derived.notes:
            for sec in ("frozen", "not_in_optimizer"):
                derived.notes[sec] = [pmap.get(n, n) for n in derived.notes[sec]]
            write_notes(Path(out_trace) / f"rank{rank}", {"optimizers": derived.notes})
    if counts["ranks"] == 0:
        raise TraceError(f"{root} holds no dump .npy files (was saved_data 'statistic'?)")
    return counts
