"""Sections of a comparison (:class:`~netparity.compare.results.CompareResult`).

verdict (headline, the culprit boxes, the summary lines), error along depth, parameters, loss
and data, aligned structure, unmatched, every tensor pair (HTML and CSV), the worst pairs
(terminal), settings.

Example:
    >>> from netparity.compare.results import CompareResult
    >>> print(summary_lines(CompareResult())[0])
    PASS: the runs agree (0 tensor pairs compared)
"""

from __future__ import annotations

from typing import Any

from netparity.compare.results import CallResult, CompareResult, Divergence, PairResult
from netparity.report.format import fmt
from netparity.report.sections import Callout, Plot, Section, Table, Text, TreeView, section
from netparity.trace.coverage import ranges

#: verdict colours shared by the outputs that draw (HTML plots and rows)
COLOURS = {"pass": "#2e7d32", "warn": "#e69500", "fail": "#c62828", "unknown": "#888",
           "incomplete": "#e69500"}

#: one row per pair in the CSV file (metric columns empty when not applicable)
CSV_COLUMNS = (
    "status", "kind", "direction", "step", "rank", "module", "op", "role", "arg", "cand_module",
    "cand_op", "ref_dtype", "cand_dtype", "ref_shape", "cand_shape", "basis", "max_abs",
    "mean_abs", "max_rel", "mean_rel", "rmse", "cosine", "within", "q50", "q90", "q99",
    "nan_mismatch", "inf_mismatch", "min_atol", "min_rtol", "rtol", "atol", "tol_source",
    "source", "reason", "key",
)


def _where(d: Divergence) -> str:
    name = d.module or "<root>"
    if d.op:
        name += f" ({d.op})"
    if d.cand_module and d.cand_module != d.module:
        name += f"  <->  cand {d.cand_module}"
    return name


def divergence_lines(title: str, d: Divergence | None) -> list[str]:
    """Plain lines describing one divergence (used by every output)."""
    if d is None:
        # a passing run shows no line that says "diverge": name the direction and say it agrees
        return [f"{title.replace('first divergence', '').strip(' ()') or title}: every pair agrees"]
    m = d.metrics
    lines = [
        f"{title}: {_where(d)} -- {d.verdict.upper()} here ({d.status})",
        f"    {d.direction}, step {d.step}, rank {d.rank}"
        + (f", source {d.source}" if d.source else "")
        + (f" / cand {d.cand_source}" if d.cand_source and d.cand_source != d.source else ""),
    ]
    if m.get("basis") == "tensors":
        lines.append(
            f"    max abs err {fmt(m.get('max_abs'))}, max rel err {fmt(m.get('max_rel'))}, "
            f"cosine {fmt(m.get('cosine'))}, {fmt(100 * (1 - float(m.get('within', 1))))}% "
            f"elements outside rtol={fmt(m.get('rtol'))} atol={fmt(m.get('atol'))}"
        )
    elif m.get("basis") == "stats":
        lines.append(
            f"    judged from statistics only (weaker): error >= {fmt(m.get('max_abs_lb'))}"
        )
    if m.get("reason") and m.get("basis") != "tensors":
        lines.append(f"    {m['reason']}")
    if d.verdict == "propagated":
        lines.append(f"    inputs already differ (rel err {fmt(d.in_error)}): look earlier")
    if d.note:
        lines.append(f"    note: {d.note}")
    return lines


def unit(t: dict[str, Any]) -> str:
    """Unit suffix of a minimum-tolerance entry ("x rms" for RMS-relative atol)."""
    return " x rms" if t.get("atol_unit") == "rms" else ""


def headline(result: CompareResult) -> str:
    """The verdict line: PASS / WARN / FAIL with counts, or INCOMPLETE and the first gap in the
    evidence (:func:`incomplete_lines` says the other gaps, and that a FAIL is also
    incomplete)."""
    counts = result.counts()
    n = sum(counts.values())
    status = result.status
    gaps = result.incomplete
    at = _shown_step(result)
    if status == "incomplete":
        agree = "agree" if counts["warn"] == 0 else f"agree, {counts['warn']} warn"
        return (f"INCOMPLETE: {gaps[0]} (no verdict on missing evidence; the {n} pairs both "
                f"hold{at} {agree})")
    if status == "pass":
        return f"PASS: the runs agree ({n} tensor pairs compared{at})"
    if status == "warn":
        return (f"WARN: the runs agree within a looser tolerance ({counts['warn']} of {n} pairs"
                f"{at} warn)")
    return f"FAIL: the runs diverge ({counts['fail']} of {n} pairs{at} fail, {counts['warn']} warn)"


def _shown_step(result: CompareResult) -> str:
    """`` in step N`` when the result is one step's details of a comparison made a step at a
    time (:func:`netparity.analyzers.ranks.compare_steps`: its counts, parameters and
    tolerances are the lead step's), else ``""``."""
    lead = result.settings.get("step_shown") if result.steps else None
    return f" in step {lead}" if lead is not None else ""


def _findings(result: CompareResult) -> list[str]:
    """The lines under the culprits: params, loss, data, minimum tolerances, unmatched, notes."""
    lines: list[str] = []
    at = _shown_step(result)
    for kind, label in (("grad", f"parameter gradients{at}"),
                        ("param", f"updated parameters{at}")):
        allp = [p for p in result.params if p.kind == kind]
        bad = result.divergent_params(kind)
        if allp:
            names = ", ".join(p.module for p in bad[:5]) + (" ..." if len(bad) > 5 else "")
            lines.append(f"{label}: {len(bad)} of {len(allp)} diverge ({names})" if bad else
                         f"{label}: all {len(allp)} agree")
    for p in result.loss:
        lines.append(
            f"loss step {p.step}: {p.status}"
            + (f" (abs err {fmt(p.metrics.get('max_abs', p.metrics.get('max_abs_lb')))})"
               if p.status != "pass" else "")
        )
    bad_data = [p for p in result.data if p.status != "pass"]
    if bad_data:
        lines.append(f"data: {len(bad_data)} input record(s) differ -- the runs were not fed the same data")
    for t in result.min_tolerance:
        lines.append(
            f"minimum passing tolerance{at}: atol>={fmt(t['min_atol'])}{unit(t)} at "
            f"rtol={fmt(t['rtol'])}, or rtol>={fmt(t['min_rtol'])} at atol={fmt(t['atol'])}"
            f"{unit(t)} ({t['pairs']} pairs"
            + (f", {t['nonfinite_mismatch']} with NaN/Inf mismatches that no tolerance passes"
               if t["nonfinite_mismatch"] else "")
            + ")"
        )
    um = result.unmatched
    parts = [f"{len(um.get(k, []))} {k.replace('_', ' ')}" for k in
             ("calls_ref", "calls_cand", "params_ref", "params_cand", "tensors") if um.get(k)]
    if parts:
        lines.append(f"unmatched{at}: " + ", ".join(parts))
    lines += [f"note: {x}" for x in result.notes]
    if result.status == "fail" and not any(
            d is not None for d in (result.first_divergence, result.first_backward,
                                    result.first_update)):
        # a failing verdict with no diverging call must still say what fails
        failing: dict[str, int] = {}
        for q in result.pairs_with_status("fail"):
            if q.status == "fail":
                what = {"param": "parameter values", "grad": "parameter gradients",
                        "loss": "loss", "data": "data"}.get(q.kind, f"{q.kind} tensors")
                failing[what] = failing.get(what, 0) + 1
        lines.insert(0, "no module or op call diverges; what fails: " + (", ".join(
            f"{n} {w}" for w, n in failing.items()) or "nothing was matched to compare"))
    return lines


def _divergences(result: CompareResult) -> list[tuple[str, Divergence | None, bool]]:
    out: list[tuple[str, Divergence | None, bool]] = [
        ("first divergence (forward)", result.first_divergence, True),
        ("first divergence (backward)", result.first_backward, False),
    ]
    if result.first_update is not None:
        out.append(("first divergence (optimizer)", result.first_update, False))
    return out


def incomplete_lines(result: CompareResult) -> list[str]:
    """The gaps in the evidence the headline does not say, one ``INCOMPLETE:`` line each (all of
    them under a FAIL), and how to compare only what both sides hold."""
    gaps = result.incomplete
    if not gaps:
        return []
    shown = gaps if result.status == "fail" else gaps[1:]
    lines = [f"INCOMPLETE: {g}" for g in shown]
    if any(" has steps " in g for g in gaps):
        common = sorted(set(result.coverage.get("ref", {}).get("steps", []))
                        & set(result.coverage.get("cand", {}).get("steps", [])))
        if common:
            lines.append(f"    (--steps {ranges(common)} compares only the steps both hold)")
    return lines


def summary_lines(result: CompareResult) -> list[str]:
    """The first screen as plain text: verdict, gaps in the evidence, culprit, backward,
    params, loss."""
    lines = [headline(result), *incomplete_lines(result)]
    for title, d, _ in _divergences(result):
        lines += divergence_lines(title, d)
    return lines + _findings(result)


def _callout(title: str, d: Divergence | None, main: bool) -> Callout:
    lines = divergence_lines(title, d)
    if d is None:
        return Callout(title=title[:1].upper() + title[1:], lines=lines, found=False)
    return Callout(title=title[:1].upper() + title[1:], lines=lines, name=d.module or "<root>",
                   detail=d.op, verdict=d.verdict, status=d.status, main=main,
                   anchor="culprit" if main else f"np-{d.direction}")


@section("CompareResult", "verdict")
def verdict(result: CompareResult, **_: Any) -> Section:
    """Verdict, the first divergences (the culprit first), then the other findings."""
    s = Section("verdict", headline=headline(result), status=result.status, anchor="verdict")
    gaps = incomplete_lines(result)
    if gaps:
        s.blocks.append(Text(gaps, pre=True))
    runs = result.runs
    if runs:
        s.blocks.append(Text([f"ref: {runs.get('ref', {})}", f"cand: {runs.get('cand', {})}"],
                             style="muted mono", only=("html",)))
    for title, d, main in _divergences(result):
        s.blocks.append(_callout(title, d, main))
    s.blocks.append(Text(_findings(result), pre=True))
    return s


@section("CompareResult", "view")
def view(result: CompareResult, **_: Any) -> Section | None:
    """Both module trees side by side, coloured by verdict (HTML: interactive)."""
    if not result.calls and not result.params:
        return None
    from netparity.report.tree import compare_tree

    return Section("view", "Network view: both module trees, aligned",
                   blocks=[TreeView(lambda: compare_tree(result))], only=("html",))


def _depth_plot(result: CompareResult, direction: str) -> Plot | None:
    calls = sorted((c for c in result.calls if c.direction == direction),
                   key=lambda c: (c.step, c.order))
    if not calls:
        return None
    levels = sorted({c.level for c in calls})
    series, markers = [], {}
    hl = None
    d = result.first_divergence if direction == "forward" else (
        result.first_backward if direction == "backward" else None)
    key = d.key if d is not None else None
    for lv in levels:
        cs = [c for c in calls if c.level == lv]
        name = f"{lv} output rel err"
        series.append((name, [float(i) for i in range(len(cs))],
                       [max(c.out_error, 1e-17) for c in cs]))
        markers[name] = [COLOURS.get(c.status, "#888") for c in cs]
        for i, c in enumerate(cs):
            if c.key == key:
                hl = (name, i)
    return Plot(title=f"{direction}: normwise relative error per matched call (execution order)",
                series=series, log_y=True, markers=markers, highlight=hl,
                x_label="call index in execution order", y_label="rmse / rms(ref)")


@section("CompareResult", "depth")
def depth(result: CompareResult, **_: Any) -> Section | None:
    """Error along network depth, forward and backward (charts)."""
    plots = [p for p in (_depth_plot(result, d) for d in ("forward", "backward")) if p]
    if not plots:
        return None
    return Section("depth", title="Error along network depth", blocks=list(plots))


_PAIR_COLUMNS = ["status", "kind", "dir", "step", "tensor", "basis", "max abs", "max rel",
                 "mean rel", "cosine", "p99 abs", "within", "rtol/atol", "reason"]


def pairs_table(pairs: list[PairResult], table_id: str, title: str = "",
                only: tuple[str, ...] = ("json", "html")) -> Table:
    """The tensor-pair table of the HTML report (formatted metrics)."""
    rows = []
    for p in pairs:
        m = p.metrics
        rows.append([p.status, p.kind, p.direction, p.step, p.name, m.get("basis", "")]
                    + [m.get(k, m.get(k + "_lb")) for k in
                       ("max_abs", "max_rel", "mean_rel", "cosine", "q99", "within")]
                    + [f"{fmt(p.rtol)}/{fmt(p.atol)}", p.reason])
    return Table(title=title, columns=list(_PAIR_COLUMNS), rows=rows,
                 status=[p.status for p in pairs], id=table_id, mono=("tensor",),
                 numeric=("step", "max abs", "max rel", "mean rel", "cosine", "p99 abs",
                          "within", "rtol/atol"), filter=True, only=only)


@section("CompareResult", "params")
def params(result: CompareResult, **_: Any) -> Section | None:
    """Parameter gradients and updated parameters that diverge."""
    if not result.params:
        return None
    bad = [p for p in result.params if p.status != "pass"]
    title = (f"Parameters ({len(bad)} of {len(result.params)} diverge)" if bad else
             f"Parameters (all {len(result.params)} agree)")
    return Section("params", title=title, blocks=[pairs_table(bad, "np-params")])


@section("CompareResult", "loss")
def loss(result: CompareResult, **_: Any) -> Section | None:
    """Loss and data records."""
    if not (result.loss or result.data):
        return None
    return Section("loss", title="Loss and data",
                   blocks=[pairs_table(result.loss + result.data, "np-loss")])


@section("CompareResult", "structure")
def structure(result: CompareResult, output: str = "", **_: Any) -> Section | None:
    """The aligned calls, forward first, the culprit highlighted (JSON and HTML)."""
    if output in ("terminal", "csv"):
        return None  # not shown there: no row per call made for nothing
    culprit = result.first_divergence.key if result.first_divergence else None
    calls: list[CallResult] = sorted(result.calls,
                                     key=lambda c: (c.direction != "forward", c.step, c.order))
    rows = [[c.status, c.origin, c.direction, c.step, c.level, c.name,
             c.cand_module + (f"/{c.cand_op}" if c.level == "op" else ""), c.method,
             c.in_error, c.out_error, c.source, c.note] for c in calls]
    hl = next((i for i, c in enumerate(calls) if c.key == culprit), None)
    t = Table(title="", columns=["status", "origin", "dir", "step", "level", "reference",
                                 "candidate", "match", "input err", "output err", "source",
                                 "note"],
              rows=rows, status=[c.status for c in calls], id="np-calls", highlight=hl,
              mono=("reference", "candidate", "source"),
              numeric=("step", "input err", "output err"), filter=True, only=("json", "html"))
    return Section("structure", title="Aligned structure (reference \u2194 candidate)", blocks=[t])


@section("CompareResult", "unmatched")
def unmatched(result: CompareResult, **_: Any) -> Section:
    """What alignment could not pair (never dropped), up to 500 items per kind."""
    blocks: list[Any] = []
    for k, items in result.unmatched.items():
        if not items:
            continue
        lines = [f"{i.get('name', i.get('call', ''))}  "
                 f"{ {x: y for x, y in i.items() if x != 'name'} }" for i in items[:500]]
        if len(items) > 500:
            lines.append(f"... {len(items) - 500} more")
        blocks.append(Table(title=f"{k.replace('_', ' ')} ({len(items)})", columns=["item"],
                            rows=[[x] for x in lines], mono=("item",), only=("json", "html")))
    if not blocks:
        blocks.append(Text(["nothing unmatched"], only=("json", "html")))
    return Section("unmatched", title="Unmatched", blocks=blocks)


@section("CompareResult", "pairs")
def pairs(result: CompareResult, output: str = "", **_: Any) -> Section | None:
    """Every tensor pair: formatted in HTML, every metric as a CSV row."""
    if output == "terminal":
        return None  # nothing for the terminal: do not make every pair
    if output == "csv":  # rows made as the CSV writer asks for them (streamed to the file)
        return Section("pairs", title="All tensor pairs", blocks=[
            Table(title="pairs", columns=list(CSV_COLUMNS),
                  rows=_CsvRows(result), only=("csv",))])  # type: ignore[arg-type]
    return Section("pairs", title="All tensor pairs", blocks=[
        pairs_table(result.pairs, "np-pairs", only=("html",)),
        Table(title="pairs", columns=list(CSV_COLUMNS), rows=list(_CsvRows(result)),
              status=[p.status for p in result.all_pairs()], only=("csv",)),
    ])


class _CsvRows:
    """The CSV rows of every pair, made a chunk at a time while iterated (a 100k-op
    comparison's ~300k rows are never all held; the pairs of a pair table are read from its
    columns, not made: :func:`netparity.report.pair_columns.chunks`). Cells are raw values,
    ``None`` already written as ``""`` (``clean``)."""

    clean = True

    def __init__(self, result: CompareResult):
        self.result = result

    def __len__(self) -> int:
        return self.result.n_pairs()

    def __iter__(self) -> Any:
        from netparity.report.pair_columns import chunks

        result = self.result
        for cols in chunks(result, csv_cells=True):
            yield from _csv_rows(cols)
        rest = CompareResult()
        rest.pairs = result._others()
        for cols in chunks(rest, csv_cells=True):
            yield from _csv_rows(cols)


def _csv_rows(cols: dict[str, list[Any]]) -> Any:
    """The CSV rows of one chunk of :func:`~netparity.report.pair_columns.chunks`."""
    shape: dict[Any, str] = {}

    def joined(s: Any) -> str:
        t = tuple(s)
        got = shape.get(t)
        if got is None:
            got = shape[t] = "x".join(map(str, t))
        return got

    out = []
    for c in CSV_COLUMNS:
        col = cols[c]
        if c in ("ref_shape", "cand_shape"):
            col = [joined(s) for s in col]
        elif None in col:
            col = ([""] * len(col) if col.count(None) == len(col) else
                   ["" if v is None else v for v in col])
        out.append(col)
    return zip(*out)


@section("CompareResult", "worst")
def worst(result: CompareResult, top: int = 10, **_: Any) -> Section | None:
    """The ``top`` pairs with the largest error, failures first (terminal)."""
    ws = [p for p in result.worst_pairs(top) if p.status != "pass"] or result.worst_pairs(top)
    if not ws:
        return None
    rows = [[p.status, p.name, p.direction, p.step, p.metrics.get("basis", ""),
             p.metrics.get("max_abs", p.metrics.get("max_abs_lb")),
             p.metrics.get("max_rel", p.metrics.get("max_rel_lb")), p.metrics.get("cosine"),
             p.metrics.get("q99"), p.metrics.get("within"), f"{fmt(p.rtol)}/{fmt(p.atol)}"]
            for p in ws]
    return Section("worst", blocks=[Table(
        title=f"worst {len(ws)} pairs",
        columns=["status", "tensor", "dir", "step", "basis", "max abs", "max rel", "cosine",
                 "p99 abs", "within", "rtol/atol"],
        rows=rows, status=[p.status for p in ws], numeric=("max abs", "max rel", "cosine",
                                                           "p99 abs", "within"),
        only=("terminal", "json"))])


@section("CompareResult", "settings")
def settings(result: CompareResult, **_: Any) -> Section | None:
    """The comparison's settings (tolerances, level, steps, mapping)."""
    if not result.min_tolerance:
        return None
    return Section("settings", title="Settings",
                   blocks=[Text([str(result.settings)], pre=True, only=("json", "html"))])
