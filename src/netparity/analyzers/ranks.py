"""Many ranks: each rank compared on its own (in worker processes or on a Dask cluster), the
results merged into one verdict.

``compare`` without ``--rank`` of two traces that share several ranks compares every shared
rank. :func:`compare_rank` is the per-rank task: a plain picklable function of (trace paths,
rank, options) returning a compact JSON-ready summary (status, counts, first divergences, gaps,
notes) -- or, for the one rank whose details are shown, its whole result as
:meth:`~netparity.compare.results.CompareResult.to_json`. The engines run :func:`rank_task`:
the summary, plus the rank's result (pickled) when the rank may be the lead rank, so the lead
rank's result comes back from its one comparison (no rank is compared twice).
:func:`compare_ranks` runs the tasks on an engine and :func:`merge` makes one
:class:`~netparity.compare.results.CompareResult`:

* the **lead rank** is the rank a user must look at first: the worst pair status (fail, then
  warn, then pass), then the earliest first divergence (step, then rank), then the lowest rank;
  its calls, pairs, worst pairs and first divergences are the result's (``--json``,
  ``--csv``, ``--html`` show that rank's pairs; ``--rank N`` shows another's);
* ``ranks``: one summary per compared rank (which agree, which diverge and where);
* the gaps of every rank (``rank N: ...``) and the ranks one side lacks make the coverage's
  ``incomplete`` lines, so INCOMPLETE means what it means for one rank.

Engines (same tasks, same merge, the same result whatever runs them): ``workers=1`` in this
process one rank after another; ``workers=N`` a pool of N spawned processes; ``scheduler`` a
``dask.distributed`` scheduler address or ``Client`` (the traces must be readable at the same
paths by its workers). Dask rather than Ray: pure Python and pip-installable with no daemon to
run, its ``LocalCluster`` runs in-process for tests, and a ``dask-scheduler``/``dask-worker``
pair (or an existing HPC/Kubernetes deployment) is all a multi-machine job needs.

Example:
    >>> _lead_key({"rank": 3, "pair_status": "fail", "first_step": 0})
    (-2, 0, 3)
"""

from __future__ import annotations

import dataclasses
import os
import pickle
from collections.abc import Callable, Iterator
from typing import Any

from netparity.errors import NetparityError, UsageError

#: the options :func:`compare_rank` passes to the comparison (plain, picklable values)
OPTIONS = ("mapping", "level", "steps", "rtol", "atol", "tolerances", "fp64_ref", "k",
           "profile", "noise_run", "noise_k")
_RANK = {"pass": 0, "unknown": 0, "warn": 1, "fail": 2}


def _path(x: Any) -> Any:
    """A trace given as an open :class:`~netparity.trace.Trace`: its path (tasks open it)."""
    p = getattr(x, "path", None)
    return str(p) if p is not None and not isinstance(x, (str, os.PathLike)) else x


def compare_rank(ref: str, cand: str, rank: int, options: dict[str, Any],
                 detail: bool = False, check_rows: bool = False) -> dict[str, Any]:
    """Compare rank ``rank`` of two traces (paths) with ``options`` (keywords of
    :func:`netparity.analyzers.divergence.compare` named in :data:`OPTIONS`).

    Returns the rank's summary ``{"rank", "status", "pair_status", "counts", "n_pairs",
    "first_divergence", "first_backward", "first_update", "first_step", "incomplete",
    "notes"}``, plus ``"result"`` (the whole result as JSON) when ``detail``. ``check_rows``:
    first check the rank's index rows on both sides (:meth:`~netparity.trace.Trace.check_rows`).

    Raises:
        NetparityError: what the comparison raises (a corrupt index, a step not held...).
    """
    out, result = _compare(ref, cand, rank, options, check_rows)
    if detail:
        out["result"] = result.to_json()
    return out


def _compare(ref: str, cand: str, rank: int, options: dict[str, Any],
             check_rows: bool) -> tuple[dict[str, Any], Any]:
    """The rank's summary (see :func:`compare_rank`) and its result."""
    from netparity.analyzers.divergence import compare
    from netparity.trace import open_trace

    trs = [open_trace(ref)]  # opened once here: checked (check_rows), then compared
    try:
        trs.append(open_trace(cand))
        if check_rows:
            for tr in trs:
                tr.check_rows([rank])
        result = compare(*trs, rank=rank, workers=1, **options)
    finally:
        for tr in trs:
            tr.close()
    return _summary(result, rank), result


def _summary(result: Any, rank: int) -> dict[str, Any]:
    """What a merged result keeps of one rank's (or step's) comparison."""
    firsts = {a: getattr(result, a) for a in ("first_divergence", "first_backward",
                                               "first_update")}
    steps = [d.step for d in firsts.values() if d is not None]
    return {
        "rank": rank, "status": result.status, "pair_status": result.pair_status,
        "counts": result.counts(), "n_pairs": result.n_pairs(),
        **{a: dataclasses.asdict(d) if d is not None else None for a, d in firsts.items()},
        "first_step": min(steps) if steps else None,
        "incomplete": result.incomplete, "notes": list(result.notes),
    }


def _lead_key(s: dict[str, Any]) -> tuple[int, float, int]:
    fs = s.get("first_step")
    return (-_RANK.get(s["pair_status"], 0), fs if fs is not None else float("inf"), s["rank"])


def _may_lead(s: dict[str, Any], lowest: int) -> bool:
    """Whether rank ``s`` may be the lead rank, whatever the other ranks find: it diverges, or
    has a first divergence, or is the ``lowest`` rank (the lead when every rank passes with
    none) -- the lead rank always answers yes (see :func:`_lead_key`)."""
    return _RANK.get(s["pair_status"], 0) > 0 or s["first_step"] is not None or \
        s["rank"] == lowest


#: in a pool's worker process: the smallest :func:`_lead_key` whose result a worker has sent
#: so far (a shared array of 3 floats, see :func:`_pool`), else None
_BEST: Any = None


def _init_worker(best: Any) -> None:
    global _BEST
    _BEST = best


def rank_task(ref: str, cand: str, rank: int, options: dict[str, Any], lowest: int,
              check_rows: bool = False) -> dict[str, Any]:
    """The per-rank task every engine runs: :func:`compare_rank`'s summary, plus ``"detail"``
    (the result pickled) when this rank may be the lead rank (:func:`_may_lead`) and, in a
    pool, no rank with a smaller lead key has sent its result yet: the lead rank's result
    always comes back (so no rank is compared twice) and few others do."""
    out, result = _compare(ref, cand, rank, options, check_rows)
    if not _may_lead(out, lowest):
        return out
    if _BEST is not None:
        key = _lead_key(out)
        with _BEST.get_lock():
            if key >= tuple(_BEST[:]):
                return out
            _BEST[:] = list(key)
    out["detail"] = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
    return out


# ---- engines: each runs calls of rank_task and yields their results in rank order ------------
Task = tuple[str, str, int, dict[str, Any], int, bool]


def _in_process(tasks: list[Task]) -> Iterator[dict[str, Any]]:
    for ref, cand, rank, options, lowest, check_rows in tasks:
        out, result = _compare(ref, cand, rank, options, check_rows)
        if _may_lead(out, lowest):
            out["detail"] = result  # the object itself: nothing to pickle in this process
        yield out


def _pool(workers: int) -> Callable[[list[Task]], Iterator[dict[str, Any]]]:
    def run(tasks: list[Task]) -> Iterator[dict[str, Any]]:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        # spawn: a worker inherits no threads, locks or open SQLite handles of this process
        ctx = multiprocessing.get_context("spawn")
        best = ctx.Array("d", [float("inf")] * 3)
        ex = ProcessPoolExecutor(min(workers, len(tasks)), mp_context=ctx,
                                 initializer=_init_worker, initargs=(best,))
        try:
            futs = [ex.submit(rank_task, *t) for t in tasks]
            for f in futs:  # rank order: the first rank that fails is the error raised
                try:
                    yield f.result()
                except BrokenProcessPool as e:
                    raise NetparityError(
                        f"a worker process comparing rank {tasks[futs.index(f)][2]} died "
                        f"({e or 'killed: out of memory?'}); --workers 1 compares in this "
                        "process") from None
        finally:  # an error (or an interrupt): drop the ranks not started, end the pool
            ex.shutdown(wait=True, cancel_futures=True)
    return run


def _dask(scheduler: Any) -> Callable[[list[Task]], Iterator[dict[str, Any]]]:
    try:
        from distributed import Client
    except ImportError:
        raise UsageError("--scheduler needs Dask: pip install 'distributed' (or leave "
                         "--scheduler out to compare on this machine)") from None

    def run(tasks: list[Task]) -> Iterator[dict[str, Any]]:
        own = not isinstance(scheduler, Client)
        try:
            client = Client(scheduler, set_as_default=False) if own else scheduler
        except (OSError, ValueError, TimeoutError) as e:
            raise UsageError(f"--scheduler {scheduler}: cannot reach it ({e})") from None
        try:
            # pure=False: every call is its own task (the traces may have changed since)
            futs = [client.submit(rank_task, *t, pure=False) for t in tasks]
            try:
                for f in futs:
                    yield f.result()
            finally:
                client.cancel(futs)
        finally:
            if own:
                client.close()
    return run


def default_workers(n_ranks: int) -> int:
    """``min(ranks, CPUs)``: the pool size ``workers=None`` means."""
    return max(1, min(n_ranks, os.cpu_count() or 1))


def compare_ranks(ref: Any, cand: Any, *, ranks: list[int] | None = None,
                  workers: int | None = None, scheduler: Any = None, progress: Any = None,
                  check_rows: bool = False, **options: Any) -> Any:
    """Compare every rank both traces hold (or ``ranks``), merged into one result.

    Args:
        ref, cand: trace paths (or open traces: their paths are handed to the tasks).
        ranks: the ranks to compare (default: those both traces hold).
        workers: worker processes (default :func:`default_workers`; 1 = this process).
        scheduler: a Dask scheduler address or ``distributed.Client`` (replaces ``workers``).
        progress: a :class:`netparity.report.progress.Progress`: one tick per rank.
        check_rows: each task first checks its rank's index rows on both sides (what
            ``compare`` does, in parallel, instead of checking every rank before).
        options: see :data:`OPTIONS`.

    Raises:
        UsageError: fewer than one shared rank, an option not in :data:`OPTIONS`, Dask
            missing or its scheduler unreachable; else what a rank's comparison raises.
    """
    from netparity.trace import open_trace

    bad = set(options) - set(OPTIONS)
    if bad:
        raise UsageError(f"compare_ranks: unknown option(s) {sorted(bad)}")
    if workers is not None and workers < 1:
        raise UsageError("--workers must be >= 1")
    opts = {k: _path(v) for k, v in options.items()}
    refp, candp = str(_path(ref)), str(_path(cand))
    trs = [open_trace(refp), open_trace(candp)]
    try:
        held = [list(t.ranks) for t in trs]
    finally:
        for t in trs:
            t.close()
    if ranks is None:
        ranks = sorted(set(held[0]) & set(held[1]))
    if not ranks:
        raise UsageError(f"no rank in both traces (ref has {held[0]}, cand {held[1]})")
    if scheduler is not None:
        engine = _dask(scheduler)
    elif (workers or default_workers(len(ranks))) > 1 and len(ranks) > 1:
        engine = _pool(workers or default_workers(len(ranks)))
    else:
        engine = _in_process
    if progress is not None:
        progress.stage("compare ranks", total=len(ranks))
    summaries: list[dict[str, Any]] = []
    kept: dict[str, Any] | None = None  # the best lead so far with its result
    for s in engine([(refp, candp, r, opts, min(ranks), check_rows) for r in ranks]):
        d = s.pop("detail", None)
        if d is not None and (kept is None or _lead_key(s) < _lead_key(kept)):
            kept = {**s, "result": d}
        summaries.append(s)
        if progress is not None:
            progress.advance()
    lead = min(summaries, key=_lead_key)["rank"]
    if kept is None or kept["rank"] != lead:  # cannot happen (_may_lead): say so loudly
        raise NetparityError(f"internal: the lead rank {lead}'s result did not come back")
    detail = {"rank": lead, "result": kept["result"]}
    if isinstance(detail["result"], bytes):  # from a worker process or a cluster
        detail["result"] = pickle.loads(detail["result"])
    return merge(summaries, detail, held)


def merge(summaries: list[dict[str, Any]], detail: dict[str, Any],
          held: list[list[int]]) -> Any:
    """One result: ``detail`` (the lead rank's :func:`compare_rank` with its result, as JSON or
    the :class:`~netparity.compare.results.CompareResult` itself) with
    every rank's summary (``ranks``) and gaps; ``held`` = the ranks each side holds."""
    from netparity.compare.results import CompareResult
    from netparity.trace.coverage import ranges

    result = detail["result"]
    if not isinstance(result, CompareResult):  # from a cluster: the result as JSON
        result = CompareResult.from_json(result)
    lead = detail["rank"]
    gaps: list[str] = []
    if held[0] != held[1]:
        every = set(held[0]) | set(held[1])
        for side, mine, other in zip(("reference", "candidate"), held, held[::-1]):
            if set(other) - set(mine):
                gaps.append(f"{side} has ranks {ranges(mine)} of {ranges(every)} "
                            "(--rank N compares one)")
    for s in summaries:
        gaps += [f"rank {s['rank']}: {ln}" for ln in s["incomplete"]]
    compared = [s["rank"] for s in summaries]
    cov = dict(result.coverage)
    cov["incomplete"] = gaps
    cov["scope"] = {**cov.get("scope", {}), "rank": None, "ranks": compared}
    result.coverage = cov
    result.settings = {**result.settings, "rank": lead, "ranks": compared}
    result.ranks = [{k: v for k, v in s.items() if k != "result"} for s in summaries]
    result.notes = [_merged_note(summaries, "rank", lead, "one by one"), *result.notes]
    return result


def _merged_note(summaries: list[dict[str, Any]], unit: str, lead: int, how: str) -> str:
    """What a merged result says of its parts (``unit``: "rank" or "step"): which diverge,
    which agree, whose details are shown."""
    from netparity.trace.coverage import ranges

    done = [s[unit] for s in summaries]
    bad = [s[unit] for s in summaries if s["pair_status"] in ("fail", "warn")]
    return (f"{unit}s {ranges(done)} compared {how}: "
            + (f"{unit}(s) {ranges(bad)} diverge, " if bad else "")
            + (f"{len(done) - len(bad)} {unit}(s) agree" if len(bad) < len(done)
               else f"no {unit} agrees")
            + f"; the details shown are {unit} {lead}'s (--{unit}{'s' if unit == 'step' else ''}"
            + " N for another)")


# ---- one rank, a step at a time --------------------------------------------------------------
#: index rows (both sides, the rank compared) from which ``compare`` goes a step at a time by
#: itself (``--by-step`` forces either way): ~0.5M operators per side
STEP_ROWS = 1 << 22


def _step_key(s: dict[str, Any]) -> tuple[int, int]:
    """The lead step: the worst pair status, then the earliest step."""
    return (-_RANK.get(s["pair_status"], 0), s["step"])


def compare_steps(ref: Any, cand: Any, *, rank: int | None = None, steps: list[int] | None = None,
                  progress: Any = None, **options: Any) -> Any:
    """Compare one rank of two traces a step at a time, merged into one result: memory holds
    one step's comparison and the lead step's result, however many steps there are (each
    step's comparison reads only that step's rows of a columnar copy whose columns were not
    read whole before: a copy of more than 2^20 rows is checked without keeping them).

    The **lead step** is the first step with the worst pair status (the first step when all
    pass); its calls, pairs and minimum tolerances are the result's, as the lead rank's are in
    :func:`merge`; each direction's first divergence is the earliest step's (one pass's).
    ``result.steps``: one summary per step (status, counts, first divergences). The coverage
    is the whole comparison's (every step, from the indexes), so INCOMPLETE means what it
    means in one pass. A step's pairs are those of a comparison of
    that step alone: alignment pairs calls within a step, so they are the one-pass pairs
    unless the module map learnt in earlier steps decided one (measured equal on the synthetic
    25k x 4 pair: 298,480 pairs, same keys and statuses).

    Args:
        ref, cand: traces (paths, opened here and closed after, or open traces).
        rank: the rank (default 0; naming it narrows the scope as in ``compare``).
        steps: the steps to compare (default: every step both hold).
        progress: a :class:`netparity.report.progress.Progress`: one tick per step.
        options: see :data:`OPTIONS` (not ``fp64_ref`` or ``noise_run``: whole-run evidence).

    Raises:
        UsageError: an option not in :data:`OPTIONS`, an fp64 or noise trace, a step not in
            both traces; else what a step's comparison raises.
    """
    from netparity.analyzers.divergence import compare
    from netparity.compare.coverage import coverage
    from netparity.compare.results import Divergence
    from netparity.trace import open_trace

    bad = set(options) - set(OPTIONS) | {k for k in ("fp64_ref", "noise_run")
                                         if options.get(k) is not None}
    if bad:
        raise UsageError(f"compare_steps: option(s) {sorted(bad)} not taken step by step")
    mine = [isinstance(t, (str, os.PathLike)) for t in (ref, cand)]
    trs = [open_trace(t) if m else t for t, m in zip((ref, cand), mine)]
    try:
        r = rank if rank is not None else 0
        both = sorted(set(trs[0].steps(r)) & set(trs[1].steps(r)))
        chosen = both if steps is None else sorted(set(steps))
        missing = [x for x in chosen if x not in both]
        if missing:
            raise UsageError(f"step(s) {missing} not in both traces (common: {both})")
        if not chosen:
            raise UsageError("nothing to compare: the traces have no step in common")
        # the gaps of the whole comparison, from the indexes (what one pass reports)
        cover = coverage(trs[0], trs[1], rank=r, rank_given=rank is not None,
                         level=options.get("level") or "module", steps=steps)
        if progress is not None:
            progress.stage("compare steps", total=len(chosen))
        summaries: list[dict[str, Any]] = []
        kept: tuple[dict[str, Any], Any] | None = None
        for st in chosen:
            result = compare(trs[0], trs[1], rank=rank, steps=[st], **options)
            out = {**_summary(result, r), "step": st}
            if kept is None or _step_key(out) < _step_key(kept[0]):
                kept = (out, result)
            summaries.append(out)
            del result  # (held only while it may lead)
            if progress is not None:
                progress.advance()
    finally:
        for t, m in zip(trs, mine):
            if m:
                t.close()
    assert kept is not None
    lead, result = kept[0]["step"], kept[1]
    # each direction's first divergence is the earliest step's, as in one pass (a backward
    # bug in step 0 shows forward in step 1), whichever step's details are shown
    for attr in ("first_divergence", "first_backward", "first_update"):
        got = [x for x in summaries if x[attr] is not None]
        setattr(result, attr, Divergence(**min(got, key=lambda x: x["step"])[attr])
                if got else None)
    result.coverage = {**cover, "scope": {**cover.get("scope", {}), "steps": chosen}}
    result.settings = {**result.settings, "steps": chosen, "step_shown": lead}
    result.steps = [{k: v for k, v in s.items() if k != "incomplete"} for s in summaries]
    result.notes = [_merged_note(summaries, "step", lead, "one at a time"), *result.notes]
    return result


def by_step(ref: Any, cand: Any, rank: int | None, steps: list[int] | None,
            asked: bool | None, options: dict[str, Any]) -> bool:
    """Whether ``compare`` goes a step at a time: ``asked`` (``--by-step`` /
    ``--no-by-step``), else when the comparison spans several steps and the rank's index rows
    of both sides reach :data:`STEP_ROWS`; never with an fp64 or noise trace (whole-run
    evidence: ``--by-step`` with one is refused)."""
    whole_run = options.get("fp64_ref") is not None or options.get("noise_run") is not None
    if asked is False:
        return False
    if whole_run:
        if asked:
            raise UsageError("--by-step cannot be used with --fp64-ref or --noise")
        return False
    r = rank if rank is not None else 0
    n_steps = len(steps) if steps is not None else len(
        set(ref.steps(r)) & set(cand.steps(r)))
    if n_steps < 2:
        return False
    return bool(asked) or ref.count(rank=r) + cand.count(rank=r) >= STEP_ROWS
