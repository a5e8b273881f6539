"""The one JSON writer (atomic) and the compare result's JSON file.

:func:`write_json` writes any JSON-ready object: to stdout for ``"-"``, else to a temporary file
in the destination's directory that then replaces the destination (``os.replace``), so a reader
never sees a half-written file, even when the process dies mid-write.

Example:
    >>> import json, tempfile, os
    >>> from netparity.compare.results import CompareResult
    >>> p = os.path.join(tempfile.mkdtemp(), "r.json")
    >>> write_result(CompareResult(), p)
    >>> json.load(open(p))["netparity_result_version"]
    1
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from netparity.compare.results import CompareResult
from netparity.errors import UsageError
from netparity.outputs import atomic_output, write_text_atomic
from netparity.report.sections import Section, for_output
from netparity.untrusted import load_json


def _plain(o: Any) -> Any:
    """JSON stand-ins for what ``json`` cannot encode: sets and arrays as lists, NumPy scalars
    as numbers, paths and anything else as strings."""
    if isinstance(o, (set, frozenset)):
        return sorted(o, key=str)
    tolist = getattr(o, "tolist", None)  # NumPy arrays and scalars
    if callable(tolist):
        return tolist()
    return str(o)


def write_json(obj: Any, dest: str | os.PathLike[str], *, indent: int | None = 1,
               strict: bool = False) -> None:
    """Write ``obj`` as JSON to ``dest`` atomically, or to stdout when ``dest`` is ``"-"``.

    ``strict`` refuses NaN/Inf and unknown types (results spell non-finite numbers as strings);
    otherwise values JSON cannot hold are converted (:func:`_plain`).
    """
    try:
        text = json.dumps(obj, indent=indent, allow_nan=not strict,
                          default=None if strict else _plain) + "\n"
    except ValueError as e:
        raise UsageError(f"{dest}: cannot encode JSON ({e})") from None
    if os.fspath(dest) == "-":
        sys.stdout.write(text)
        return
    write_text_atomic(dest, text, what="JSON")


def write_result(result: CompareResult, path: str | os.PathLike[str], *,
                 histograms: bool = True) -> None:
    """Write ``result.to_json()`` (strict JSON: inf/nan spelled as strings) for ``recheck``.

    To a file, the pairs of matched calls go to a Parquet file beside it
    (:func:`~netparity.report.pairs_parquet.pairs_path`: ``r.json`` -> ``r.pairs.parquet``,
    written first), which the JSON names as ``"pairs_file"``; to stdout (``"-"``) they stay
    in the JSON."""
    if os.fspath(path) == "-":
        write_json(result.to_json(histograms=histograms), path, strict=True)
        return
    from netparity.report.pair_columns import gc_paused
    from netparity.report.pairs_parquet import pairs_path, write_pairs

    side = pairs_path(path)
    with gc_paused():
        write_pairs(result, side, histograms=histograms)
        obj = result.to_json(histograms=histograms, pairs=False, calls=False)
        obj["pairs_file"] = side.name
        with atomic_output(path, what="JSON") as tmp, \
                open(tmp, "w", encoding="utf-8", newline="") as f:
            _stream(obj, result.calls, f, str(path))


#: calls encoded at once by :func:`_stream`
_CALLS_CHUNK = 4096


def _stream(obj: dict[str, Any], calls: list[Any], f: Any, dest: str) -> None:
    """Write ``obj`` to ``f`` as strict one-line JSON (json's C encoder; ``indent`` would make
    it use the pure-Python one, ~10x slower), key by key, its ``"calls"`` being ``calls``
    encoded a chunk at a time: the same text as ``json.dumps`` of the whole with the calls in
    it, without the ~300k call dicts and the whole text held at once."""
    from netparity.compare.results import call_fields, call_json

    enc = json.JSONEncoder(allow_nan=False).encode
    try:
        f.write("{")
        for k, (key, v) in enumerate(obj.items()):
            f.write((", " if k else "") + enc(key) + ": ")
            if key != "calls":
                f.write(enc(v))
                continue
            f.write("[")
            for lo in range(0, len(calls), _CALLS_CHUNK):
                chunk = calls[lo:lo + _CALLS_CHUNK]
                try:  # a call's fields are flat: they are what call_json copies
                    part = enc([call_fields(c) for c in chunk])
                except ValueError:  # a non-finite error: call_json spells it
                    part = enc([call_json(c) for c in chunk])
                f.write((", " if lo else "") + part[1:-1])
            f.write("]")
        f.write("}\n")
    except ValueError as e:
        raise UsageError(f"{dest}: cannot encode JSON ({e})") from None


def read_json(path: str | os.PathLike[str]) -> CompareResult:
    """Load a result written by :func:`write_result` (its pairs from the Parquet file it
    names, which must lie beside it)."""
    from netparity import inputs

    data = inputs.read_bytes(path, error=UsageError, what="saved result", limit=inputs.MAX_JSON)
    try:
        obj: Any = load_json(data, what="result")
    except ValueError as e:
        raise UsageError(f"{path}: not a JSON file ({e})") from None
    side = obj.get("pairs_file") if isinstance(obj, dict) else None
    result = CompareResult.from_json(obj)
    if side is not None:
        from netparity.compare.results import pair_from_dict
        from netparity.report.pairs_parquet import read_pairs

        if not isinstance(side, str) or not side or os.path.basename(side) != side \
                or side in (".", ".."):
            raise UsageError(f"{path}: pairs_file must name a file beside the result, "
                             f"not {str(side)[:80]!r}")
        folder = os.path.dirname(os.path.abspath(path))
        rows = read_pairs(os.path.join(folder, side), within=folder)
        try:
            result.pairs = [pair_from_dict(d) for d in rows]
        except (TypeError, KeyError) as e:
            raise UsageError(f"{path}: corrupt pair table {side} ({e})") from None
    return result


def render_json(sections: Sequence[Section]) -> dict[str, Any]:
    """The JSON output of report sections (those meant for JSON): ``{"sections": [...]}``."""
    return {"netparity_report_version": 1,
            "sections": [s.to_json() for s in for_output(sections, "json")]}
