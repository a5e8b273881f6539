"""The framework-free part of module substitution (``netparity bisect``): watching which modules
a step calls, in what order, and how (see ``frameworks/<name>/substitute.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

#: the hooks a framework installs on one module: ``(module, on_call(module, args, kwargs),
#: on_return(module, args, kwargs, output)) -> [removable handles]``
Install = Callable[[Any, Callable[..., None], Callable[..., None]], list[Any]]


def observe(modules: Iterable[tuple[str, Any]], install: Install,
            plain: Callable[[tuple[Any, ...], dict[str, Any], Any], bool],
            passive_classes: tuple[str, ...], run: Callable[[], Any]) -> dict[str, dict[str, Any]]:
    """Run ``run()`` with every named module (the root, ``""``, excepted) watched:
    ``{path: {"order", "calls", "plain", "passive", "kind"}}`` for the modules it called
    (``order``: rank of the first call; ``plain``: every call took and returned tensors only;
    ``passive``: the class is one of ``passive_classes`` or every call returned its input
    itself). Hooks are removed on exit, even on exceptions."""
    seen: dict[str, dict[str, Any]] = {}
    handles: list[Any] = []

    def on_call(name: str) -> Callable[..., None]:
        def hook(m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if name not in seen:
                seen[name] = {"order": len(seen), "calls": 0, "plain": True,
                              "passive": type(m).__name__ in passive_classes,
                              "kind": type(m).__name__, "_same": True}
        return hook

    def on_return(name: str) -> Callable[..., None]:
        def hook(m: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
            s = seen[name]
            s["calls"] += 1
            s["plain"] = s["plain"] and plain(args, kwargs, out)
            s["_same"] = s["_same"] and bool(args) and out is args[0]
        return hook

    try:
        for name, m in modules:
            if name:
                handles += install(m, on_call(name), on_return(name))
        run()
    finally:
        for h in handles:
            h.remove()
    for s in seen.values():
        s["passive"] = s["passive"] or s.pop("_same")
    return seen
