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

import dataclasses
import os
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

from netparity.align.features import MATCH_LIMIT, row_distance, stat_row, stats_rows
from netparity.align.model import Alignment, Call, Match, ParamPair, calls_from_records
from netparity.align.names import LEAF_ALTERNATIVES, norm_path, split_param
from netparity.align.ownership import follow_siblings, modules_by_ownership
from netparity.align.passes import Chunk, OpContext, module_pass, op_pass, pair_codes
from netparity.align.reading import check_rank, count_records, load_records
from netparity.align.repeats import pair_by_content
from netparity.align.table import CallTable, Pools, table_from_calls
from netparity.align.tableread import read_table
from netparity.errors import MappingError, TraceError, UsageError
from netparity.gcpause import paused_gc
from netparity.mapfile import Mapping, load_mapping
from netparity.trace.reader import Trace
from netparity.trace.schema import Record
from netparity.untrusted import parse_shape

__all__ = ["LEVELS", "PARAM_KINDS", "align_records", "align_tables", "align_traces", "load_records"]

LEVELS = ("module", "op", "both")
PARAM_KINDS = ("param", "grad", "loss", "data", "custom")


def _as_mapping(mapping: Mapping | dict[str, Any] | str | os.PathLike[str] | None) -> Mapping:
    if mapping is None:
        return Mapping()
    if isinstance(mapping, Mapping):
        return mapping
    if isinstance(mapping, dict):
        return Mapping.from_dict(mapping)
    return load_mapping(mapping)


def _check_level(level: str) -> None:
    if level not in LEVELS:
        raise UsageError(f"level must be one of {', '.join(LEVELS)}, not {level!r}")


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

    Only what alignment looks at is read from the indexes (see
    :mod:`netparity.align.reading`); the records of the returned calls (``Call.inputs`` /
    ``Call.outputs``) are read from the traces the first time any of them is asked for.

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
    _check_level(level)
    mp = _as_mapping(mapping)
    if mp.from_file:
        check_mapping_names(mp, ref, cand, rank)
    mp, owned = _with_ownership(mp, ref, cand, rank, step)
    call_kinds = ("module",) if level == "module" else ("module", "op")
    with paused_gc():  # hundreds of thousands of small objects, none of them garbage
        pools = Pools()
        tables = [read_table(t, pools, rank=rank, step=step, direction=direction,
                             kinds=call_kinds) for t in (ref, cand)]
        mp = _with_siblings(mp, owned, tables[0], tables[1], pools)
        out = align_tables(tables[0], tables[1], level=level, mapping=mp,
                           cross_framework=ref.framework != cand.framework, pools=pools)
        rp, cp = (_param_records(t, tb, rank, step, direction) for t, tb in zip((ref, cand),
                                                                                  tables))
        _align_params(rp, cp, out, mp)
        return out


#: record kinds whose ``module`` field is a parameter (or loss/data) name, paired by name
_NAMED_KINDS = ("param", "grad", "loss", "data", "custom")


def check_mapping_names(mp: Mapping, ref: Trace, cand: Trace, rank: int) -> None:
    """Refuse a user mapping that names modules or parameters these traces do not hold (at
    ``rank``): a misspelt name used to be ignored, the pairs it meant to fix left unmatched and
    the verdict PASS. A ``modules`` entry names a module path of a call or parameter of its side
    (itself or a path below it); a ``params`` entry a param/grad/loss/data name of its side.
    Rules and op groups are patterns, not names: not checked.

    Raises:
        MappingError: one line naming the unknown names.
    """
    from netparity.trace.coverage import names

    unknown: list[str] = []
    for side, tr, mods, params in (("reference", ref, list(mp.modules), list(mp.params)),
                                   ("candidate", cand, list(mp.modules.values()),
                                    list(mp.params.values()))):
        got = names(tr, rank) if rank in tr.ranks else {}
        named = set().union(*(got.get(k, set()) for k in _NAMED_KINDS))
        paths = named | set().union(*(got.get(k, set()) for k in ("module", "op")))
        prefixes = {p[:i] for p in paths for i, c in enumerate(p) if c == "."} | paths
        bad_m = [m for m in mods if m and m not in prefixes]
        bad_p = [p for p in params if p not in named]
        for what, bad in (("module", bad_m), ("parameter", bad_p)):
            if bad:
                shown = ", ".join(repr(b) for b in bad[:5]) + (
                    f" and {len(bad) - 5} more" if len(bad) > 5 else "")
                unknown.append(f"{side} {what}{'s' if len(bad) > 1 else ''} {shown}")
    if unknown:
        raise MappingError(f"{mp.source}: the mapping names {'; '.join(unknown)}, which the "
                           f"traces do not hold (rank {rank})")


def _owned_params(trace: Trace, rank: int, step: Any = None) -> list[tuple[str, tuple[int, ...]]]:
    """(parameter name, shape) in the order the model holds them: the parameters recorded after
    the first captured update, else the first step's gradients (made in reverse order) -- of
    the steps ``step`` aligns when they hold any (a step's rows only: a comparison of one step
    of many reads no other step's), else of the whole trace.

    Read with a column scan of three columns (no record objects); names and shapes are
    decoded once per distinct value."""
    check_rank(trace, rank)
    for kind, backwards in (("param", False), ("grad", True)):
        cols = trace.scan(["step", "module", "shape"], rank=rank, kind=kind,
                          **({"step": step} if step is not None else {}))
        if not cols.n and step is not None and trace.count(rank=rank, kind=kind):
            # (other steps hold them: counted by the index, no column read for a trace that
            # holds none, e.g. an inference capture compared a step at a time)
            cols = trace.scan(["step", "module", "shape"], rank=rank, kind=kind)
        if not cols.n:
            continue
        step = cols["step"]
        rows = np.nonzero(step == step.min())[0]
        if backwards:
            rows = rows[::-1]
        names, shapes = cols["module"], cols["shape"]
        try:
            dims = [parse_shape(s) for s in shapes.values]
        except (TypeError, ValueError) as e:
            raise TraceError(f"{trace.path}/rank{rank}: corrupt trace index (shape: {e})"
                             ) from None
        seen = dict.fromkeys(zip(names.codes[rows].tolist(), shapes.codes[rows].tolist()))
        return [(names.values[m], dims[k]) for m, k in seen]
    return []


def _with_ownership(mp: Mapping, ref: Trace, cand: Trace, rank: int,
                    step: Any = None) -> tuple[Mapping, dict[str, str]]:
    """``mp`` plus the module pairs the two traces' parameters imply
    (:mod:`netparity.align.ownership`); the user's own module entries win. Also returns every
    pair ownership found (same paths included). ``step``: the steps aligned."""
    rp, cp = _owned_params(ref, rank, step), _owned_params(cand, rank, step)
    if not rp or not cp:
        return mp, {}
    try:
        owned = modules_by_ownership(rp, cp, mapping=mp if (mp.params or mp.modules or
                                                            mp.rules) else None)
    except MappingError:  # the user's params name something these traces lack: pair without
        owned = modules_by_ownership(rp, cp)
    return _user_wins(mp, owned), owned


def _user_wins(mp: Mapping, derived: dict[str, str]) -> Mapping:
    """``mp`` plus the derived module pairs that the user's own entries (exact module paths,
    and every path one of their rules matches) leave open; same paths add nothing."""
    derived = {r: c for r, c in derived.items() if r != c and r not in mp.modules
               and not any(pat.search(r) for pat, _ in mp.rules)}
    if not derived:
        return mp
    return dataclasses.replace(mp, modules={**derived, **mp.modules})


def _with_siblings(mp: Mapping, owned: dict[str, str], rt: CallTable, ct: CallTable,
                   pools: Pools) -> Mapping:
    """``mp`` plus the innermost modules without parameters (activations, dropouts) that
    follow their paired numbered siblings (:func:`~netparity.align.ownership.follow_siblings`):
    a ReLU6 that a port flattened next to its conv and BatchNorm goes where they went, never
    to the module of the same index."""
    if not owned:
        return mp
    strs = pools.paths.strs

    def leaves(t: CallTable) -> tuple[list[str], set[str]]:
        paths = [strs[i] for i in np.unique(t.module[t.is_module]).tolist()]
        parents = {p.rpartition(".")[0] for p in paths}
        return [p for p in paths if p and p not in parents], set(paths)

    (ref_leaves, _), (cand_leaves, cand_paths) = leaves(rt), leaves(ct)
    # a module the mapping already sends to an existing candidate module stays there
    open_ = [p for p in ref_leaves if mp.module_target(p) not in cand_paths]
    more = follow_siblings(open_, cand_leaves, {**owned, **mp.modules})
    return _user_wins(mp, more)


def _param_records(trace: Trace, calls: CallTable, rank: int, step: int | Iterable[int] | None,
                   direction: str | Iterable[str] | None) -> list[Record]:
    """The param/grad/loss/data/custom records of a query; none to read when every record the
    query selects belongs to a call (one count on the index instead of a scan)."""
    if count_records(trace, rank=rank, step=step, direction=direction) == calls.n_records:
        return []
    return load_records(trace, rank=rank, step=step, direction=direction, kinds=PARAM_KINDS)


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
    _check_level(level)
    mp = _as_mapping(mapping)
    pools = Pools()
    rt = table_from_calls(calls_from_records(ref_records), pools)
    ct = table_from_calls(calls_from_records(cand_records), pools)
    out = align_tables(rt, ct, level=level, mapping=mp, cross_framework=cross_framework,
                       pools=pools)
    _align_params(ref_records, cand_records, out, mp)
    return out


def align_tables(rt: CallTable, ct: CallTable, *, level: str, mapping: Mapping,
                 cross_framework: bool, pools: Pools) -> Alignment:
    """Steps 1 and 2 of the module docstring on two call tables built with the same ``pools``,
    bucket by bucket (step, then direction); parameters are not paired here.

    Example:
        >>> p = Pools()
        >>> t = table_from_calls([], p)
        >>> align_tables(t, t, level="op", mapping=Mapping(), cross_framework=False,
        ...              pools=p).summary()["matched"]
        0
    """
    mp = mapping
    out = Alignment()
    res = _Results(rt, ct)
    module_votes, op_votes = _Votes(), _Votes()
    for ia, ib in _buckets(rt, ct, pools):  # (one call per bucket: its arrays die with it)
        _align_bucket(ia, ib, rt, ct, res, module_votes, level, mp, pools, cross_framework)
    # the features are read by the passes only: dropped before the calls and matches are made
    # (at the peak of an op-level alignment they were half of what it held)
    rt.release_feats()
    ct.release_feats()
    res.finish(out, op_votes)
    strs = pools.paths.strs
    for votes in (module_votes, op_votes):  # module votes first; op votes add what they lack
        r, c = votes.top()  # one winner per reference module
        more = zip([strs[k] for k in r.tolist()], [strs[k] for k in c.tolist()])
        if out.module_map:
            more = ((a, b) for a, b in more if a not in out.module_map)  # type: ignore[assignment]
        out.module_map.update(more)
    return out


def _align_bucket(ia: np.ndarray, ib: np.ndarray, rt: CallTable, ct: CallTable, res: _Results,
                  module_votes: _Votes, level: str, mp: Mapping, pools: Pools,
                  cross_framework: bool) -> None:
    """Steps 1 and 2 of the module docstring in one bucket (calls ``ia`` of ``rt``, ``ib`` of
    ``ct``): its pairs and unmatched calls go to ``res``, its module pairs vote."""
    want_modules = level in ("module", "both")
    ra, cb = ia[rt.is_module[ia]], ib[ct.is_module[ib]]
    paired = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if len(ra) or len(cb):
        fa, fb = rt.feats.take(ra), ct.feats.take(cb)
        mods = module_pass(fa, ra, fb, cb, rt, ct, mp, pools.paths)
        # a module's repeated calls (micro-batches, a recurrent cell) pair by content
        pair_by_content(mods.pairs, fa, fb, rt.module[ra], ct.module[cb])
        del fa, fb
        paired = ra[mods.pairs.a], cb[mods.pairs.b]
        module_votes.add(rt.module[paired[0]], ct.module[paired[1]])
        if want_modules:
            res.add(mods.pairs, ra, cb)
            res.unmatched(ra[mods.un_a], cb[mods.un_b])
    if level not in ("op", "both"):
        return
    ra, cb = ia[~rt.is_module[ia]], ib[~ct.is_module[ib]]
    if not (len(ra) and len(cb)):
        res.unmatched(ra, cb)
        return
    cx = OpContext(rt.module[paired[0]], rt.call[paired[0]], ct.module[paired[1]],
                   ct.call[paired[1]], module_votes.path_map(len(pools.paths.strs)),
                   mp, pools.paths, cross_framework)
    chunks, un_a, un_b = op_pass(rt.feats.take(ra), ra, ct.feats.take(cb), cb, rt, ct, cx)
    for ch in chunks:  # their 1:1 pairs vote for module pairs (in finish)
        res.add(ch, ra, cb, votes=True)
    res.unmatched(ra[un_a], cb[un_b])


def _buckets(rt: CallTable, ct: CallTable, pools: Pools) -> list[tuple[np.ndarray, np.ndarray]]:
    """Call indices of both sides per (step, direction), forward first within a step:
    backward/update op partitions reuse the module map found going forward."""
    nd = max(len(pools.directions.strs), 1)
    ka, kb = rt.step * nd + rt.direction, ct.step * nd + ct.direction
    ga, gb = _group_by(ka), _group_by(kb)
    order = {"forward": 0, "backward": 1, "update": 2}
    names = pools.directions.strs

    def sort_key(k: int) -> tuple[int, int, str]:
        d = names[k % nd] if names else ""
        return (k // nd, order.get(d, 3), d)

    none = np.zeros(0, dtype=np.int64)
    return [(ga.get(k, none), gb.get(k, none)) for k in sorted(set(ga) | set(gb), key=sort_key)]


def _group_by(key: np.ndarray) -> dict[int, np.ndarray]:
    """Positions of each distinct key, in increasing position."""
    if not len(key):
        return {}
    u, inv = np.unique(key, return_inverse=True)
    inv = inv.reshape(-1)
    o = np.argsort(inv, kind="stable")
    return dict(zip(u.tolist(), np.split(o, np.cumsum(np.bincount(inv))[:-1])))


class _Votes:
    """(reference module, candidate module) votes in the order cast."""

    def __init__(self) -> None:
        self.r: list[np.ndarray] = []
        self.c: list[np.ndarray] = []

    def add(self, r: np.ndarray, c: np.ndarray) -> None:
        self.r.append(r)
        self.c.append(c)

    def top(self) -> tuple[np.ndarray, np.ndarray]:
        """Reference modules in the order of their first vote, and each one's most voted
        candidate (the first voted for among equals, as ``Counter.most_common(1)`` picks)."""
        r = np.concatenate(self.r) if self.r else np.zeros(0, dtype=np.int64)
        c = np.concatenate(self.c) if self.c else np.zeros(0, dtype=np.int64)
        if not len(r):
            return r, c
        code, _ = pair_codes(r, c, r[:0], c[:0])
        _, first, counts = np.unique(code, return_index=True, return_counts=True)
        ur, uc = r[first], c[first]
        o = np.lexsort((first, -counts, ur))
        lead = np.ones(len(o), dtype=bool)
        lead[1:] = ur[o][1:] != ur[o][:-1]
        win_r, win_c = ur[o][lead], uc[o][lead]
        _, r_first = np.unique(r, return_index=True)
        seen = np.argsort(r_first, kind="stable")
        return win_r[seen], win_c[seen]

    def path_map(self, size: int) -> np.ndarray:
        """Reference module id -> its most voted candidate module id, -1 without votes."""
        pm = np.full(size, -1, dtype=np.int64)
        r, c = self.top()
        pm[r] = c
        return pm


class _Results:
    """Matches and unmatched calls of all buckets, turned into :class:`Match` objects at the
    end, all at once: each side's calls are made in one pass over its table's columns
    (:meth:`CallTable.call_objs`), and the matches from zipped lists."""

    def __init__(self, rt: CallTable, ct: CallTable):
        self.rt, self.ct = rt, ct
        self.chunks: list[tuple[Chunk, np.ndarray, np.ndarray, bool]] = []
        self.un_r: list[np.ndarray] = []
        self.un_c: list[np.ndarray] = []

    def add(self, ch: Chunk, ra: np.ndarray, cb: np.ndarray, votes: bool = False) -> None:
        """The pairs of one chunk (positions into ``ra``/``cb``), in order. Only op chunks carry
        aligner pairs (``ch.pairs``), so only they can add N:M op groups. With ``votes``, its
        1:1 pairs vote for the module pair running them (:meth:`finish`)."""
        self.chunks.append((ch, ra, cb, votes))

    def unmatched(self, r: np.ndarray, c: np.ndarray) -> None:
        self.un_r.append(r)
        self.un_c.append(c)

    def finish(self, out: Alignment, votes: _Votes) -> None:
        """Everything in execution order: matches by their first reference call; the module
        pairs of voting chunks' 1:1 pairs added to ``votes``, in the order of the chunks."""
        if self.chunks:
            self._matches(out, votes)
        out.unmatched_ref = _in_order(self.rt, self.un_r)
        out.unmatched_cand = _in_order(self.ct, self.un_c)

    def _matches(self, out: Alignment, votes: _Votes) -> None:
        rows_r: list[np.ndarray] = []  # every match's calls, match after match (add order)
        rows_c: list[np.ndarray] = []
        n_r: list[np.ndarray] = []  # calls per match
        n_c: list[np.ndarray] = []
        methods: list[Any] = []
        notes: list[Any] = []
        keys, method, cost, voting = [], [], [], []
        for ch, ra, cb, votes_too in self.chunks:
            keys.append(self.rt.seq[ra[ch.a]])  # reference Call.seq of each match (sort key)
            voting.append(np.full(len(ch.a), votes_too))
            method.append(np.asarray(ch.method, dtype=object))
            cost.append(np.asarray(ch.cost, dtype=np.float64))
            if ch.pairs is None:
                one = np.ones(len(ch.a), dtype=np.int64)
                rows_r.append(ra[ch.a])
                rows_c.append(cb[ch.b])
                n_r.append(one)
                n_c.append(one)
                methods.extend(ch.method.tolist())
                notes.extend(ch.note.tolist())
                continue
            ps = ch.pairs
            rows_r.append(ra[np.array([x for p in ps for x in p.a], dtype=np.int64)])
            rows_c.append(cb[np.array([y for p in ps for y in p.b], dtype=np.int64)])
            n_r.append(np.array([len(p.a) for p in ps], dtype=np.int64))
            n_c.append(np.array([len(p.b) for p in ps], dtype=np.int64))
            methods.extend(p.method for p in ps)
            notes.extend(p.note for p in ps)
        m = np.concatenate(method)
        exact = (m == "path") | (m == "mapping")
        conf = np.where(exact, 1.0, np.fmax(0.05, np.fmin(1.0, 1.0 - np.concatenate(cost)
                                                         / MATCH_LIMIT))).tolist()
        all_r, all_c = np.concatenate(rows_r), np.concatenate(rows_c)
        cnt_r, cnt_c = np.concatenate(n_r), np.concatenate(n_c)
        one = (cnt_r == 1) & (cnt_c == 1)
        vote = np.nonzero(np.concatenate(voting) & one)[0]
        votes.add(self.rt.module[all_r[(np.cumsum(cnt_r) - cnt_r)[vote]]],
                  self.ct.module[all_c[(np.cumsum(cnt_c) - cnt_c)[vote]]])
        refs = _per_match(self.rt.call_objs(all_r), cnt_r)
        cands = _per_match(self.ct.call_objs(all_c), cnt_c)
        # Match(...) without the dataclass __init__: exactly the attributes it sets, right
        # after making each (CPython then keeps them inline under Match's shared keys: no
        # dict per match; made all before set, the objects would each get a dict)
        made: list[Match] = []
        append, new = made.append, object.__new__
        for r, c, me, cf, nt in zip(refs, cands, methods, conf, notes):
            mt = new(Match)
            mt.ref, mt.cand, mt.method, mt.confidence, mt.note = r, c, me, cf, nt
            append(mt)
        # N:M op groups in the order found (only aligner pairs can be groups)
        groups = np.nonzero(~one)[0]
        out.op_groups = [(tuple(c.op for c in mt.ref), tuple(c.op for c in mt.cand))
                         for mt in (made[k] for k in groups.tolist())
                         if mt.method != "mapping"]
        o = np.argsort(np.concatenate(keys), kind="stable").tolist()
        out.matches = [made[k] for k in o]


def _per_match(calls: list[Call], counts: np.ndarray) -> list[list[Call]]:
    """``calls`` cut into consecutive lists of ``counts`` calls."""
    if np.all(counts == 1):  # all 1:1 (the usual case)
        return [[c] for c in calls]
    ends = np.cumsum(counts).tolist()
    return [calls[s:e] for s, e in zip([0, *ends[:-1]], ends)]


def _in_order(t: CallTable, parts: list[np.ndarray]) -> list[Call]:
    if not parts:
        return []
    idx = np.concatenate(parts).astype(np.int64)
    return t.call_objs(idx[np.argsort(t.seq[idx], kind="stable")])


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


def _align_params(rr: list[Record], cr: list[Record], out: Alignment, mp: Mapping) -> None:
    rp = [r for r in rr if r.kind in PARAM_KINDS]
    cp = [r for r in cr if r.kind in PARAM_KINDS]
    if not rp and not cp:
        return
    ref_names = list(dict.fromkeys(_pname(r) for r in rp if r.kind in ("param", "grad")))
    cand_names = {_pname(r) for r in cp if r.kind in ("param", "grad")}
    names = _param_name_map(ref_names, cand_names, out.module_map, mp)

    acc = {**_accumulations(rp), **_accumulations(cp)}

    def key(r: Record, name: str) -> tuple[Any, ...]:
        return (r.step, r.kind, r.direction, r.role, r.arg, name, acc.get(id(r)))

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
    dropped = _drop_reordered_partials(out, acc)
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
    out.unmatched_params_ref = left_r + [pp.ref for pp in dropped]
    out.unmatched_params_cand = left_c + [pp.cand for pp in dropped]


def _accumulations(recs: list[Record]) -> dict[int, int | str]:
    """Gradient accumulation: a parameter's gradient recorded after each of several backward
    passes of a step. ``id(record) -> "last"`` for the final (accumulated) one, its backward
    index for the partial sums before it."""
    seen: dict[tuple[int, str], list[Record]] = defaultdict(list)
    for r in recs:
        if r.kind == "grad" and r.direction == "backward":
            seen[(r.step, _pname(r))].append(r)
    out: dict[int, int | str] = {}
    for rs in seen.values():
        out.update((id(r), k) for k, r in enumerate(rs[:-1]))
        out[id(rs[-1])] = "last"  # (the only one, without accumulation)
    return out


#: partial gradient sums further apart than this (statistics distance) hold other micro-batches
_PARTIAL_LIMIT = 0.25


def _drop_reordered_partials(out: Alignment, acc: dict[int, int | str]) -> list[ParamPair]:
    """Partial gradient sums of the same backward index whose statistics are unrelated: the
    candidate ran its micro-batches' backward passes in another order, so its partial sums hold
    other micro-batches (the final, accumulated gradients are paired and compared). They are
    left unmatched, not judged as a divergence. Returns the pairs taken out."""
    keep: list[ParamPair] = []
    dropped: list[ParamPair] = []
    for pp in out.params:
        if isinstance(acc.get(id(pp.ref)), int) and isinstance(acc.get(id(pp.cand)), int):
            d = float(row_distance(stats_rows([stat_row(pp.ref)]),
                                   stats_rows([stat_row(pp.cand)]))[0])
            if d > _PARTIAL_LIMIT:
                dropped.append(pp)
                continue
        keep.append(pp)
    out.params[:] = keep
    return dropped
