"""Report sections: what each analyzer's result shows, in a form every output can render.

A section is a name and a function from an analyzer result to a :class:`Section`: a headline
(with a status), key/value rows and blocks -- :class:`Table`, :class:`Plot`, :class:`Callout`
(a culprit box), :class:`Text`. The outputs (:mod:`~netparity.report.terminal` via rich,
:mod:`~netparity.report.json_report`, :mod:`~netparity.report.csv_report`,
:mod:`~netparity.report.html`) render sections and know nothing about analyzers. A block may be
meant for some outputs only (``only=("html",)``): a 10,000-row table belongs in the HTML and CSV
files, not on a terminal.

Sections are registered once, per result type, in :data:`SECTION_MODULES` order; a new analyzer
adds one module here (``@section("MyResult", "name")`` functions) and one line to that tuple.

Example:
    >>> from netparity.compare.results import CompareResult
    >>> [s.key for s in sections_for(CompareResult())][:2]
    ['verdict', 'structure']
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

#: modules whose ``@section`` functions make up the reports, in the order they are shown
SECTION_MODULES = (
    "netparity.report.sections.step",
    "netparity.report.sections.compare",
    "netparity.report.sections.summary",
    "netparity.report.sections.numerics",
    "netparity.report.sections.perf",
)
OUTPUTS = ("terminal", "json", "csv", "html")


@dataclass
class Text:
    """Plain lines; ``pre`` keeps them as a block, ``style`` is ``""``, ``"muted"`` or ``"mono"``.

    ``bold_prefix``: lines starting with it are emphasised (e.g. "first divergence").
    """

    lines: list[str]
    pre: bool = False
    style: str = ""
    bold_prefix: str = ""
    only: tuple[str, ...] = OUTPUTS


@dataclass
class Table:
    """Rows of values; ``status`` colours rows, ``highlight`` marks one (the culprit).

    ``mono`` names columns shown in a fixed-width font (names, sources); ``numeric`` columns are
    right-aligned and formatted with the one number formatter; ``filter`` adds a search box in
    HTML (``id`` is the table's element id). On a terminal the ``wrap`` columns wrap and the
    others stay on one line (``None``: every column folds).
    """

    title: str
    columns: list[str]
    rows: list[list[Any]]
    status: list[str] = field(default_factory=list)
    id: str = ""
    highlight: int | None = None
    mono: tuple[str, ...] = ()
    numeric: tuple[str, ...] = ()
    filter: bool = False
    wrap: tuple[str, ...] | None = None
    only: tuple[str, ...] = OUTPUTS


@dataclass
class Plot:
    """A line chart: ``series`` of ``(name, xs, ys)``; ``markers`` colour points per series.
    ``stacked``: bars instead, one per x, each series a segment stacked on the previous
    ones (the x values label the bars; non-numeric labels go in ``labels``)."""

    title: str
    series: list[tuple[str, list[float], list[float]]]
    log_y: bool = False
    x_label: str = ""
    y_label: str = ""
    markers: dict[str, list[str]] = field(default_factory=dict)
    highlight: tuple[str, int] | None = None
    height: int = 260
    only: tuple[str, ...] = ("json", "html")
    stacked: bool = False
    labels: list[str] = field(default_factory=list)


@dataclass
class Callout:
    """A finding named on the first screen (the culprit): title, name, verdict and evidence.

    ``lines[0]`` is the one-line statement, the rest the evidence; ``main`` makes it the
    report's culprit box. ``found`` is False for "none".
    """

    title: str
    lines: list[str]
    name: str = ""
    detail: str = ""
    verdict: str = ""
    status: str = ""
    main: bool = False
    anchor: str = ""
    found: bool = True
    only: tuple[str, ...] = OUTPUTS


@dataclass
class TreeView:
    """The interactive network view (:mod:`netparity.report.view`) of a tree model
    (:mod:`netparity.report.tree`): HTML only. ``model`` is the model or a function making
    it, called only when the page is rendered (a terminal report never builds it: the tree
    reads every pair of a comparison)."""

    model: dict[str, Any] | Callable[[], dict[str, Any]]
    only: tuple[str, ...] = ("html",)

    def get(self) -> dict[str, Any]:
        """The model (made now when it was given as a function)."""
        return self.model() if callable(self.model) else self.model


Block = Text | Table | Plot | Callout | TreeView


@dataclass
class Section:
    """One part of a report."""

    key: str
    title: str = ""
    headline: str = ""
    status: str = ""  # pass | warn | fail | skipped | "" (neutral)
    anchor: str = ""  # HTML id of the headline
    rows: list[tuple[str, Any]] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
    only: tuple[str, ...] = OUTPUTS

    def for_output(self, output: str) -> list[Block]:
        """The blocks meant for ``output``."""
        return [b for b in self.blocks if output in b.only]

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"key": self.key, "title": self.title, "headline": self.headline,
                             "status": self.status, "rows": [list(r) for r in self.rows]}
        d["blocks"] = [{"type": type(b).__name__.lower(), **asdict(b)}
                       for b in self.for_output("json")]
        for b in d["blocks"]:
            b.pop("only", None)
        return d


SectionFn = Callable[..., Section | list[Section] | None]
_REGISTRY: dict[str, list[tuple[str, SectionFn]]] = {}
_loaded = False


def section(result_type: str, name: str) -> Callable[[SectionFn], SectionFn]:
    """Register ``fn(result, **options) -> Section | None`` as section ``name`` of a result type
    (the class name, e.g. ``"CompareResult"``); sections show in registration order."""

    def deco(fn: SectionFn) -> SectionFn:
        entries = _REGISTRY.setdefault(result_type, [])
        entries[:] = [(n, f) for n, f in entries if n != name] + [(name, fn)]
        return fn

    return deco


def _load() -> None:
    global _loaded
    if not _loaded:
        for mod in SECTION_MODULES:
            importlib.import_module(mod)
        _loaded = True


def section_names(result_type: str) -> list[str]:
    """Registered section names of a result type, in order."""
    _load()
    return [n for n, _ in _REGISTRY.get(result_type, [])]


def sections_for(result: Any, *, names: Sequence[str] | None = None,
                 **options: Any) -> list[Section]:
    """The sections of ``result`` (all registered for its type, or only ``names``).

    ``options`` reach every section function that accepts them (e.g. ``top=`` for the
    compare report's worst-pairs table).
    """
    _load()
    out: list[Section] = []
    for name, fn in _REGISTRY.get(type(result).__name__, []):
        if names is not None and name not in names:
            continue
        s = fn(result, **options)
        if isinstance(s, Section):
            out.append(s)
        elif s:
            out.extend(s)  # a section may embed another result's sections
    return out


def for_output(sections: Sequence[Section], output: str) -> list[Section]:
    """The sections meant for ``output`` (``terminal``, ``json``, ``csv``, ``html``)."""
    return [s for s in sections if output in s.only]
