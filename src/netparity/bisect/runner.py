"""``netparity bisect``: run the step of two specs and bisect the candidate's modules between
the candidate's configuration and the reference's until the smallest region that carries the
loss difference is found (docs/bisect.md).

A region is switched back to the reference configuration by *substitution*: while the
candidate's step runs, the region's output is what the reference's paired module returns on
the candidate's inputs of that call -- in the reference's dtype with autocast off (a dtype
pair; the autograd graph is kept) or converted across frameworks (a PyTorch -> MindSpore pair;
the loss of the step is a forward quantity, the substituted output is a constant to the
candidate's autodiff). Everything else of the step (data, loss, optimizer) stays the
candidate's.

Example:
    >>> r = run_bisect("ref_spec.py", "cand_spec.py")      # doctest: +SKIP
    >>> r.region, r.runs_total                               # doctest: +SKIP
    ('blocks.2.attn', 11)
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from netparity.bisect.search import FIX, REPRODUCE, Run, Search, bisect_range, bisect_tree
from netparity.errors import UsageError

__all__ = ["RESULT_VERSION", "BisectResult", "module_pairs", "run_bisect"]

RESULT_VERSION = 1
#: the loss agrees when within this many times the reference's noise run's distance
NOISE_FACTOR = 4.0
#: and never tighter than this many float32 ulps of the loss
MIN_ULPS = 8


@dataclass
class BisectResult:
    """What ``netparity bisect`` found; truthy when the two runs' losses agree."""

    ref: dict[str, Any]
    cand: dict[str, Any]
    ref_loss: float
    cand_loss: float
    noise_loss: float
    tol: float
    modules: int  # modules of the candidate model (the size the run budget is measured on)
    verdict: str  # "agree" | "found" | "spread" | "incomplete"
    region: str | None = None
    ref_region: str | None = None  # the reference's module paired with ``region``
    chain: list[str] = field(default_factory=list)
    fix_share: float | None = None
    reproduce_share: float | None = None
    runs: list[Run] = field(default_factory=list)
    pinned: dict[str, list[str]] = field(default_factory=dict)
    fixed_runs: int = 3  # the reference, its noise run and the candidate
    notes: list[str] = field(default_factory=list)
    #: the operator-level stage inside ``region`` (empty: not attempted); see :func:`_op_stage`
    ops: dict[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.verdict == "agree"

    @property
    def runs_total(self) -> int:
        return self.fixed_runs + len(self.runs)

    @property
    def budget(self) -> float:
        """The issue's bound on the runs: 2 * log2(modules) + 2."""
        return 2 * math.log2(max(self.modules, 2)) + 2

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["runs"] = [r.to_json() for r in self.runs]
        if self.ops.get("runs"):
            d["ops"] = {**self.ops, "runs": [r.to_json() for r in self.ops["runs"]]}
        return {"kind": "bisect", "version": RESULT_VERSION, **d,
                "runs_total": self.runs_total, "budget": self.budget,
                "thresholds": {"fix": FIX, "reproduce": REPRODUCE, "noise_factor": NOISE_FACTOR}}


def _sub(framework: str) -> Any:
    return importlib.import_module(f"netparity.frameworks.{framework}.substitute")


def _parent(path: str) -> str:
    return path.rpartition(".")[0]


def module_pairs(ref_paths: set[str], cand_paths: set[str],
                 param_pairs: list[tuple[str, str]]) -> dict[str, str]:
    """``{candidate module: reference module}``: the same path on both sides, else the modules
    whose parameters the weight map pairs (``(ref param, cand param)``), and their parents
    level by level while both sides have one (``layer1.0.bn1d`` -> ``layer1.0.bn1``,
    ``end_point`` -> ``fc``).

    Example:
        >>> module_pairs({"", "fc", "l.0", "l.0.bn1"}, {"", "end_point", "l.0", "l.0.bn1d"},
        ...              [("fc.weight", "end_point.weight"), ("l.0.bn1.weight", "l.0.bn1d.gamma")])
        {'': '', 'l.0': 'l.0', 'end_point': 'fc', 'l.0.bn1d': 'l.0.bn1'}
    """
    out = {c: c for c in sorted(cand_paths & ref_paths)}
    for r, c in param_pairs:
        rm, cm = _parent(r), _parent(c)
        while cm and rm and cm in cand_paths and rm in ref_paths:
            if cm in out and out[cm] != rm and cm in ref_paths:
                break  # the same name on both sides wins
            out.setdefault(cm, rm)
            rm, cm = _parent(rm), _parent(cm)
    return out


class _Side:
    """One spec, its starting state, and runs of its step on one batch."""

    def __init__(self, spec: Any, seed: int) -> None:
        from netparity.ckpt.mapping import state_of
        from netparity.frameworks.models import set_weights

        self.spec, self.seed = spec, seed
        self.sub = _sub(spec.framework)
        self.pinned = self.sub.pin_random(spec.model)
        st = state_of(spec.model)
        self.start = {k: np.array(v, copy=True) for k, v in st.items()}
        self.bf16 = {k: "bfloat16" for k in st if st.dtypes.get(k) == "bfloat16"}
        floats = [st.dtypes.get(k) for k in st if str(st.dtypes.get(k)).startswith(("float",
                                                                                     "bfloat"))]
        self.dtype: str = str(max(set(floats), key=floats.count)) if floats else "float32"
        self._set = set_weights

    def restore(self, arrays: dict[str, np.ndarray] | None = None) -> None:
        self._set(self.spec.model, arrays if arrays is not None else self.start, self.bf16)

    def step(self, x: Any, y: Any) -> float:
        from netparity.workflow.step import _reseed, _user_step

        _reseed(self.seed, 0)
        loss = _user_step(self.spec, 0, x, y)
        if not math.isfinite(loss):
            raise UsageError(f"{self.spec.source}: the step's loss is {loss}: bisect needs a "
                             "finite loss on both sides (see `netparity numerics`)")
        return loss


def _load(ref_src: str, cand_src: str, options: dict[str, Any], ref_options: dict[str, Any],
          cand_options: dict[str, Any], seed: int) -> tuple[Any, Any, list[tuple[str, str]]]:
    from netparity.analyzers.step import judge_setup
    from netparity.seeding import seed_everything
    from netparity.workflow.spec import load_spec
    from netparity.workflow.step import _load_weights, _map_weights

    sides = []
    for src, extra in ((ref_src, ref_options), (cand_src, cand_options)):
        seed_everything(seed)
        sides.append(load_spec(src, defaults={"steps": 1}, **{**options, **extra}))
    ref, cand = sides
    facts = _map_weights(ref, cand)
    verdict = judge_setup(facts)
    if verdict.status == "fail" or facts.name_map is None:
        raise UsageError(f"{cand.source}: its weights cannot be paired with {ref.source}'s: "
                         f"{verdict.summary or facts.mapping_error or 'no mapping'}")
    _load_weights(ref, cand, facts)
    return ref, cand, [(p.ref, p.cand) for p in facts.name_map.pairs]


def _substitute(ref: _Side, cand: _Side, ref_path: str) -> Callable[..., Any]:
    """The function that computes a candidate module's output in the reference configuration."""
    from netparity.frameworks.models import run_module

    if ref.spec.framework == cand.spec.framework == "torch":
        return ref.sub.native_call(ref.spec.model, ref_path, ref.dtype)

    def call(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> Any:
        ins = [(a, v, str(ref.dtype if v.dtype.kind == "f" else d))
               for a, v, d in cand.sub.as_inputs(args, kwargs)]
        got = run_module(ref.spec.model, ref_path, ins, train=True)
        return cand.sub.like([v for _, v in got], out)

    return call


def run_bisect(ref_src: str, cand_src: str, *, options: dict[str, Any] | None = None,
               ref_options: dict[str, Any] | None = None,
               cand_options: dict[str, Any] | None = None, seed: int = 0, batch: int = 0,
               max_runs: int = 64, on_run: Callable[[str], None] | None = None,
               ops: bool = True) -> BisectResult:
    """Bisect the candidate's modules for the region that carries the loss difference.

    Args:
        ref_src, cand_src: spec files or modules (see :mod:`netparity.workflow.spec`).
        options, ref_options, cand_options: ``build()`` options for both / one side.
        seed: seeds both builds and every run the same way.
        batch: which of the reference's batches the step runs on (both sides get it).
        max_runs: the most bisection runs (after the reference, noise and candidate runs).
        on_run: called with one line after each run (progress).
        ops: once a module is found, bisect its operators too (:func:`_op_stage`).
    """
    from netparity.compare.noise import perturb_last_bit
    from netparity.frameworks.models import rounding_jitter
    from netparity.frameworks.registry import get_adapter

    say = on_run or (lambda _line: None)
    ref_spec, cand_spec, param_pairs = _load(ref_src, cand_src, dict(options or {}),
                                             dict(ref_options or {}), dict(cand_options or {}),
                                             seed)
    if batch >= len(ref_spec.batches):
        raise UsageError(f"{ref_src}: batch {batch} asked for, the spec provides "
                         f"{len(ref_spec.batches)}")
    ref, cand = _Side(ref_spec, seed), _Side(cand_spec, seed)
    x, y = ref_spec.batches[batch]

    # the reference, twice: as it is and with the last bit of everything jittered (its noise)
    ref.restore()
    ref_loss = ref.step(x, y)
    rng = np.random.default_rng(seed + 7919)
    ref.restore({k: perturb_last_bit(v, rng) if k not in ref.bf16 else v
                 for k, v in ref.start.items()})
    with rounding_jitter(ref_spec.model, "", seed + 15_485_863):
        noise_loss = ref.step(perturb_last_bit(np.asarray(x), rng), y)
    ref.restore()
    tol = max(NOISE_FACTOR * abs(noise_loss - ref_loss),
              MIN_ULPS * float(np.spacing(np.float32(abs(ref_loss)))))
    say(f"reference loss {ref_loss:.9g} (noise run {noise_loss:.9g}: tolerance {tol:.3g})")

    # the candidate as it is, watched: which modules its step calls, in what order
    cand.restore()
    box: list[float] = []
    seen = cand.sub.observe(cand_spec.model, lambda: box.append(cand.step(x, y)))
    cand_loss = box[0]
    say(f"candidate loss {cand_loss:.9g} (difference {cand_loss - ref_loss:+.3g})")

    ref_paths = {p for p, _ in get_adapter(ref_spec.framework).named_modules(ref_spec.model)}
    cand_paths = [p for p, _ in get_adapter(cand_spec.framework).named_modules(cand_spec.model)]
    pairs = module_pairs(ref_paths, set(cand_paths), param_pairs)
    result = BisectResult(
        ref={"spec": ref_spec.source, "framework": ref_spec.framework,
             "description": ref_spec.description},
        cand={"spec": cand_spec.source, "framework": cand_spec.framework,
              "description": cand_spec.description},
        ref_loss=ref_loss, cand_loss=cand_loss, noise_loss=noise_loss, tol=tol,
        modules=len(cand_paths), verdict="agree",
        pinned={"ref": ref.pinned, "cand": cand.pinned})
    if abs(cand_loss - ref_loss) <= tol:
        return result

    children = _tree(seen, pairs)
    if not children.get(""):
        raise UsageError(f"{cand_src}: no module of the candidate can be paired with one of "
                         "the reference and called on tensors: nothing to bisect")
    subs = {c: _substitute(ref, cand, pairs[c]) for units in children.values() for c in units}

    def measure(switched: tuple[str, ...]) -> float:
        ref.restore()
        cand.restore()
        with cand.sub.substituted(cand_spec.model, {c: subs[c] for c in switched}):
            return cand.step(x, y)

    def log(r: Run) -> None:
        say(f"run {r.index}: {r.purpose} {_names(r.kept or r.switched)}: loss {r.loss:.9g} "
            f"({r.decision})")

    try:
        s: Search = bisect_tree(children.get, measure, ref_loss=ref_loss, cand_loss=cand_loss,
                                tol=tol, max_runs=max_runs, on_run=log)
    finally:
        ref.restore()
        cand.restore()
    result.runs, result.chain = s.runs, s.chain
    result.region, result.fix_share, result.reproduce_share = (s.region, s.fix_share,
                                                               s.reproduce_share)
    result.ref_region = pairs.get(s.region) if s.region is not None else None
    if not s.complete:
        result.verdict = "incomplete"
        result.notes.append(f"stopped after {max_runs} runs (--max-runs)")
    elif s.region is None:
        result.verdict = "spread"
        result.notes.append("no single module fixes the difference: it is spread over several "
                            "modules, or made outside the modules (the loss, the step's own "
                            "code)")
    else:
        result.verdict = "found"
        if s.chain and s.region != s.chain[-1]:
            result.notes.append(f"the search narrowed to {s.chain[-1]}, which does not fix it "
                                f"alone: the difference is made by {s.region}'s own "
                                f"operations (outside its child modules) or spread over its "
                                f"parts")
        if ops and s.region:
            result.ops = _op_stage(ref, cand, s.region, x, y, (ref_loss, tol), max_runs,
                                   log)
    return result


def _op_stage(ref: _Side, cand: _Side, region: str, x: Any, y: Any,
              ref_tol: tuple[float, float], max_runs: int,
              log: Callable[[Run], None]) -> dict[str, Any]:
    """Bisect the operator calls of the candidate's module ``region``: halves of its
    low-precision calls run in the reference's dtype (``frameworks/torch/op_switch.py``),
    over a binary tree of call ranges, with the same thresholds as the module search.
    ``{"switchable": False, "note": why}`` when no operator-level switch exists for the pair."""
    if not ref.spec.framework == cand.spec.framework == "torch":
        return {"switchable": False,
                "note": f"operators: not switchable for this pair: {ref.spec.framework} -> "
                        f"{cand.spec.framework} ports share no operator-level switch (the "
                        f"operators of one framework cannot run in the other's configuration); "
                        f"the module is the smallest region"}
    from netparity.frameworks.torch import op_switch

    module = cand.spec.model.get_submodule(region)
    cand.restore()
    box: list[float] = []
    seen = op_switch.observe_ops(module, ref.dtype, lambda: box.append(cand.step(x, y)))
    cand.restore()
    units = [c.index for c in seen.calls if c.low]
    out: dict[str, Any] = {"switchable": bool(units), "module": region, "calls": len(seen.calls),
                           "units": len(units), "found": [], "runs": [],
                           "budget": 2 * math.log2(max(len(units), 2)) + 2}
    if not units:
        out["note"] = (f"operators: not switchable for this pair: none of {region}'s "
                       f"{len(seen.calls)} operator calls computes in a lower precision than the "
                       f"reference's {ref.dtype} (no float16/bfloat16 tensor, dtype, autocast or "
                       f"emulation): the difference is not one of dtype inside it")
        return out
    by_index = {c.index: c for c in seen.calls}

    def measure(switched: tuple[str, ...]) -> float:
        ref.restore()
        cand.restore()
        return float(op_switch.run_switched(module, ref.dtype, seen,
                                            frozenset(int(n[3:]) for n in switched),
                                            lambda: cand.step(x, y)))

    try:
        s = bisect_range([f"op#{i}" for i in units], measure, ref_loss=ref_tol[0],
                         cand_loss=box[0], tol=ref_tol[1], max_runs=max_runs, on_run=log)
    finally:
        ref.restore()
        cand.restore()
    out["runs"] = s.runs
    out["fix_share"], out["reproduce_share"] = s.fix_share, s.reproduce_share
    if not s.complete:
        out["note"] = f"operators: stopped after {max_runs} runs (--max-runs)"
    elif s.region is None:
        out["note"] = (f"operators: switching all {len(units)} low-precision operator calls of "
                       f"{region} back does not fix the difference: it is made elsewhere in "
                       f"the module (not by a dtype)")
    elif len(units) > 1 and not s.chain:
        out["note"] = (f"operators: no part of {region}'s {len(units)} low-precision operator "
                       f"calls fixes the difference alone: they act together")
    if s.region is not None:
        lo, _, hi = s.region.partition(" .. ")
        first, last = int(lo[3:]), int((hi or lo)[3:])
        out["found"] = [by_index[i].to_json() for i in units if first <= i <= last]
    return out


def _names(paths: list[str]) -> str:
    if len(paths) <= 3:
        return ", ".join(paths) or "(none)"
    return f"{paths[0]} .. {paths[-1]} ({len(paths)} modules)"


def _tree(seen: dict[str, dict[str, Any]], pairs: dict[str, str]) -> dict[str, list[str]]:
    """Each called module's regions in execution order: its children that compute something
    and have a counterpart callable on tensors; a child without one is looked through (its own
    children stand in its place)."""
    kids: dict[str, list[str]] = {}
    for p in sorted(seen, key=lambda q: seen[q]["order"]):
        kids.setdefault(_parent(p), []).append(p)

    def units(node: str) -> list[str]:
        out: list[str] = []
        for c in kids.get(node, []):
            s = seen[c]
            if s["passive"]:
                continue
            if c in pairs and s["plain"]:
                out.append(c)
            else:
                out.extend(units(c))
        return out

    tree: dict[str, list[str]] = {}
    todo = [""]
    while todo:
        node = todo.pop()
        tree[node] = units(node)
        todo.extend(tree[node])
    return tree
