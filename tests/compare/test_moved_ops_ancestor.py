"""``settle_moved_ops`` finds each failing module output's innermost enclosing call by bisection
over the dotted prefixes of its path (a failing rank with 5k divergent module calls spent 30 s
in the former scan of every call per output, issue 33 item 4): the same answer as the
definition, checked on random call lists."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from netparity.compare.restructured import _ancestor_call

NAMES = ["", "a", "a.b", "a.b.c", "a.bc", "ab", "a.b.c.d", "x", "x.a"]


def _by_definition(c: Any, calls: list[Any]) -> int:
    """Innermost strictly enclosing path finishing after ``c``, the first to finish."""
    best, best_key = -1, (-1, 0)
    for i, a in enumerate(calls):
        m = a.module
        if a.order <= c.order or not (m == "" or c.module.startswith(m + ".")):
            continue
        if (len(m), -a.order) > best_key:
            best, best_key = i, (len(m), -a.order)
    return best


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(NAMES), st.integers(0, 8)), min_size=1,
                max_size=14))
def test_ancestor_is_the_innermost_enclosing_call(spec: list[tuple[str, int]]) -> None:
    calls = [SimpleNamespace(module=m, order=o) for m, o in spec]
    scope: dict[str, tuple[list[int], list[int]]] = {}
    for i in sorted(range(len(calls)), key=lambda i: calls[i].order):
        orders, where = scope.setdefault(calls[i].module, ([], []))
        orders.append(calls[i].order)
        where.append(i)
    for c in calls:
        if c.module:
            assert _ancestor_call(c, scope) == _by_definition(c, calls)  # type: ignore[arg-type]
