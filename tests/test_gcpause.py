"""paused_gc: the cyclic collector is off inside, restored after (exceptions and nesting too),
and the bulk entry points that use it leave it as they found it."""

from __future__ import annotations

import gc

import pytest

from netparity.errors import NetparityError
from netparity.gcpause import paused_gc


def test_paused_and_restored_also_on_errors_and_nested():
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer block still wants it off
    assert gc.isenabled()
    with pytest.raises(ValueError), paused_gc():
        raise ValueError
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()  # it was off before: stays off
    finally:
        gc.enable()


def test_compare_leaves_the_collector_on_after_bad_input(tmp_path):
    import netparity

    with pytest.raises(NetparityError):
        netparity.compare(str(tmp_path / "missing"), str(tmp_path / "missing2"))
    assert gc.isenabled()
