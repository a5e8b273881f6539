"""CapturePolicy validates its directions and names every valid one in the error."""

from __future__ import annotations

import pytest

from netparity.capture.policy import CapturePolicy
from netparity.errors import UsageError


def test_update_is_a_valid_direction_and_named_in_the_error() -> None:
    assert CapturePolicy(directions=("forward", "update")).directions == ("forward", "update")
    with pytest.raises(UsageError, match=r"unknown direction 'sideways' \(forward, backward, update\)"):
        CapturePolicy(directions=("sideways",))
