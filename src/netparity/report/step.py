"""The one-step parity report files: ``step.json``, ``report.html``, ``compare-step0.json``.

Example:
    >>> from netparity.report.step import write_reports     # doctest: +SKIP
    >>> write_reports(result)["html"]                        # doctest: +SKIP
    'netparity-step/report.html'
"""

from __future__ import annotations

import os
from pathlib import Path

from netparity.analyzers.step import StepResult
from netparity.report.html import write_html
from netparity.report.json_report import write_json, write_result

TITLE = "netparity one-step parity"


def write_reports(r: StepResult, out_dir: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """Write ``step.json`` and ``report.html`` (and the step-0 comparison JSON); returns paths.

    The HTML page is the phase table and the loss curves on top of every section of the step-0
    comparison (each module pair, error along depth, aligned structures).
    """
    out = Path(out_dir or r.out_dir)
    paths = {"json": str(out / "step.json"), "html": str(out / "report.html")}
    write_json(r.to_json(), paths["json"], indent=2)
    if r.compare_step0 is not None:
        paths["compare_json"] = str(out / "compare-step0.json")
        write_result(r.compare_step0, paths["compare_json"], histograms=False)
    write_html(r, paths["html"], title=TITLE)
    return paths
