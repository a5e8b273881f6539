"""The HTML report's charts: every series of a stacked bar chart gets its own colour (the step
breakdown has seven phases; with a six-colour palette "other" was drawn in "data"'s blue)."""

from __future__ import annotations

import re

from netparity.report.html import svg_stacked_bars


def test_seven_phases_are_seven_colours() -> None:
    phases = ["data", "compile", "forward", "backward", "comm", "optimizer", "other"]
    svg = svg_stacked_bars([(p, [0, 1], [1.0, 2.0]) for p in phases])
    legend = re.findall(r'<rect[^>]*fill="(#[0-9a-f]{6})"/><text[^>]*>([a-z]+)<', svg)
    assert [name for _, name in legend] == phases
    assert len({colour for colour, _ in legend}) == len(phases)
