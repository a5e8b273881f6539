"""JSON report: the versioned result dict (``CompareResult.to_json``) written to a file.

Example:
    >>> import json, tempfile, os
    >>> from netparity.compare.results import CompareResult
    >>> p = os.path.join(tempfile.mkdtemp(), "r.json")
    >>> write_json(CompareResult(), p)
    >>> json.load(open(p))["netparity_result_version"]
    1
"""

from __future__ import annotations

import json
import os
from typing import Any

from netparity.compare.results import CompareResult
from netparity.errors import UsageError


def write_json(result: CompareResult, path: str | os.PathLike[str], *, histograms: bool = True) -> None:
    """Write ``result.to_json()`` (strict JSON: inf/nan spelled as strings)."""
    try:
        with open(path, "w") as f:
            json.dump(result.to_json(histograms=histograms), f, indent=1, allow_nan=False)
            f.write("\n")
    except OSError as e:
        raise UsageError(f"{path}: cannot write JSON report ({e.strerror})") from None


def read_json(path: str | os.PathLike[str]) -> CompareResult:
    """Load a result written by :func:`write_json`."""
    try:
        with open(path) as f:
            obj: Any = json.load(f)
    except OSError as e:
        raise UsageError(f"{path}: cannot read result ({e.strerror})") from None
    except ValueError as e:
        raise UsageError(f"{path}: not a JSON file ({e})") from None
    return CompareResult.from_json(obj)
