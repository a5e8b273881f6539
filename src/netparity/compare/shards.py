"""Tensor-parallel runs against unsharded ones: merge a sharded trace's ranks into one rank.

In a tensor-parallel run every rank holds a shard of some modules' weights and activations. A
**layout** says, per module path glob, how (Megatron's convention; msprobe's graph comparison
merges "different sharding strategies" the same way)::

    attn.[qkv]: {parallel: column, dim: -1}   # Linear splitting its output features
    attn.proj:  {parallel: row, dim: -1}      # Linear splitting its input features, output
                                              # all-reduced inside the module
    mlp.act:    split                         # elementwise on a sharded activation

What each kind of record becomes in the merged (virtual) rank, ``dim`` being the activation
dim (default -1) and ``weight_dim`` the weight's (default 0 for column, 1 for row):

============  ==================  ==================  ==================  ==================
parallel      forward inputs      forward outputs     grad of outputs     grad of inputs
============  ==================  ==================  ==================  ==================
``column``    one copy (rank 0)   concatenated        concatenated        summed (partials)
``row``       concatenated        one copy [#]_       one copy            concatenated
``split``     concatenated        concatenated        concatenated        concatenated
(no entry)    one copy            one copy            one copy            one copy
============  ==================  ==================  ==================  ==================

.. [#] summed with ``reduced: false`` (a row-parallel module whose all-reduce comes after it).

Parameters and their gradients: ``column`` concatenates every parameter along ``weight_dim``
(0: output features); ``row`` concatenates parameters of two or more dims along
``weight_dim`` (1: input features) and keeps one copy of the rest (the bias, added after the
all-reduce); ``split`` concatenates along 0. Losses, data and every module without an entry
are replicated: one copy (rank 0's). Records pair across ranks by identity (step, kind,
direction, module, call, role, argument).

The merged rank is written as an ordinary one-rank trace (a temporary directory), so the
comparison that follows is the usual one. Only module-level records are merged (op records
inside a sharded module split in ways no layout names): ``--level module``.

Example:
    >>> lay = parse_layout({"mlp.fc1": "column", "mlp.fc2": {"parallel": "row"}})
    >>> lay.spec("mlp.fc1").parallel, lay.spec("mlp.fc2").weight_dim, lay.spec("mlp") is None
    ('column', 1, True)
"""

from __future__ import annotations

import contextlib
import fnmatch
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from netparity import inputs
from netparity.dtypes import encode_bf16, storage_dtype
from netparity.errors import UsageError
from netparity.stats import compute_stats
from netparity.trace.reader import Trace, open_trace
from netparity.trace.schema import COUNT_STATS, Record
from netparity.untrusted import load_json

PARALLEL = ("column", "row", "split")
#: where a trace records the layout its capture was given (``netparity.shard_layout``)
MANIFEST_KEY = "shard_layout"
_MAX_LAYOUT = 16 << 20
_KEYS = frozenset({"parallel", "dim", "weight_dim", "reduced"})
_MERGED_KINDS = ("module", "param", "grad", "loss", "data", "custom")


@dataclass(frozen=True)
class ShardSpec:
    """How one module is sharded (see the module docstring)."""

    parallel: str
    dim: int = -1
    weight_dim: int = 0
    reduced: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"parallel": self.parallel, "dim": self.dim, "weight_dim": self.weight_dim,
                "reduced": self.reduced}


@dataclass
class Layout:
    """Module path globs and their :class:`ShardSpec`, first match wins."""

    entries: list[tuple[str, ShardSpec]] = field(default_factory=list)
    source: str = "<dict>"

    def spec(self, module: str) -> ShardSpec | None:
        for pat, s in self.entries:
            if fnmatch.fnmatchcase(module, pat):
                return s
        return None

    def to_json(self) -> dict[str, Any]:
        return {pat: s.to_json() for pat, s in self.entries}


def _int(v: Any, what: str) -> int:
    if type(v) is not int:
        raise UsageError(f"{what} must be an integer, not {v!r:.40}")
    return v


def parse_layout(data: Any, source: str = "<dict>") -> Layout:
    """Validate a layout given as ``{glob: "column" | "row" | "split" | {parallel, dim,
    weight_dim, reduced}}``.

    Raises:
        UsageError: one line naming the bad entry.
    """
    if not isinstance(data, dict) or not data:
        raise UsageError(f"{source}: a shard layout must be a non-empty object "
                         "{module glob: {parallel: column|row|split, dim: k}}")
    out = Layout(source=source)
    for pat, raw in data.items():
        what = f"{source}: layout entry {pat!r:.60}"
        if not isinstance(pat, str) or not pat:
            raise UsageError(f"{what}: the key must be a module path glob")
        spec = {"parallel": raw} if isinstance(raw, str) else raw
        if not isinstance(spec, dict):
            raise UsageError(f"{what}: must be 'column', 'row', 'split' or an object")
        extra = set(spec) - _KEYS
        if extra:
            raise UsageError(f"{what}: unknown key(s) {', '.join(sorted(map(str, extra)))} "
                             f"(known: {', '.join(sorted(_KEYS))})")
        par = spec.get("parallel")
        if par not in PARALLEL:
            raise UsageError(f"{what}: parallel must be one of {', '.join(PARALLEL)}, "
                             f"not {par!r:.40}")
        reduced = spec.get("reduced", True)
        if type(reduced) is not bool:
            raise UsageError(f"{what}: reduced must be true or false")
        out.entries.append((pat, ShardSpec(
            par, _int(spec.get("dim", -1), f"{what}: dim"),
            _int(spec.get("weight_dim", 1 if par == "row" else 0), f"{what}: weight_dim"),
            reduced)))
    return out


def load_layout(path: str | os.PathLike[str]) -> Layout:
    """Read a YAML or JSON layout file (:func:`parse_layout`)."""
    p = Path(path)
    text = inputs.read_text(p, error=UsageError, what="shard layout", limit=_MAX_LAYOUT)
    try:
        if p.suffix.lower() == ".json":
            data = load_json(text, what="shard layout")
        else:
            import yaml

            data = yaml.safe_load(text)
    except (ValueError, RecursionError) as e:
        raise UsageError(f"{p}: not a valid layout file ({str(e).splitlines()[0]:.120})") from None
    except Exception as e:  # yaml.YAMLError (imported lazily)
        line = str(e).replace("\n", " ")
        raise UsageError(f"{p}: not valid YAML ({line:.120})") from None
    return parse_layout(data, source=str(p))


def recorded_layout(trace: Trace) -> Layout | None:
    """The layout a capture recorded in the trace's manifest (:func:`netparity.shard_layout`)."""
    data = trace.manifest.get(MANIFEST_KEY)
    if data is None:
        return None
    return parse_layout(data, source=f"{trace.path}/manifest.json {MANIFEST_KEY}")


def shard_layout(model: Any, layout: dict[str, Any]) -> Any:
    """Tell the captures of ``model`` how it is sharded: the layout is stored in the trace's
    manifest, and ``netparity compare`` merges the ranks by it (no ``--shards`` needed).

    Every glob must match a submodule of ``model`` (PyTorch ``named_modules``, MindSpore
    ``cells_and_names``). Returns ``model``.

    Raises:
        UsageError: a malformed layout or a glob that names no submodule.

    Example:
        >>> import torch, netparity
        >>> m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 4))
        >>> _ = netparity.shard_layout(m, {"0": "column", "1": "row"})
        >>> m._netparity_shard_layout["1"]["weight_dim"]
        1
    """
    from netparity.frameworks.registry import adapter_for

    lay = parse_layout(layout, source="shard_layout")
    names = [n for n, _ in adapter_for(model).named_modules(model)]
    _check_globs(lay, names, "the model")
    object.__setattr__(model, "_netparity_shard_layout", lay.to_json())
    return model


def _check_globs(lay: Layout, names: list[str], where: str) -> None:
    for pat, _ in lay.entries:
        if not any(fnmatch.fnmatchcase(n, pat) for n in names):
            shown = ", ".join(n for n in names[:8] if n) + (", ..." if len(names) > 8 else "")
            raise UsageError(f"{lay.source}: layout entry {pat!r:.60} matches no module of "
                             f"{where} (modules: {shown})")


# ---- merging -------------------------------------------------------------------------------
def _rule(lay: Layout, rec: Record) -> tuple[str, int]:
    """``("one"|"cat"|"sum", dim)`` for one record (the table of the module docstring)."""
    if rec.kind == "module":
        s = lay.spec(rec.module)
        if s is None:
            return "one", 0
        fwd, inp = rec.direction == "forward", rec.role == "input"
        if s.parallel == "split":
            return "cat", s.dim
        if s.parallel == "column":
            # forward input: replicated; backward output (grad of the input): partial sums
            if fwd and inp:
                return "one", 0
            return ("cat", s.dim) if fwd or inp else ("sum", 0)
        # row: forward output / grad of it: all-reduced (one copy) or partial (summed)
        if fwd != inp:
            return ("one", 0) if s.reduced else ("sum", 0)
        return "cat", s.dim
    if _is_param(rec):
        owner, _, _ = rec.module.rpartition(".")
        s = lay.spec(owner)
        if s is None:
            return "one", 0
        if s.parallel == "row" and len(rec.shape) < 2:
            return "one", 0
        return "cat", (0 if s.parallel == "split" else s.weight_dim)
    return "one", 0


def _is_param(r: Record) -> bool:
    """A parameter, its gradient, or its gradient as the optimizer saw it (``grad_synced``:
    after a data-parallel all-reduce)."""
    return r.kind in ("param", "grad") or (r.kind == "custom" and r.op == "grad_synced")


def _ident(r: Record) -> tuple[Any, ...]:
    return (r.step, r.kind, r.direction, r.module, r.op, r.call, r.role, r.arg)


def _name(r: Record) -> str:
    what = {"param": "parameter", "grad": "gradient", "custom": "synced gradient"}.get(r.kind)
    if what and not _is_param(r):
        what = None
    if what:
        return f"{what} {r.module} (step {r.step})"
    role = r.role + (f" {r.arg}" if r.arg else "")
    return f"{r.module or r.op} {r.direction} {role} (step {r.step}, call {r.call})"


def _merge_stats(parts: list[Record]) -> dict[str, float | int | None]:
    """Statistics of the concatenation of ``parts``, from theirs (no payloads)."""
    out: dict[str, float | int | None] = {k: sum(int(p.stats.get(k) or 0) for p in parts)
                                          for k in COUNT_STATS}
    # (finite count, mean, std, min, max) of each part holding finite values
    fin: list[tuple[int, float, float, float, float]] = []
    for p in parts:
        s = p.stats
        c = p.numel - sum(int(s.get(k) or 0) for k in ("nan", "posinf", "neginf"))
        if c > 0 and s.get("mean") is not None:
            fin.append((c, float(s["mean"] or 0.0), float(s.get("std") or 0.0),
                        float(s.get("min") or 0.0), float(s.get("max") or 0.0)))
    n = sum(f[0] for f in fin)
    if not n:
        return out | {"min": None, "max": None, "mean": None, "std": None, "norm": 0.0,
                      "abs_sum": 0.0}
    mean = sum(c * m for c, m, _, _, _ in fin) / n
    sq = sum(c * (sd * sd + m * m) for c, m, sd, _, _ in fin) / n
    out.update(
        min=min(f[3] for f in fin), max=max(f[4] for f in fin),
        mean=mean, std=math.sqrt(max(0.0, sq - mean * mean)),
        norm=math.sqrt(sum(float(p.stats.get("norm") or 0.0) ** 2 for p in parts)),
        abs_sum=sum(float(p.stats.get("abs_sum") or 0.0) for p in parts))
    return out


def _sum_payloads(trs: list[Trace], parts: list[Record]) -> np.ndarray:
    dt = parts[0].dtype
    if dt == "bfloat16":
        return encode_bf16(sum(np.asarray(t.tensor(p), np.float32)  # type: ignore[arg-type]
                               for t, p in zip(trs, parts)))
    if storage_dtype(dt) != np.asarray(trs[0].tensor(parts[0])).dtype:
        raise UsageError(f"{_name(parts[0])}: cannot sum partial {dt} tensors")
    total = np.array(trs[0].tensor(parts[0]), copy=True)
    for t, p in zip(trs[1:], parts[1:]):
        total += t.tensor(p)
    return total


@dataclass
class Merged:
    """What :func:`merge_shards` did: the one-rank trace and its story."""

    trace: Trace
    source: Path
    ranks: list[int]
    layout: Layout
    #: records merged per rule
    counts: dict[str, int] = field(default_factory=dict)
    #: replicated records whose ranks disagree (first few), and how many in all
    disagree: list[str] = field(default_factory=list)
    n_disagree: int = 0
    #: records judged from merged statistics only, or left out (summed without payloads)
    dropped: list[str] = field(default_factory=list)

    def note(self) -> str:
        c = self.counts
        s = (f"{self.source}: ranks {', '.join(map(str, self.ranks))} merged into one by the "
             f"shard layout ({self.layout.source}): {c.get('cat', 0)} tensors concatenated, "
             f"{c.get('sum', 0)} summed, {c.get('one', 0)} replicated")
        if self.n_disagree:
            s += (f"; {self.n_disagree} replicated tensor(s) differ between ranks (rank 0's "
                  f"compared), first: {self.disagree[0]}")
        if self.dropped:
            s += (f"; {len(self.dropped)} partial sum(s) without payloads left out, first: "
                  f"{self.dropped[0]}")
        return s


def merge_shards(trace: Trace, layout: Layout, out: str | os.PathLike[str], *,
                 reference: Trace | None = None) -> Merged:
    """Merge every rank of ``trace`` into the one-rank trace ``out`` (a new directory) by
    ``layout``; with ``reference``, the merged shapes are checked against its records of the
    same identity.

    Raises:
        UsageError: fewer than two ranks, a glob naming no module of the trace, records one
            rank lacks, shards that do not concatenate (or do not make the reference's shape).

    Example:
        >>> m = merge_shards(open_trace("runs/tp2"), load_layout("tp.yaml"),
        ...                  "runs/tp2-merged")                          # doctest: +SKIP
    """
    from netparity.trace.writer import TraceWriter

    ranks = list(trace.ranks)
    if len(ranks) < 2:
        raise UsageError(f"{trace.path}: a shard layout merges ranks, and this trace has one "
                         f"(rank {ranks[0]})")
    per = [trace.load_records(rank=r) for r in ranks]
    mods = sorted({r.module for r in per[0] if r.kind == "module"}
                  | {r.module.rpartition(".")[0] for r in per[0] if _is_param(r)})
    _check_globs(layout, mods, f"{trace.path}")
    index = [{_ident(r): r for r in recs if r.kind in _MERGED_KINDS} for recs in per[1:]]
    ref_shape: dict[tuple[Any, ...], tuple[int, ...]] = {}
    synced = True  # keep the gradients the optimizer saw after a data-parallel all-reduce
    if reference is not None:
        ref_shape = {_ident(r): r.shape for r in reference.load_records(rank=reference.ranks[0])
                     if r.kind in _MERGED_KINDS}
        # ... unless the reference has none (one process records none): the merged rank is
        # one process too
        synced = any(k[1] == "custom" and k[4] == "grad_synced" for k in ref_shape)
    manifest = {k: v for k, v in trace.manifest.items()
                if k not in ("schema_version", "run_id", "created", "netparity_version")}
    manifest.update(world_size=1, merged_shards={"source": str(trace.path), "ranks": ranks,
                                                 "layout": layout.to_json()})
    res = Merged(trace=trace, source=trace.path, ranks=ranks, layout=layout)
    w = TraceWriter(out, rank=0, manifest=manifest)
    try:
        for rec in per[0]:
            if rec.kind not in _MERGED_KINDS or (
                    not synced and rec.kind == "custom" and rec.op == "grad_synced"):
                continue
            parts = [rec]
            for r, idx in zip(ranks[1:], index):
                other = idx.get(_ident(rec))
                if other is None:
                    raise UsageError(f"{trace.path}: rank {r} has no {_name(rec)} (rank "
                                     f"{ranks[0]} has): not the same program on every rank")
                parts.append(other)
            how, dim = _rule(layout, rec)
            merged = _merge_one(trace, rec, parts, how, dim, res)
            if merged is None:
                continue
            new, payload = merged
            want = ref_shape.get(_ident(rec))
            if want is not None and want != new.shape and how != "one":
                raise UsageError(
                    f"{layout.source}: the shards of {_name(rec)} merge to shape "
                    f"{list(new.shape)}, the reference has {list(want)} (wrong parallel or "
                    f"dim for {rec.module.rpartition('.')[0] if _is_param(rec) else rec.module}?)")
            w.add(new, payload)
            res.counts[how] = res.counts.get(how, 0) + 1
    except BaseException:
        w.interrupted = True
        with contextlib.suppress(Exception):
            w.close()
        raise
    w.close()
    res.trace = open_trace(out)
    return res


def _merge_one(trace: Trace, rec: Record, parts: list[Record], how: str, dim: int,
               res: Merged) -> tuple[Record, np.ndarray | None] | None:
    """The merged record of ``parts`` (one per rank) and its payload; None: left out."""
    shapes = [p.shape for p in parts]
    new = Record(**{**rec.__dict__, "rank": 0, "seq": -1, "shard": None, "offset": None,
                    "nbytes": None, "hash": None})
    payloads = all(p.has_payload for p in parts)
    trs = [trace] * len(parts)
    if how in ("one", "sum"):
        if len(set(shapes)) > 1 or len({p.dtype for p in parts}) > 1:
            raise UsageError(
                f"{_name(rec)}: the ranks hold {', '.join(str(list(s)) for s in shapes)}: "
                + ("the layout does not name this module (a sharded tensor taken as replicated)"
                   if how == "one" else "partial sums of different shapes"))
        if how == "one":
            new.hash = rec.hash
            if payloads and rec.dtype:
                first = trace.raw_tensor(rec)
                if any(not np.array_equal(first, trace.raw_tensor(p)) for p in parts[1:]):
                    _disagree(res, rec)
                return new, np.asarray(first)
            if any(p.stats != rec.stats or p.hash != rec.hash for p in parts[1:]):
                _disagree(res, rec)
            return new, None
        if not payloads:
            res.dropped.append(_name(rec))
            return None
        arr = _sum_payloads(trs, parts)
        new.stats = compute_stats(arr, rec.dtype)
        return new, arr
    nd = len(rec.shape)
    d = dim + nd if dim < 0 else dim
    if not 0 <= d < nd:
        raise UsageError(f"{_name(rec)}: dim {dim} is out of range for its shape "
                         f"{list(rec.shape)}")
    if any(len(s) != nd or s[:d] + s[d + 1:] != rec.shape[:d] + rec.shape[d + 1:]
           for s in shapes) or len({p.dtype for p in parts}) > 1:
        raise UsageError(f"{_name(rec)}: shards of shapes "
                         f"{', '.join(str(list(s)) for s in shapes)} do not concatenate along "
                         f"dim {dim}")
    new.shape = tuple(rec.shape[:d]) + (sum(s[d] for s in shapes),) + tuple(rec.shape[d + 1:])
    if not payloads:
        new.stats = _merge_stats(parts)
        return new, None
    arr = np.concatenate([trace.raw_tensor(p) for p in parts], axis=d)
    new.stats = compute_stats(arr, rec.dtype)
    return new, arr


def _disagree(res: Merged, rec: Record) -> None:
    res.n_disagree += 1
    if len(res.disagree) < 5:
        res.disagree.append(_name(rec))


@contextlib.contextmanager
def merged_sides(ref: Trace, cand: Trace, layout_file: str | None = None, *,
                 level: str = "module", rank: int | None = None
                 ) -> Iterator[tuple[Trace, Trace, list[Merged]]]:
    """``(ref, cand, merges)`` with each multi-rank side that has a layout merged into one rank
    (temporary traces, removed on exit): ``layout_file`` applies to every side with several
    ranks; without it, each side's recorded layout (``netparity.shard_layout``) applies to it.
    Sides without a layout come back as they are (``merges`` empty: nothing to do).

    Raises:
        UsageError: ``layout_file`` given and neither side has several ranks; a bad layout;
            a side to merge and ``level`` other than module, or a ``rank`` named.
    """
    given = load_layout(layout_file) if layout_file else None
    sides = [ref, cand]
    if given is not None and all(len(t.ranks) < 2 for t in sides):
        raise UsageError(f"--shards {layout_file}: neither trace has several ranks to merge")
    todo = [given or recorded_layout(t) if len(t.ranks) > 1 else None for t in sides]
    if any(todo):
        why = "the sharded side's ranks are merged into one (--shards or its recorded layout)"
        if level != "module":
            raise UsageError(f"--level {level}: {why} at module level only; use --level module")
        if rank is not None:
            raise UsageError(f"--rank {rank}: {why}; leave --rank out")
    merges: list[Merged] = []
    tmp: list[str] = []
    try:
        out = []
        for i, t in enumerate(sides):
            lay = todo[i]
            if lay is None:
                out.append(t)
                continue
            d = tempfile.mkdtemp(prefix="netparity-shards-")
            tmp.append(d)
            m = merge_shards(t, lay, Path(d) / "merged", reference=sides[1 - i]
                             if len(sides[1 - i].ranks) == 1 else None)
            merges.append(m)
            out.append(m.trace)
        yield out[0], out[1], merges
    finally:
        for m in merges:
            m.trace.close()
        for d in tmp:
            shutil.rmtree(d, ignore_errors=True)


def note_merges(result: Any, merges: list[Merged]) -> None:
    """Say in a comparison's result which side was merged and how (``runs`` keeps the paths
    the user named, not the temporary merged traces)."""
    for m in merges:
        for side in ("ref", "cand"):
            run = result.runs.get(side) or {}
            if run.get("path") == str(m.trace.path):
                run["path"] = str(m.source)
                run["merged_ranks"] = m.ranks
        result.notes.append(m.note())
    if merges:
        result.settings["shards"] = {str(m.source): m.layout.to_json() for m in merges}
