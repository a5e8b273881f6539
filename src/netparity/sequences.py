"""Small sequence algorithms shared by alignment and checkpoint mapping.

Example:
    >>> longest_increasing([3, 1, 2, 5, 4])
    [1, 2, 4]
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence


def longest_increasing(values: Sequence[int]) -> list[int]:
    """Indices of a longest strictly increasing subsequence of ``values`` (O(n log n)).

    Used to keep only order-consistent anchor pairs: sort pairs by one side, keep the longest
    chain increasing on the other.
    """
    tails: list[int] = []
    tails_idx: list[int] = []
    prev = [-1] * len(values)
    for i, v in enumerate(values):
        k = bisect.bisect_left(tails, v)
        if k == len(tails):
            tails.append(v)
            tails_idx.append(i)
        else:
            tails[k] = v
            tails_idx[k] = i
        prev[i] = tails_idx[k - 1] if k else -1
    out: list[int] = []
    i = tails_idx[-1] if tails_idx else -1
    while i >= 0:
        out.append(i)
        i = prev[i]
    return out[::-1]
