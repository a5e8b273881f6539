"""The replay table of ``netparity step`` stays readable in a 120-column pipe: long module names
and long "not replayed" reasons squeezed the verdict column to three characters (seen on the
LLaMA -> MindSpore port at op level)."""

from __future__ import annotations

import io
import types

from netparity.report.sections.step import replay
from netparity.report.terminal import make_console, render_sections

REASON = ("the candidate's argument 0:0 [2, 4, 16, 16] has no counterpart among the reference's "
          "inputs (made by an op the capture does not see)")


def test_verdicts_stay_whole_and_reasons_go_under_the_table(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    rows = [{"module": f"model.layers.{i}.post_attention_layernorm",
             "cand_module": f"layers.{i}.attention_norm", "accumulated": 0.3, "local": None,
             "bound": None, "verdict": "not replayed", "reason": REASON} for i in range(3)]
    rows.append({"module": "model.layers.3.self_attn", "cand_module": "layers.3.attention",
                 "accumulated": 1.4, "local": 0.9, "bound": 3e-6, "verdict": "introduced",
                 "reason": ""})
    phase = types.SimpleNamespace(name="forward", status="fail", evidence={"replay": rows})
    buf = io.StringIO()
    render_sections(replay(types.SimpleNamespace(phases=[phase])), make_console(buf))
    text = buf.getvalue()
    assert all(len(line) <= 120 for line in text.splitlines())
    for i in (1, 2, 3):
        assert f"not replayed ({i})" in text
    assert "introduced" in text
    assert " ".join(text.split()).count(REASON) == 3  # each reason whole, under the table
