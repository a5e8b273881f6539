"""``align_traces``: pair the module and op calls of two traces, and their parameters.

Per step and direction:

1. **Modules.** A reference module call pairs with the candidate call that the mapping names
   (``mapping``), else the one with the same path and call index (``path``), else the one whose
   normalised path (``fc`` = ``classifier``, ``downsample`` = ``down_sample``, wrapper prefixes
   dropped) is unique and equal (``structure``); the rest are aligned as sequences in execution
   order by module class, shapes, statistics and last path token (``anchor``/``dp``, see
   :mod:`netparity.align.seq`). The pairs give the *module map* (ref path -> cand path).
2. **Ops.** Ops are partitioned by the module call running them; each reference partition is
   aligned with the candidate partition of the paired module call (same ops in the same order:
   ``path`` within one framework, ``anchor`` across). Ops left over anywhere, and ops of modules
   without a counterpart, are then aligned globally in execution order.
3. **Params, grads, loss, data** pair by name: the mapping's ``params``, equal names, the module
   map plus the PyTorch <-> MindSpore leaf rules (``weight`` <-> ``gamma``...), normalised names,
   then equal shapes in order.

Everything not paired is reported in ``unmatched_*``.
"""

from __future__ import annotations

import bisect
import gc
import json
import os
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

from netparity.align.features import MATCH_LIMIT, Interner, build_feats
from netparity.align.mapping import Mapping, load_mapping
from netparity.align.model import Alignment, Call, Match, ParamPair, calls_from_records
from netparity.align.names import LEAF_ALTERNATIVES, norm_path, split_param
from netparity.align.seq import ANCHOR_LIMIT, Pair, _elementwise_cost, _lis, align_seq
from netparity.errors import UsageError
from netparity.trace.reader import _SELECT, Trace
from netparity.trace.schema import COLUMN_NAMES, STAT_FIELDS, Record

LEVELS = ("module", "op", "both")
PARAM_KINDS = ("param", "grad", "loss", "data", "custom")

_STAT_SLICE = slice(16, 16 + len(STAT_FIELDS))
#: the fast loader below unpacks rows by position and spells the statistics out
_FAST_STATS = ("min", "max", "mean", "std", "norm", "abs_sum", "nan", "posinf", "neginf", "zeros",
               "fp16_overflow")
_FAST_COLUMNS = ("seq", "step", "rank", "kind", "op", "native", "module", "call", "module_call",
                 "direction", "role", "arg", "event", "dtype", "shape",
                 *(f"s_{k}" for k in _FAST_STATS), "shard", "offset", "nbytes", "hash", "source",
                 "extra")
_FAST_SELECT = (
    "SELECT " + ", ".join(f'"{c}"' for c in _FAST_COLUMNS)
    # NaN statistics are stored as the text 'nan' (SQLite turns a NaN REAL into NULL): flag
    # the rare rows holding one in SQL instead of scanning every row's values in Python
    + ", ('nan' IN (" + ", ".join(f'"s_{k}"' for k in _FAST_STATS) + ")) FROM records"
)
_FAST_OK = STAT_FIELDS == _FAST_STATS and set(_FAST_COLUMNS) <= set(COLUMN_NAMES)


def _fast_records(rows: list[tuple[Any, ...]]) -> list[Record]:
    """Rows of the index to :class:`Record` objects.

    Same result as :func:`netparity.trace.schema.row_to_record`, about twice as fast on large
    traces: shapes are parsed once per distinct string and the dataclass ``__init__`` is skipped.
    The column order is the schema's (``COLUMN_NAMES``).
    """
    shapes: dict[str, tuple[int, ...]] = {}
    new = object.__new__
    out: list[Record] = []
    append = out.append
    for row in rows:
        s = row[14]
        shp = shapes.get(s)
        if shp is None:
            shp = shapes[s] = tuple(json.loads(s))
        vals = row[_STAT_SLICE]
        stats = dict(zip(STAT_FIELDS, vals))
        if "nan" in vals:
            for k, v in stats.items():
                if v == "nan":
                    stats[k] = float("nan")
        r = new(Record)
        r.__dict__ = {
            "kind": row[3], "op": row[4], "native": row[5], "module": row[6], "call": row[7],
            "module_call": row[8], "direction": row[9], "role": row[10], "arg": row[11],
            "dtype": row[13], "shape": shp, "step": row[1], "rank": row[2], "seq": row[0],
            "event": row[12], "stats": stats, "shard": row[27], "offset": row[28],
            "nbytes": row[29], "hash": row[30], "source": row[31],
            "extra": json.loads(row[32]) if row[32] else {},
        }
        append(r)
    return out


def _fast_records2(rows: list[tuple[Any, ...]]) -> list[Record]:
    """Rows of ``_FAST_SELECT`` to :class:`Record` objects (same result as ``row_to_record``).

    The per-row work is what remains after everything else was hoisted out: tuple unpacking
    into locals, a dict literal for the statistics (no NaN scan: SQL flags those rows), shapes
    parsed once per distinct string, and no dataclass ``__init__``. About 1.7x faster than
    :func:`_fast_records` on 100k-op traces.
    """
    shapes: dict[str, tuple[int, ...]] = {}
    new = object.__new__
    out: list[Record] = []
    append = out.append
    loads = json.loads
    nan = float("nan")
    for (seq, step, rank, kind, op, native, module, call, module_call, direction, role, arg,
         event, dtype, s, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, shard, offset, nbytes,
         hsh, source, extra, has_nan) in rows:
        shp = shapes.get(s)
        if shp is None:
            shp = shapes[s] = tuple(loads(s))
        if has_nan:
            stats = {k: (nan if v == "nan" else v) for k, v in
                     zip(_FAST_STATS, (a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10))}
        else:
            stats = {"min": a0, "max": a1, "mean": a2, "std": a3, "norm": a4, "abs_sum": a5,
                     "nan": a6, "posinf": a7, "neginf": a8, "zeros": a9, "fp16_overflow": a10}
        r = new(Record)
        r.__dict__ = {
            "kind": kind, "op": op, "native": native, "module": module, "call": call,
            "module_call": module_call, "direction": direction, "role": role, "arg": arg,
            "dtype": dtype, "shape": shp, "step": step, "rank": rank, "seq": seq,
            "event": event, "stats": stats, "shard": shard, "offset": offset,
            "nbytes": nbytes, "hash": hsh, "source": source,
            "extra": loads(extra) if extra else {},
        }
        append(r)
    return out


def load_records(
    trace: Trace,
    *,
    rank: int = 0,
    step: int | Iterable[int] | None = None,
    direction: str | Iterable[str] | None = None,
    kinds: Iterable[str] | None = None,
) -> list[Record]:
    """Records of one rank in execution order (the fast path :func:`align_traces` uses).

    Example:
        >>> recs = load_records(open_trace("runs/ref"), kinds=("module",))   # doctest: +SKIP
    """
    if rank not in trace.ranks:
        raise UsageError(f"{trace.path}: no rank {rank} (ranks: {trace.ranks})")
    where: list[str] = []
    params: list[Any] = []
    for col, val in (("step", step), ("direction", direction), ("kind", kinds)):
        if val is None:
            continue
        vals = [val] if isinstance(val, (str, int)) else list(val)
        where.append(f'"{col}" IN ({",".join("?" for _ in vals)})')
        params.extend(vals)
    cond = (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY seq"
    if _FAST_OK:
        return _fast_records2(trace._query(_FAST_SELECT + cond, params, rank))
    return _fast_records(trace._query(_SELECT + cond, params, rank))


def _as_mapping(mapping: Mapping | dict[str, Any] | str | os.PathLike[str] | None) -> Mapping:
    if mapping is None:
        return Mapping()
    if isinstance(mapping, Mapping):
        return mapping
    if isinstance(mapping, dict):
        return Mapping.from_dict(mapping)
    return load_mapping(mapping)


def align_traces(
    ref: Trace,
    cand: Trace,
    *,
    level: str = "module",
    step: int | Iterable[int] | None = None,
    rank: int = 0,
    direction: str | Iterable[str] | None = None,
    mapping: Mapping | dict[str, Any] | str | os.PathLike[str] | None = None,
) -> Alignment:
    """Pair the calls of two traces (1:1 and N:M) and their param/grad/loss/data records.

    Args:
        ref: the reference trace (e.g. PyTorch fp32).
        cand: the candidate trace (e.g. the MindSpore port).
        level: ``"module"`` (module calls), ``"op"`` (op calls) or ``"both"``.
        step: one step, several, or ``None`` for every step of either trace (a step present in
            only one trace leaves its calls unmatched).
        rank: which rank of both traces.
        direction: ``forward``/``backward``/``update``, several, or ``None`` for all.
        mapping: a :class:`Mapping`, its dict form, or a mapping file path.

    Returns:
        An :class:`Alignment`; ``matches`` are in reference execution order.

    Example:
        >>> from netparity.trace import open_trace                      # doctest: +SKIP
        >>> al = align_traces(open_trace("runs/torch"), open_trace("runs/ms"), level="op")  # doctest: +SKIP
        >>> al.summary()["unmatched_ref"]                               # doctest: +SKIP
        0
    """
    if level not in LEVELS:
        raise UsageError(f"level must be one of {', '.join(LEVELS)}, not {level!r}")
    kinds = ("module", *PARAM_KINDS) if level == "module" else None
    # Hundreds of thousands of small objects are created and none is garbage: the cyclic
    # collector would rescan them all repeatedly (a third of the run time on 100k-op traces).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        rr = load_records(ref, rank=rank, step=step, direction=direction, kinds=kinds)
        cr = load_records(cand, rank=rank, step=step, direction=direction, kinds=kinds)
        return align_records(
            rr, cr, level=level, mapping=mapping,
            cross_framework=ref.framework != cand.framework,
        )
    finally:
        if was_enabled:
            gc.enable()


def align_records(
    ref_records: list[Record],
    cand_records: list[Record],
    *,
    level: str = "module",
    mapping: Mapping | dict[str, Any] | str | os.PathLike[str] | None = None,
    cross_framework: bool = False,
) -> Alignment:
    """:func:`align_traces` on records already loaded (execution order, one rank).

    Example:
        >>> align_records([], []).summary()["matched"]
        0
    """
    if level not in LEVELS:
        raise UsageError(f"level must be one of {', '.join(LEVELS)}, not {level!r}")
    mp = _as_mapping(mapping)
    out = Alignment()
    ids = Interner()
    rcalls = calls_from_records(ref_records)
    ccalls = calls_from_records(cand_records)
    buckets: dict[tuple[int, str], tuple[list[Call], list[Call]]] = defaultdict(lambda: ([], []))
    for c in rcalls:
        buckets[(c.step, c.direction)][0].append(c)
    for c in ccalls:
        buckets[(c.step, c.direction)][1].append(c)
    module_votes: dict[str, Counter[str]] = defaultdict(Counter)
    op_votes: dict[str, Counter[str]] = defaultdict(Counter)
    group_names: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    want_modules = level in ("module", "both")
    want_ops = level in ("op", "both")
    # forward first: backward/update op partitions reuse the module map found going forward
    order = {"forward": 0, "backward": 1, "update": 2}
    for key in sorted(buckets, key=lambda k: (k[0], order.get(k[1], 3), k[1])):
        rc, cc = buckets[key]
        rmods = [c for c in rc if c.kind == "module"]
        cmods = [c for c in cc if c.kind == "module"]
        call_map: dict[tuple[str, int], tuple[str, int]] = {}
        if rmods or cmods:
            mm, ur, uc = _align_modules(rmods, cmods, mp, ids)
            for m in mm:
                r, c = m.ref[0], m.cand[0]
                module_votes[r.module][c.module] += 1
                call_map[(r.module, r.call)] = (c.module, c.call)
            if want_modules:
                out.matches.extend(mm)
                out.unmatched_ref.extend(ur)
                out.unmatched_cand.extend(uc)
        if want_ops:
            rops = [c for c in rc if c.kind == "op"]
            cops = [c for c in cc if c.kind == "op"]
            if rops or cops:
                path_map = {r: _top(v) for r, v in module_votes.items()}
                om, ur, uc = _align_ops(rops, cops, call_map, path_map, mp, ids, cross_framework)
                for m in om:
                    if m.is_group and m.method != "mapping":
                        group_names.append((tuple(c.op for c in m.ref), tuple(c.op for c in m.cand)))
                    if len(m.ref) == 1 and len(m.cand) == 1:
                        op_votes[m.ref[0].module][m.cand[0].module] += 1
                out.matches.extend(om)
                out.unmatched_ref.extend(ur)
                out.unmatched_cand.extend(uc)
    out.matches.sort(key=lambda m: (m.ref[0].seq, m.ref[0].kind != "module"))
    out.unmatched_ref.sort(key=lambda c: c.seq)
    out.unmatched_cand.sort(key=lambda c: c.seq)
    for path, v in module_votes.items():
        out.module_map[path] = _top(v)
    for path, v in op_votes.items():
        if path not in out.module_map:
            out.module_map[path] = _top(v)
    out.op_groups = group_names
    _align_params(ref_records, cand_records, out, mp, rcalls)
    return out


def _top(votes: Counter[str]) -> str:
    """The most voted-for key (the first seen among equals), as ``most_common(1)`` picks it."""
    if len(votes) == 1:  # nearly always: skip most_common's heap machinery
        for k in votes:
            return k
    return votes.most_common(1)[0][0]


def _confidence(p: Pair) -> float:
    if p.method in ("path", "mapping"):
        return 1.0
    return float(max(0.05, min(1.0, 1.0 - p.cost / MATCH_LIMIT)))


def _to_matches(p_list: list[Pair], rc: list[Call], cc: list[Call]) -> list[Match]:
    return [
        Match([rc[i] for i in p.a], [cc[j] for j in p.b], p.method, _confidence(p), p.note)
        for p in p_list
    ]


def _align_modules(
    rc: list[Call], cc: list[Call], mp: Mapping, ids: Interner
) -> tuple[list[Match], list[Call], list[Call]]:
    A = build_feats(rc, ids)
    B = build_feats(cc, ids)
    index_b = {(c.module, c.call): j for j, c in enumerate(cc)}
    fixed: list[Pair] = []
    used_a: set[int] = set()
    used_b: set[int] = set()

    def take(i: int, j: int | None, method: str, note: str = "") -> None:
        if j is None or j in used_b or i in used_a:
            return
        used_a.add(i)
        used_b.add(j)
        fixed.append(Pair([i], [j], method, 0.0, note))

    if mp.modules or mp.rules:
        for i, c in enumerate(rc):
            t = mp.module_target(c.module)
            if t is not None:
                take(i, index_b.get((t, c.call)), "mapping")
    for i, c in enumerate(rc):
        if i not in used_a:
            take(i, index_b.get((c.module, c.call)), "path")
    if len(used_a) < len(rc) and len(used_b) < len(cc):
        norm_b: dict[tuple[str, int], list[int]] = defaultdict(list)
        for j, c in enumerate(cc):
            if j not in used_b:
                norm_b[(B.path[j], c.call)].append(j)
        norm_a: Counter[tuple[str, int]] = Counter(
            (A.path[i], c.call) for i, c in enumerate(rc) if i not in used_a
        )
        for i, c in enumerate(rc):
            if i in used_a:
                continue
            k = (A.path[i], c.call)
            js = norm_b.get(k, [])
            if len(js) == 1 and norm_a[k] == 1:
                j = js[0]
                if A.name[i] == B.name[j] or A.out_shape[i] == B.out_shape[j]:
                    take(i, j, "structure", "names normalised")
    pairs, ua, ub = align_seq(A, list(range(len(rc))), B, list(range(len(cc))),
                              modules=True, fixed=fixed, find_groups=False)
    return _to_matches(pairs, rc, cc), [rc[i] for i in ua], [cc[j] for j in ub]


def _align_ops(
    rc: list[Call],
    cc: list[Call],
    call_map: dict[tuple[str, int], tuple[str, int]],
    path_map: dict[str, str],
    mp: Mapping,
    ids: Interner,
    cross_framework: bool,
) -> tuple[list[Match], list[Call], list[Call]]:
    A = build_feats(rc, ids)
    B = build_feats(cc, ids)
    parts_a: dict[tuple[str, int], list[int]] = defaultdict(list)
    parts_b: dict[tuple[str, int], list[int]] = defaultdict(list)
    for i, c in enumerate(rc):
        parts_a[(c.module, c.module_call)].append(i)
    for j, c in enumerate(cc):
        parts_b[(c.module, c.module_call)].append(j)

    def owner(key: tuple[str, int]) -> tuple[str, int] | None:
        t = call_map.get(key)
        if t is not None:
            return t
        mod, k = key
        if mod in path_map:
            return (path_map[mod], k)
        tgt = mp.module_target(mod) if (mp.modules or mp.rules) else None
        if tgt is not None:
            return (tgt, k)
        return key

    diag = "path" if not cross_framework else "anchor"
    pairs: list[Pair] = []
    pool_a: list[int] = []
    used_parts_b: set[tuple[str, int]] = set()
    fast_a: list[int] = []
    fast_b: list[int] = []
    fast_parts: list[tuple[list[int], list[int], bool]] = []
    slow: list[tuple[list[int], list[int]]] = []
    sig_a, sig_b = A.sig.tolist(), B.sig.tolist()
    for key, ia in parts_a.items():
        ok = owner(key)
        ib = parts_b.get(ok) if ok is not None else None
        if ib is None or ok in used_parts_b:
            pool_a.extend(ia)
            continue
        used_parts_b.add(ok)  # type: ignore[arg-type]
        if len(ia) == len(ib) and all(sig_a[x] == sig_b[y] for x, y in zip(ia, ib)):
            fast_a.extend(ia)
            fast_b.extend(ib)
            # inside a paired module call the same ops with the same shapes in the same order
            # pair by position whatever their values: a diverging op must stay paired so the
            # comparison can report it
            fast_parts.append((ia, ib, key in call_map))
        else:
            slow.append((ia, ib))
    if fast_a:
        # one vectorised cost check for every partition whose ops line up exactly
        cost = _elementwise_cost(A, np.array(fast_a), B, np.array(fast_b), False).tolist()
        k = 0
        for ia, ib, trusted in fast_parts:
            cs = cost[k : k + len(ia)]
            k += len(ia)
            if trusted or all(c < ANCHOR_LIMIT for c in cs):
                pairs.extend(Pair([x], [y], diag, c) for x, y, c in zip(ia, ib, cs))
            else:
                slow.append((ia, ib))
    pool_b_set: set[int] = set()
    for ia, ib in slow:
        p, ua, ub = align_seq(A, ia, B, ib, op_groups=mp.ops, diag_method=diag)
        pairs.extend(p)
        pool_a.extend(ua)
        pool_b_set.update(ub)
    for key, ib in parts_b.items():
        if key not in used_parts_b:
            pool_b_set.update(ib)
    un_a: list[int] = []
    un_b: list[int] = []
    if pool_a and pool_b_set:
        # Leftovers may only pair inside the same gap of what is already paired (in execution
        # order): two stray ops far apart in the network are not the same op, however alike.
        chain_src = sorted((p.a[0], p.b[0]) for p in pairs)
        keep = _lis([b for _, b in chain_src])
        chain_a = [chain_src[k][0] for k in keep]
        chain_b = [chain_src[k][1] for k in keep]
        gaps_a: dict[int, list[int]] = defaultdict(list)
        gaps_b: dict[int, list[int]] = defaultdict(list)
        for x in sorted(pool_a):
            gaps_a[bisect.bisect_left(chain_a, x)].append(x)
        for y in sorted(pool_b_set):
            gaps_b[bisect.bisect_left(chain_b, y)].append(y)
        for g in sorted(set(gaps_a) | set(gaps_b)):
            ga, gb = gaps_a.get(g, []), gaps_b.get(g, [])
            if ga and gb:
                p2, ua, ub = align_seq(A, ga, B, gb, op_groups=mp.ops, diag_method="anchor")
                pairs.extend(p2)
                un_a.extend(ua)
                un_b.extend(ub)
            else:
                un_a.extend(ga)
                un_b.extend(gb)
    else:
        un_a, un_b = sorted(pool_a), sorted(pool_b_set)
    return _to_matches(pairs, rc, cc), [rc[i] for i in un_a], [cc[j] for j in un_b]


# ---- params / grads / loss / data ---------------------------------------------------------------

def _pname(r: Record) -> str:
    return r.module or r.op


def _param_name_map(
    ref_names: list[str], cand_names: set[str], module_map: dict[str, str], mp: Mapping
) -> dict[str, tuple[str, str]]:
    """ref name -> (cand name, method), by mapping, equal name, module map + leaf rules, norms."""
    out: dict[str, tuple[str, str]] = {}
    taken: set[str] = set()

    def put(r: str, c: str, method: str) -> None:
        if r not in out and c in cand_names and c not in taken:
            out[r] = (c, method)
            taken.add(c)

    for r in ref_names:
        if r in mp.params:
            put(r, mp.params[r], "mapping")
    for r in ref_names:
        put(r, r, "name")
    for r in ref_names:
        if r in out:
            continue
        mod, lf = split_param(r)
        targets = []
        if mod in module_map:
            targets.append((module_map[mod], "module"))
        t = mp.module_target(mod) if (mp.modules or mp.rules) else None
        if t is not None:
            targets.append((t, "mapping"))
        targets.append((mod, "rule"))
        for tmod, method in targets:
            for alt in (lf, *LEAF_ALTERNATIVES.get(lf, ())):
                c = f"{tmod}.{alt}" if tmod else alt
                if c in cand_names and c not in taken:
                    put(r, c, method if (tmod != mod or alt == lf) else "rule")
                    break
            if r in out:
                break
    # normalised names, when unique on both sides
    left_c = [c for c in cand_names if c not in taken]
    by_norm: dict[str, list[str]] = defaultdict(list)
    for c in left_c:
        by_norm[norm_path(c)].append(c)
    norm_r = Counter(norm_path(r) for r in ref_names if r not in out)
    for r in ref_names:
        if r in out:
            continue
        k = norm_path(r)
        cs = by_norm.get(k, [])
        if len(cs) == 1 and norm_r[k] == 1:
            put(r, cs[0], "rule")
    return out


def _align_params(
    rr: list[Record], cr: list[Record], out: Alignment, mp: Mapping, rcalls: list[Call]
) -> None:
    del rcalls
    rp = [r for r in rr if r.kind in PARAM_KINDS]
    cp = [r for r in cr if r.kind in PARAM_KINDS]
    if not rp and not cp:
        return
    ref_names = list(dict.fromkeys(_pname(r) for r in rp if r.kind in ("param", "grad")))
    cand_names = {_pname(r) for r in cp if r.kind in ("param", "grad")}
    names = _param_name_map(ref_names, cand_names, out.module_map, mp)

    def key(r: Record, name: str) -> tuple[Any, ...]:
        return (r.step, r.kind, r.direction, r.role, r.arg, name)

    index: dict[tuple[Any, ...], Record] = {}
    for r in cp:
        index.setdefault(key(r, _pname(r)), r)
    used: set[int] = set()
    left_r: list[Record] = []
    for r in rp:
        n = _pname(r)
        target, method = names.get(n, (n, "name"))
        c = index.get(key(r, target))
        if c is None and r.kind not in ("param", "grad"):
            c = index.get(key(r, n))
            method = "name"
        if c is not None and id(c) not in used:
            used.add(id(c))
            out.params.append(ParamPair(r, c, method))
        else:
            left_r.append(r)
    left_c = [r for r in cp if id(r) not in used]
    # last resort: same kind, step and shape, in order, when the shape is unambiguous
    if left_r and left_c:
        groups: dict[tuple[Any, ...], tuple[list[Record], list[Record]]] = defaultdict(lambda: ([], []))
        for r in left_r:
            groups[(r.step, r.kind, r.direction, r.shape)][0].append(r)
        for r in left_c:
            groups[(r.step, r.kind, r.direction, r.shape)][1].append(r)
        paired: set[int] = set()
        for a, b in groups.values():
            if len(a) == len(b):
                for x, y in zip(a, b):
                    out.params.append(ParamPair(x, y, "shape"))
                    paired.add(id(x))
                    paired.add(id(y))
        left_r = [r for r in left_r if id(r) not in paired]
        left_c = [r for r in left_c if id(r) not in paired]
    out.unmatched_params_ref = left_r
    out.unmatched_params_cand = left_c
