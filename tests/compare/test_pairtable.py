"""The array path of a comparison (pairs as columns of a PairTable, localised as arrays) gives
exactly what the per-pair path gives: the same pairs, metrics, verdicts, reasons, call
classification, first divergences and minimum tolerances -- on traces with NaN and NULL
statistics, odd arguments, rounding-noise gradients, failing, warning and passing pairs."""

from __future__ import annotations

import json
import math
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from netparity.analyzers.divergence import localise
from netparity.compare import engine
from netparity.compare.metrics import stats_metrics
from netparity.compare.results import CompareResult
from netparity.compare.verdicts import judge
from netparity.report.sections.compare import summary_lines
from netparity.trace import Record, TraceWriter, build_manifest

_FLOATS = ("min", "max", "mean", "std", "norm", "abs_sum")
_ARGS = (["0"], ["0", "1"], ["1", "0"], ["0", "kw.mask"], ["0", "1.2", "1.0"], [""])


def _stats(rng: np.random.Generator, n: int, scale: float) -> dict[str, float | int | None]:
    x = rng.standard_normal(n) * scale + rng.normal(0, scale)
    return {"min": float(x.min()), "max": float(x.max()), "mean": float(x.mean()),
            "std": float(x.std()), "norm": float(np.linalg.norm(x)),
            "abs_sum": float(np.abs(x).sum()), "nan": 0, "posinf": 0, "neginf": 0,
            "zeros": 0, "fp16_overflow": 0}


def _cand(st_: dict[str, float | int | None], kind: int, rng: np.random.Generator,
          ) -> dict[str, float | int | None]:
    """The candidate's statistics: equal, float noise, a warn-sized or a failing change, or
    something odd (NaN or NULL statistic, a NaN count that differs)."""
    out = dict(st_)
    if kind == 0:
        return out
    if kind in (1, 2, 3):
        f = 1 + {1: 1e-7, 2: 3e-4, 3: 0.2}[kind] * float(rng.standard_normal())
        for k in _FLOATS:
            v = out[k]
            out[k] = v * f if isinstance(v, float) else v
        return out
    if kind == 4:
        out["std"] = math.nan
    elif kind == 5:
        out["mean"] = None
    elif kind == 6:
        out["nan"] = 1
    elif kind == 7:
        out["norm"] = None
    return out


def _write(path: Path, spec: list[tuple[str, list[str], int, float, list[int]]], side: int,
           seed: int) -> None:
    """One op per spec entry, forward then backward (the same ops, tiny rounding-noise
    gradients for some), two steps; side 1 writes the candidate's statistics."""
    with TraceWriter(path, manifest=build_manifest(framework="numpy", device="cpu")) as w:
        for step in range(2):
            rng = np.random.default_rng(seed + step)
            for direction in ("forward", "backward"):
                for k, (op, args, n, scale, kinds) in enumerate(spec):
                    ev = w.next_event()
                    tiny = direction == "backward" and k % 3 == 0
                    base = dict(kind="op", module=f"net.l{k}", op=op, native=f"np.{op}",
                                call=0, event=ev, step=step, direction=direction,
                                dtype="float32", source=f"train.py:{10 + k}")
                    roles = [("input", a) for a in args] + [("output", "")]
                    for j, (role, arg) in enumerate(roles):
                        s = _stats(rng, n, 1e-9 if tiny else scale)
                        if tiny and side:  # independent noise of a zero value
                            s = _stats(np.random.default_rng(seed + 99 + k + j), n, 1e-9)
                        elif side:
                            s = _cand(s, kinds[j % len(kinds)], rng)
                        else:
                            _cand(s, kinds[j % len(kinds)], rng)  # same draws both sides
                        w.add(Record(role=role, arg=arg, shape=(n,), stats=s, **base))
            w.add(Record(kind="loss", op="loss", step=step, dtype="float32", shape=(),
                         stats=_stats(rng, 1, 1.0)))


def _both(tmp: Path, spec: list, seed: int) -> tuple[Path, Path]:
    ref, cand = tmp / "ref", tmp / "cand"
    _write(ref, spec, 0, seed)
    _write(cand, spec, 1, seed)
    return ref, cand


@contextmanager
def _records_path():
    """The engine's record path: every pair from records, none as rows of the scans."""
    was = engine.ROW_MODE
    engine.ROW_MODE = False
    try:
        yield
    finally:
        engine.ROW_MODE = was


def _same_as_record_path(fast: CompareResult, ref: Path, cand: Path, level: str,
                         **kw: object) -> None:
    """A localised row-mode result equals the record path's, JSON and summary."""
    assert fast.table is not None and fast.table.sides is not None  # row mode
    with _records_path():
        rec = localise(engine.compare(ref, cand, level=level, **kw))  # type: ignore[arg-type]
    assert rec.table is not None and rec.table.sides is None
    assert summary_lines(fast) == summary_lines(rec)
    assert json.dumps(fast.to_json()) == json.dumps(rec.to_json())


def _check(ref: Path, cand: Path, **kw: object) -> CompareResult:
    fast = engine.compare(ref, cand, level="op", **kw)  # type: ignore[arg-type]
    assert fast.table is not None
    _same_as_record_path(localise(engine.compare(ref, cand, level="op", **kw)),  # type: ignore[arg-type]
                         ref, cand, "op", **kw)
    slow = engine.compare(ref, cand, level="op", **kw)  # type: ignore[arg-type]
    objects = slow.pairs  # made now: the per-pair path from here on
    assert slow.table is None and len(objects) == fast.n_pairs() - len(fast.params) - len(
        fast.loss) - len(fast.data)
    # every pair judged as arrays equals the per-pair metrics and verdict of its records
    t = fast.table
    for i in np.nonzero(t.brow >= 0)[0].tolist():
        p = t.get(i)
        if "noise_floor" in p.metrics:
            continue
        want = stats_metrics(t.refs[i], t.cands[i], rtol=p.rtol, atol=p.atol)
        assert json.dumps(p.metrics) == json.dumps(want)
        assert (p.status, p.reason) == judge(want, p.rtol, p.atol)
    localise(fast)
    localise(slow)
    # the table was read, not made into objects, by localisation and the summary
    assert fast.table is not None
    lines = summary_lines(fast)
    assert fast.table is not None
    assert lines == summary_lines(slow)
    assert fast.status == slow.status and fast.counts() == slow.counts()
    assert [p.key for p in fast.worst_pairs(5)] == [p.key for p in slow.worst_pairs(5)]
    assert json.dumps(fast.to_json()) == json.dumps(slow.to_json())
    return fast


_SPEC = st.lists(
    st.tuples(st.sampled_from(["conv", "relu", "add", "matmul"]), st.sampled_from(_ARGS),
              st.integers(1, 40), st.sampled_from([1e-3, 1.0, 1e3]),
              st.lists(st.integers(0, 7), min_size=1, max_size=4)),
    min_size=2, max_size=12)


@settings(max_examples=12, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(spec=_SPEC, seed=st.integers(0, 1000), profile=st.sampled_from(["same", "cross"]))
def test_array_path_equals_per_pair_path(tmp_path_factory, spec, seed, profile):
    tmp = tmp_path_factory.mktemp("pt")
    ref, cand = _both(tmp, spec, seed)
    _check(ref, cand, profile=profile)


def test_every_kind_of_pair(tmp_path):
    """A fixed trace holding each case at once: passes, warnings, failures, NaN/NULL
    statistics, a differing NaN count, odd argument orders, rounding-noise gradients."""
    spec = [("conv", ["0", "1"], 30, 1.0, [0, 1]), ("relu", ["0"], 20, 1e3, [2]),
            ("add", ["1", "0"], 25, 1.0, [3, 0]), ("matmul", ["0", "kw.mask"], 10, 1e-3, [4, 5]),
            ("add", ["0", "1.2", "1.0"], 12, 1.0, [6, 7, 1]), ("relu", [""], 8, 1.0, [0])]
    r = _check(*_both(tmp_path, spec, 7), profile="cross")
    st_ = {p.status for p in r.pairs}
    assert {"pass", "warn", "fail"} <= st_
    reasons = " ".join(p.reason for p in r.pairs)
    assert "rounding noise" in reasons and "NaN position" in reasons
    assert r.first_divergence is not None and r.first_backward is not None


def test_pairs_list_semantics(tmp_path):
    """``result.pairs`` is a plain list once read: the table is dropped, edits stick."""
    spec = [("conv", ["0"], 30, 1.0, [3]), ("relu", ["0"], 20, 1.0, [0])]
    ref, cand = _both(tmp_path, spec, 1)
    r = engine.compare(ref, cand, level="op")
    n = r.n_pairs()
    assert r.table is not None and n > 0
    ps = r.pairs
    assert isinstance(ps, list) and r.table is None and ps is r.pairs
    ps[0].status = "fail"
    ps.append(ps[0])
    assert r.counts()["fail"] >= 1 and r.n_pairs() == n + 1
    r.pairs = []
    assert r.pairs == [] and CompareResult(pairs=ps[:1]).pairs == ps[:1]
    assert CompareResult().pairs == []


@pytest.mark.parametrize("payload", ["stats", "tensors"])
def test_real_traces_same_json(net, payload):
    """The compare tests' traces (forward/backward, params, loss; statistics or payloads):
    localised from the table or from the pair objects, the JSON is the same."""
    ref = net(payload=payload, noise=1e-6)
    cand = net(payload=payload, noise=1e-6, noise_seed=2, perturb={("net.l2", "forward"): 1e-2})
    fast = localise(engine.compare(ref, cand, level="module", profile="cross"))
    assert fast.table is not None
    slow = engine.compare(ref, cand, level="module", profile="cross")
    slow.pairs  # noqa: B018 -- made now: the per-pair path
    localise(slow)
    assert fast.first_divergence is not None and fast.first_divergence.module == "net.l2"
    assert json.dumps(fast.to_json()) == json.dumps(slow.to_json())


def test_calls_edited_before_localisation(tmp_path):
    """Calls reordered after the comparison: localisation notices that they are not the
    table's and classifies from the pair objects; the verdicts are the same."""
    spec = [("conv", ["0", "1"], 30, 1.0, [0, 3]), ("relu", ["0"], 20, 1.0, [2]),
            ("add", ["1", "0"], 25, 1.0, [1, 3])]
    ref, cand = _both(tmp_path, spec, 3)
    a = engine.compare(ref, cand, level="op")
    b = engine.compare(ref, cand, level="op")
    a.calls.reverse()
    b.calls.reverse()
    b.pairs  # noqa: B018 -- the per-pair path
    localise(a)
    localise(b)
    assert json.dumps(a.to_json()) == json.dumps(b.to_json())
    assert a.first_divergence is not None


def test_terminal_report_reads_the_table(tmp_path):
    """The full terminal report (worst pairs included) makes only the pairs it shows, and
    prints what the same result made into objects prints."""
    import io

    from netparity.report.terminal import make_console, render_terminal

    spec = [("conv", ["0", "1"], 30, 1.0, [0, 3]), ("relu", ["0"], 20, 1.0, [2, 1])]
    ref, cand = _both(tmp_path, spec, 5)
    texts = []
    for objects in (False, True):
        r = engine.compare(ref, cand, level="op")
        if objects:
            r.pairs  # noqa: B018
        localise(r)
        buf = io.StringIO()
        render_terminal(r, top=5, console=make_console(buf))
        assert (r.table is None) == objects
        if not objects:
            assert len(r.table.made) <= 8  # the worst pairs and the divergences' evidence
        texts.append(buf.getvalue())
    assert texts[0] == texts[1] and "worst" in texts[0]


def test_row_mode_cross_framework(tmp_path):
    """Two frameworks' traces (``benchmarks/align_speed.py``'s synthetic pair: different
    native names, N:M groups, batch norm's auxiliary outputs, inserted ops, float noise):
    the pairs made as rows of the scans give the record path's result, pair for pair."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from align_speed import Gen

    ref, cand = tmp_path / "ref", tmp_path / "cand"
    Gen(ref, "torch", 130, False).run()
    Gen(cand, "mindspore", 130, False).run()
    for level in ("op", "module"):
        fast = localise(engine.compare(ref, cand, level=level))
        t = fast.table
        assert t is not None and t.sides is not None and len(t) > 100
        assert fast.counts()["fail"] and fast.counts()["pass"]
        if level == "op":  # N:M groups (linear -> MatMul + BiasAdd, layer norm) took part
            assert any("+" in c.cand_op for c in fast.calls)
        _same_as_record_path(fast, ref, cand, level)


def test_row_mode_odd_calls(tmp_path):
    """Calls the row path leaves to records: a call one of whose records names another
    module, 1:1 calls whose tensors pair by shape and value (another count, another order);
    and a level "both" comparison (record path)."""
    from netparity.trace import TraceWriter

    def write(path: Path, side: int) -> None:
        rng = np.random.default_rng(3)
        with TraceWriter(path, manifest=build_manifest(framework=("numpy", "torch")[side],
                                                       device="cpu")) as w:
            for k in range(6):
                ev = w.next_event()
                base = dict(kind="op", module=f"m{k}", op="mul", native=f"n{side}.mul",
                            call=0, event=ev, dtype="float32")
                shapes = [(4, 3), (3,)] if (side or k % 2) else [(3,), (4, 3)]
                for j, shp in enumerate(shapes):
                    s = _stats(rng, int(np.prod(shp)), 1.0)
                    w.add(Record(role="input", arg=str(j), shape=shp, stats=s, **base))
                extra = [(4, 3)] * (2 if side and k == 3 else 1)
                for j, shp in enumerate(extra):
                    s = _stats(rng, 12, 1.0 + 0.1 * (k == 4))
                    rec = dict(base, module="other" if (k == 5 and j == 0 and side) else
                               base["module"])
                    w.add(Record(role="output", arg=str(j) if len(extra) > 1 else "",
                                 shape=shp, stats=s, **rec))

    ref, cand = tmp_path / "ref", tmp_path / "cand"
    write(ref, 0)
    write(cand, 1)
    fast = localise(engine.compare(ref, cand, level="op"))
    assert fast.counts()["fail"] >= 1 and len(fast.calls) >= 4
    _same_as_record_path(fast, ref, cand, "op")
    # some calls went to records, the others were paired as rows
    from netparity.align import align_traces
    from netparity.compare import rowpairs
    from netparity.trace import open_trace

    al = align_traces(open_trace(ref), open_trace(cand), level="op")
    sides = rowpairs.sides_of(al)
    assert sides is not None
    at = rowpairs.fast_calls(sides, al.matches, True, engine.AUX_OUTPUT_OPS).at
    assert 0 < sum(a < 0 for a in at) < len(at)
    both = engine.compare(ref, cand, level="both")
    assert both.table is not None and both.table.sides is None


def test_row_mode_groups_make_no_records(tmp_path, monkeypatch):
    """The synthetic cross-framework pair's N:M groups (linear -> MatMul + BiasAdd, layer
    norm) are paired from the scans' columns: the comparison makes records only for the
    tolerance look-ups (one pair per distinct signature), none for the groups, and gives
    the record path's result (``test_row_mode_cross_framework``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from align_speed import Gen

    from netparity.align import align_traces
    from netparity.compare import rowpairs
    from netparity.trace import open_trace
    from netparity.trace.fastrows import ScannedRows

    ref, cand = tmp_path / "ref", tmp_path / "cand"
    Gen(ref, "torch", 60, False).run()
    Gen(cand, "mindspore", 60, False).run()
    al = align_traces(open_trace(ref), open_trace(cand), level="op")
    sides = rowpairs.sides_of(al)
    assert sides is not None
    fast = rowpairs.fast_calls(sides, al.matches, True, engine.AUX_OUTPUT_OPS)
    todo = [k for k, a in enumerate(fast.at) if a < 0]
    groups = rowpairs.GroupRows(sides, al.matches, todo)
    grouped = [k for k in todo if al.matches[k].is_group]
    assert grouped and sorted(groups.pairs) == grouped  # every group, as rows
    made: list[int] = []
    records = ScannedRows.records

    def counted(self: ScannedRows, rows: object) -> object:
        got = records(self, rows)  # type: ignore[arg-type]
        made.append(len(got))
        return got

    monkeypatch.setattr(ScannedRows, "records", counted)
    r = engine.compare(ref, cand, level="op")
    assert r.table is not None and r.table.sides is not None and len(r.table) > 100
    assert sum(made) <= 8, made  # the tolerance signatures' records only


def test_int_tolerances_keep_their_type(tmp_path):
    """Tolerances given as ints land in every pair's metrics and fields as ints, in row
    mode as on the record path (the table keeps the values themselves, not floats)."""
    spec = [("conv", ["0", "1"], 30, 1.0, [0, 3]), ("relu", ["0"], 20, 1.0, [2, 1])]
    ref, cand = _both(tmp_path, spec, 7)
    fast = localise(engine.compare(ref, cand, level="op", rtol=0, atol=1))
    p = fast.pairs[0]
    assert type(p.rtol) is int and type(p.atol) is int and type(p.metrics["atol"]) is int
    fast = localise(engine.compare(ref, cand, level="op", rtol=0, atol=1))
    _same_as_record_path(fast, ref, cand, "op", rtol=0, atol=1)


@pytest.mark.slow
def test_row_mode_real_bert_groups(tmp_path):
    """Real captures: ``transformers.BertModel`` (PyTorch) against its MindSpore port at op
    level, with payloads -- ``addmm`` against ``MatMul + BiasAdd`` and the fused attention
    are N:M groups; every one is paired from the scans' columns and the localised result
    (JSON) is the record path's, for the faithful port and the LayerNorm-eps bug."""
    pytest.importorskip("torch", reason="PyTorch is not installed")
    pytest.importorskip("mindspore", reason="MindSpore is not installed")
    pytest.importorskip("transformers", reason="transformers is not installed")
    from tests.corpus import bert_pair

    from netparity.align import align_traces
    from netparity.compare import rowpairs
    from netparity.trace import open_trace

    ref = bert_pair.bert_model()
    bert_pair.capture_torch(ref, tmp_path / "ref")
    for bug in (None, "ln-eps"):
        cand_dir = tmp_path / f"cand-{bug}"
        cand = bert_pair.ms_bert(bug)
        bert_pair.load_weights(ref, cand)
        bert_pair.capture_mindspore(cand, cand_dir)
        al = align_traces(open_trace(tmp_path / "ref"), open_trace(cand_dir), level="op")
        sides = rowpairs.sides_of(al)
        assert sides is not None
        at = rowpairs.fast_calls(sides, al.matches, True, engine.AUX_OUTPUT_OPS).at
        todo = [k for k, a in enumerate(at) if a < 0]
        grouped = [k for k in todo if al.matches[k].is_group]
        assert grouped and sorted(rowpairs.GroupRows(sides, al.matches, todo).pairs) == grouped
        fast = localise(engine.compare(tmp_path / "ref", cand_dir, level="op"))
        assert bool(fast) == (bug is None)
        _same_as_record_path(fast, tmp_path / "ref", cand_dir, "op")


def test_call_results_are_slotted_and_their_json_keeps_the_field_order():
    """A CallResult has no ``__dict__`` (issue 33: ~200 bytes a call, not ~800); its JSON
    dict has every field, in the dataclass's order (the saved result's key order)."""
    import dataclasses

    from netparity.compare.results import CallResult, call_fields, call_json

    c = CallResult("k", "op", "m", "relu", "", "m", "relu", "forward", 0, 0, "", "", 3,
                   ["a"], ["b"], in_error=math.inf, module_call=7)
    assert not hasattr(c, "__dict__")
    names = [f.name for f in dataclasses.fields(CallResult)]
    assert list(call_fields(c)) == names == list(call_json(c))
    assert call_fields(c)["module_call"] == 7 and call_json(c)["in_error"] == "inf"
    assert call_json(c) == {**dataclasses.asdict(c), "in_error": "inf"}


def test_localise_makes_few_pairs_of_many_failing(tmp_path):
    """Localising an op-level comparison whose op pairs mostly fail or warn (the synthetic
    cross-framework pair) makes only the pairs it reports (the divergences' evidence), not
    an object per failing pair (issue 33: a 1M-op comparison's ~3M pairs); and
    ``pairs_with_status(status, level=...)`` gives, at every level, the pairs of the full list
    at that level."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from align_speed import Gen

    ref, cand = tmp_path / "ref", tmp_path / "cand"
    Gen(ref, "torch", 130, False).run()
    Gen(cand, "mindspore", 130, False).run()
    r = engine.compare(ref, cand, level="op")
    c = r.counts()
    assert c["fail"] + c["warn"] > 200
    localise(r)
    assert r.table is not None and len(r.table.made) <= 20
    for level in ("op", "module", "both"):
        t = engine.compare(ref, cand, level=level)
        o = engine.compare(ref, cand, level=level)
        o.pairs  # noqa: B018  (every pair made: the list is the truth)
        for status in ("fail", "warn", "pass"):
            for lv in ("op", "module"):
                want = [p.key for p in o.pairs_with_status(status)
                        if not p.call or p.call.startswith(lv + "|")]
                assert [p.key for p in t.pairs_with_status(status, level=lv)] == want
                assert [p.key for p in o.pairs_with_status(status, level=lv)] == want
