"""The CSV output: the tables of report sections meant for CSV, one file.

For a comparison that is one row per compared tensor pair (calls' tensors, params, loss, data)
with every metric (:data:`netparity.report.sections.compare.CSV_COLUMNS`).

Example:
    >>> import tempfile, os
    >>> from netparity.compare.results import CompareResult
    >>> p = os.path.join(tempfile.mkdtemp(), "r.csv")
    >>> write_csv(CompareResult(), p)
    >>> open(p).readline().split(",")[:3]
    ['status', 'kind', 'direction']
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from typing import IO, Any

from netparity.outputs import atomic_output
from netparity.report.sections import Section, Table, for_output, sections_for


def _write(sections: Sequence[Section], f: IO[str]) -> None:
    w = csv.writer(f)
    for s in for_output(sections, "csv"):
        for b in s.for_output("csv"):
            if isinstance(b, Table):
                w.writerow(b.columns)
                if getattr(b.rows, "clean", False):  # None already spelled ""
                    w.writerows(b.rows)
                else:
                    w.writerows(["" if v is None else v for v in row] for row in b.rows)


def render_csv(sections: Sequence[Section]) -> str:
    """CSV text of the sections' CSV tables (one header per table; raw values, ``None`` empty)."""
    buf = io.StringIO()
    _write(sections, buf)
    return buf.getvalue()


def write_csv(result: Any, path: str | os.PathLike[str]) -> None:
    """Write the CSV output of one analyzer result (atomically), row by row: the rows are
    made as they are written (a comparison's pairs: :class:`~netparity.report.sections.
    compare._CsvRows`), never held as one text."""
    from netparity.report.pair_columns import gc_paused

    with gc_paused(), atomic_output(path, what="CSV report") as tmp, \
            open(tmp, "w", encoding="utf-8", newline="") as f:
        _write(sections_for(result, output="csv"), f)
