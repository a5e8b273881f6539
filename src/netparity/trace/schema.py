"""The trace schema: what one record holds, and the SQLite layout of the index.

A trace is the contract between capture (any framework) and everything downstream. This module
is the single source of truth for its fields; readers and writers derive their SQL from
:data:`COLUMNS`.

Conventions (documented in README "Trace format"):

* ``kind``: ``module`` (a module/Cell call), ``op`` (one framework primitive, e.g. an aten op),
  ``param`` (a parameter's value after the optimizer step), ``grad`` (a parameter's gradient),
  ``loss`` (the loss the user handed over), ``custom`` (anything recorded by hand), ``data``
  (a batch from the data pipeline), ``timing`` (light timing, ``netparity.profile``: ``op`` is
  a phase of :data:`TIMING_PHASES` or ``module``, ``extra`` holds ``t`` (start, seconds since
  the run began), ``d`` (duration) and, for modules, ``self``; docs/perf.md).
* ``direction``: ``forward``, ``backward`` or ``update`` (optimizer step: its ops and the
  parameters after it).
* ``role``: ``input`` / ``output`` for calls. In the backward direction a module or op *takes* the
  gradient with respect to its outputs (role ``input``) and *produces* the gradient with respect
  to its inputs (role ``output``), so "inputs agree, outputs differ" means the same thing in both
  directions. ``param`` and ``grad`` for parameter records.
* ``arg``: argument position as a path: ``0``, ``1.2`` (nested sequence), ``kw.mask`` (keyword),
  ``0.hidden`` (dict key). Empty for single tensors.
* ``event``: identifies one call; every tensor of the same module or op call shares it, which is
  how inputs and outputs of the same call are paired.
* ``call``: for ``module`` records, how many times this module path was called before in this
  step and direction (0 for the first call); for ``op`` records, the index of this op among the
  ops run inside the enclosing module call (op order inside a module).
* ``module_call``: for ``op`` records, the call index of the enclosing module.
* ``op``: canonical op name (``conv2d``, ``batch_norm``, ``linear``, ``relu`` ...; see
  :mod:`netparity.trace.vocab`); ``native``: the framework's own name
  (``aten.convolution.default``, ``torch.nn.Conv2d``, ``Conv2D``).
* Statistics are ``None`` when not applicable (min of an empty tensor). ``fp16_overflow`` counts
  finite values whose magnitude exceeds float16's largest finite value (65504).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

from netparity.untrusted import ContentError, load_json, parse_shape

#: Bump when the index layout or record semantics change. Readers refuse newer versions and
#: read every older one (:data:`SCHEMA_HISTORY`).
SCHEMA_VERSION = 2
#: what each version added; the layout (columns, files) is the same in all of them
SCHEMA_HISTORY = {
    1: "records of kinds module, op, param, grad, loss, custom, data",
    2: "records of kind timing (step phases, module calls, gradient-ready times, all-reduce "
       "buckets: docs/perf.md); a version-1 reader would misread them as tensors",
}

KINDS = ("module", "op", "param", "grad", "loss", "custom", "data", "timing")
#: phases of a step in ``timing`` records (``step`` is the whole step; ``other`` the rest)
TIMING_PHASES = ("step", "data", "compile", "forward", "backward", "comm", "optimizer", "other")
DIRECTIONS = ("forward", "backward", "update")

#: what a timing record's ``extra`` holds (capture/timing.py writes it): keys with one number
#: (seconds, bytes), and keys with lists
_TIMING_NUMBERS = frozenset({"t", "d", "self", "bt", "bd", "bself", "mem", "mem_rise", "mem0"})
_TIMING_LISTS = {"seconds": "numbers", "params": "integers", "ready": "pairs"}
#: keys a record of these ops must hold (``bytes``: one number, except ``comm_probe``'s list)
_TIMING_REQUIRED = {"allreduce": ("t", "d")}


def _number(v: Any) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


def timing_extra(raw: str | None, op: str) -> dict[str, Any]:
    """A timing record's ``extra``, parsed and checked: an object whose known keys hold finite
    numbers (``t``, ``d``, ...; ``bytes`` a number or a list of numbers), lists of numbers
    (``seconds``), of integers (``params``) or of ``[integer, number]`` pairs (``ready``).

    Raises:
        ContentError: anything else (``perf`` used to end in a ``TypeError``).

    Example:
        >>> timing_extra('{"t": 0.5, "d": 0.25}', "forward")
        {'t': 0.5, 'd': 0.25}
        >>> timing_extra('{"t": "soon"}', "forward")
        Traceback (most recent call last):
        ...
        netparity.untrusted.ContentError: corrupt timing record (forward: 't' is not a finite number: 'soon')
    """
    what = f"corrupt timing record ({op:.40}"
    e = load_json(raw, what=what + ")") if raw else {}
    if not isinstance(e, dict):
        raise ContentError(f"{what}: extra is a {type(e).__name__}, not an object)")
    for k in _TIMING_REQUIRED.get(op, ()):
        if k not in e:
            raise ContentError(f"{what}: no {k!r})")
    for k, v in e.items():
        if k in _TIMING_NUMBERS or (k == "bytes" and op != "comm_probe"):
            ok, want = _number(v), "a finite number"
        elif k in _TIMING_LISTS or k == "bytes":
            kind = _TIMING_LISTS.get(k, "numbers")
            want = f"a list of {kind}"
            ok = isinstance(v, list) and all(
                (type(x) is int and x >= 0) if kind == "integers" else
                (isinstance(x, list) and len(x) == 2 and type(x[0]) is int and _number(x[1]))
                if kind == "pairs" else _number(x) for x in v)
        else:
            continue
        if not ok:
            raise ContentError(f"{what}: {k!r} is not {want}: {v!r:.40})")
    return e

ROLES = ("input", "output", "param", "grad")

#: Statistics computed for every captured floating/int/bool tensor, in this order.
STAT_FIELDS = (
    "min",
    "max",
    "mean",
    "std",
    "norm",
    "abs_sum",
    "nan",
    "posinf",
    "neginf",
    "zeros",
    "fp16_overflow",
)
COUNT_STATS = ("nan", "posinf", "neginf", "zeros", "fp16_overflow")
_FLOAT_STATS = tuple(i for i, k in enumerate(STAT_FIELDS) if k not in COUNT_STATS)


@dataclass
class Record:
    """One captured tensor (or scalar) with its context and statistics.

    Example:
        >>> r = Record(kind="loss", op="loss", dtype="float32", shape=(), step=0)
        >>> r.key()
        'loss|forward|||0|output|'
    """

    kind: str
    op: str = ""
    native: str = ""
    module: str = ""
    call: int = 0
    module_call: int = 0
    direction: str = "forward"
    role: str = "output"
    arg: str = ""
    dtype: str = ""
    shape: tuple[int, ...] = ()
    step: int = 0
    rank: int = 0
    seq: int = -1
    event: int = -1
    stats: dict[str, float | int | None] = field(default_factory=dict)
    shard: str | None = None
    offset: int | None = None
    nbytes: int | None = None
    hash: str | None = None
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= int(d)
        return n

    @property
    def has_payload(self) -> bool:
        return self.shard is not None

    def key(self) -> str:
        """A readable identity, unique within a step and rank for module/param/grad/loss records."""
        return "|".join(
            (
                self.kind,
                self.direction,
                self.module,
                self.op,
                str(self.call),
                self.role,
                self.arg,
            )
        )

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["shape"] = list(self.shape)
        return d


#: Index columns: (name, SQL type). ``stats`` expand into one column each; ``extra`` is JSON.
BASE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("seq", "INTEGER PRIMARY KEY"),
    ("step", "INTEGER NOT NULL"),
    ("rank", "INTEGER NOT NULL"),
    ("kind", "TEXT NOT NULL"),
    ("op", "TEXT NOT NULL"),
    ("native", "TEXT NOT NULL"),
    ("module", "TEXT NOT NULL"),
    ("call", "INTEGER NOT NULL"),
    ("module_call", "INTEGER NOT NULL"),
    ("direction", "TEXT NOT NULL"),
    ("role", "TEXT NOT NULL"),
    ("arg", "TEXT NOT NULL"),
    ("event", "INTEGER NOT NULL"),
    ("dtype", "TEXT NOT NULL"),
    ("shape", "TEXT NOT NULL"),
    ("numel", "INTEGER NOT NULL"),
)
STAT_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (f"s_{name}", "INTEGER" if name in COUNT_STATS else "REAL") for name in STAT_FIELDS
)
TAIL_COLUMNS: tuple[tuple[str, str], ...] = (
    ("shard", "TEXT"),
    ("offset", "INTEGER"),
    ("nbytes", "INTEGER"),
    ("hash", "TEXT"),
    ("source", "TEXT NOT NULL"),
    ("extra", "TEXT"),
)
COLUMNS = BASE_COLUMNS + STAT_COLUMNS + TAIL_COLUMNS
COLUMN_NAMES = tuple(c for c, _ in COLUMNS)

CREATE_SQL = (
    "CREATE TABLE IF NOT EXISTS records ("
    + ", ".join(f'"{c}" {t}' for c, t in COLUMNS)
    + ");\n"
    "CREATE INDEX IF NOT EXISTS idx_step ON records(step, direction, kind);\n"
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);\n"
    # a checksum of each stored payload (algorithm in meta, see trace/checksum.py), checked on
    # read. A table of its own, not a column of ``records``: traces written before it stay
    # readable as they are (not checked), older readers ignore it, so the schema version did
    # not change.
    "CREATE TABLE IF NOT EXISTS payload_checksum (seq INTEGER PRIMARY KEY, value INTEGER NOT NULL);\n"
)
INSERT_CHECKSUM_SQL = "INSERT INTO payload_checksum (seq, value) VALUES (?, ?)"
INSERT_SQL = (
    "INSERT INTO records ("
    + ", ".join(f'"{c}"' for c in COLUMN_NAMES)
    + ") VALUES ("
    + ", ".join("?" for _ in COLUMN_NAMES)
    + ")"
)


def record_to_row(r: Record) -> tuple[Any, ...]:
    # (runs once per record on the writer thread, holding the GIL the training thread also
    # wants: kept to plain tuple/list work -- json.dumps and a call per statistic cost twice as
    # much. Statistics are floats, ints or None; only the floats can be NaN.)
    stats = r.stats
    vals: list[Any] = [stats.get(name) for name in STAT_FIELDS]
    for i in _FLOAT_STATS:
        v = vals[i]
        if v != v:
            vals[i] = "nan"
    dims = [int(d) for d in r.shape]  # (a shape may hold NumPy ints, which sqlite3 refuses)
    return (
        r.seq,
        r.step,
        r.rank,
        r.kind,
        r.op,
        r.native,
        r.module,
        r.call,
        r.module_call,
        r.direction,
        r.role,
        r.arg,
        r.event,
        r.dtype,
        str(dims),  # the JSON text of the list: ints print alike
        math.prod(dims),
        *vals,
        r.shard,
        r.offset,
        r.nbytes,
        r.hash,
        r.source,
        json.dumps(r.extra) if r.extra else None,
    )


_NB = len(BASE_COLUMNS)
_NS = len(STAT_COLUMNS)


def _shape(text: str) -> tuple[int, ...]:
    """A shape column's JSON list, checked: non-negative integers only (a corrupt index row is
    a ``ValueError`` here, not a ``math domain error`` deep in a comparison)."""
    return parse_shape(text)


def row_to_record(row: tuple[Any, ...]) -> Record:
    stats: dict[str, float | int | None] = {}
    for name, v in zip(STAT_FIELDS, row[_NB : _NB + _NS]):
        if v == "nan":
            v = float("nan")
        stats[name] = v
    shard, offset, nbytes, hsh, source, extra = row[_NB + _NS :]
    return Record(
        seq=row[0],
        step=row[1],
        rank=row[2],
        kind=row[3],
        op=row[4],
        native=row[5],
        module=row[6],
        call=row[7],
        module_call=row[8],
        direction=row[9],
        role=row[10],
        arg=row[11],
        event=row[12],
        dtype=row[13],
        shape=_shape(row[14]),
        stats=stats,
        shard=shard,
        offset=offset,
        nbytes=nbytes,
        hash=hsh,
        source=source,
        extra=load_json(extra, what="extra") if extra else {},
    )
