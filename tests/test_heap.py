"""netparity.heap: with the threshold fixed, arrays a command drops go back to the system
instead of staying in the C heap between live objects (what a large compare's peak was made of)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from netparity.heap import return_large_blocks

_CHILD = """
import sys
import numpy as np
from netparity.heap import return_large_blocks
if sys.argv[1] == "fixed":
    assert return_large_blocks()
def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmRSS")) / 1024
np.ones(6 << 17).sum()        # a 6 MiB block mapped and unmapped: glibc raises its threshold
blocks = [np.ones(6 << 17) for _ in range(40)]   # 240 MiB
small = [np.ones(8) for _ in range(40)]
before = rss_mb()
del blocks[:-1]               # all but the last: the heap's top stays in use
print(before - rss_mb())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_dropped_arrays_go_back_to_the_system():
    if not return_large_blocks():
        pytest.skip("not glibc")
    p = subprocess.run([sys.executable, "-c", _CHILD, "fixed"], capture_output=True, text=True,
                       check=True)
    # 39 x 6 MiB handed back (glibc 2.36 with its moving threshold: ~0 MB, the heap keeps them)
    assert float(p.stdout.split()[-1]) > 200, p.stdout


_TRIM_CHILD = """
from netparity.heap import return_large_blocks, trim
return_large_blocks()
def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmRSS")) / 1024
# 1 MiB blocks (below the threshold: the heap's) with a small live one after each, as a
# stage's temporaries sit between what a result keeps
blocks, keep = [], []
for _ in range(200):
    blocks.append(b"x" * (1 << 20))  # (written: its pages resident)
    keep.append(b"y" * 100_000)  # (from the C heap, after it: no free chunk that large)
del blocks
before = rss_mb()
trim()
print(before - rss_mb())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_trim_hands_back_free_heap_between_live_blocks():
    from netparity.heap import trim

    if not trim() and not return_large_blocks():
        pytest.skip("not glibc")
    p = subprocess.run([sys.executable, "-c", _TRIM_CHILD], capture_output=True, text=True,
                       check=True)
    # ~200 MiB freed between live blocks: kept resident until trimmed
    assert float(p.stdout.split()[-1]) > 150, p.stdout
