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
from typing import Any

from netparity.outputs import write_text_atomic
from netparity.report.sections import Section, Table, for_output, sections_for


def render_csv(sections: Sequence[Section]) -> str:
    """CSV text of the sections' CSV tables (one header per table; raw values, ``None`` empty)."""
    buf = io.StringIO()
    w = csv.writer(buf)
    for s in for_output(sections, "csv"):
        for b in s.for_output("csv"):
            if isinstance(b, Table):
                w.writerow(b.columns)
                for row in b.rows:
                    w.writerow(["" if v is None else v for v in row])
    return buf.getvalue()


def write_csv(result: Any, path: str | os.PathLike[str]) -> None:
    """Write the CSV output of one analyzer result (atomically)."""
    write_text_atomic(path, render_csv(sections_for(result)), what="CSV report")
