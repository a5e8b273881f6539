"""netparity.workflow.

What the one-step workflow writes in its output folder (``netparity step -o OUT``, ``netparity
demo -o OUT``), light to import: the CLI's output guard checks each entry before a spec is
loaded (:mod:`netparity.cli._io`).
"""

#: the traces the one-step workflow captures into ``OUT/<name>/`` (replaced through the trace
#: writer's claim: an old trace is set aside and deleted only once the new one is complete;
#: a folder that is not a netparity trace is refused, never removed)
STEP_TRACES = ("ref", "ref-noise", "cand", "ref-eval", "ref-eval-noise", "cand-eval", "ref-f64")
#: the report files it writes in ``OUT`` (atomically: :mod:`netparity.report.step`)
STEP_FILES = ("step.json", "compare-step0.json", "compare-step0.pairs.parquet", "report.html")
