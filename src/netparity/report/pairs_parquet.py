"""A comparison's tensor pairs as Apache Parquet, next to its JSON (``r.json`` ->
``r.pairs.parquet``).

The JSON of a 100k-op comparison held ~300k pair objects (~2 minutes and ~6 GB to write);
now the JSON names this file (``"pairs_file"``) and holds everything else, and
:func:`netparity.report.json_report.read_json` (``recheck``, ``view``) reads the pairs back
from it. Any Parquet reader opens it (DuckDB: ``duckdb.sql("select module, op, status, error
from 'r.pairs.parquet' where status = 'fail' order by \"order\" limit 10")``).

Columns (one row per pair of matched calls, in ``result.pairs`` order): the
:class:`~netparity.compare.results.PairResult` fields -- text columns as strings
(``key``, ``kind``, ``direction``, ``role``, ``arg``, ``module``, ``op``, ``cand_module``,
``cand_op``, ``ref_dtype``, ``cand_dtype``, ``tol_source``, ``status``, ``reason``, ``call``,
``source``), ``step``, ``rank``, ``order`` int64, ``rtol``, ``atol`` double, ``ref_shape``,
``cand_shape`` list<int64>, ``metrics`` and ``fp64`` the JSON of those dicts (``fp64`` null
when there is none; NaN and infinities spelled as JSON's ``NaN``/``Infinity``) -- and
``error`` (double: the normwise relative error :meth:`PairResult.error` sorts by).

Example:
    >>> pairs_path("out/r.json").as_posix(), pairs_path("r").as_posix()
    ('out/r.pairs.parquet', 'r.pairs.parquet')
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from netparity.errors import UsageError

_TEXT = ("key", "kind", "direction", "role", "arg", "module", "op", "cand_module", "cand_op",
         "ref_dtype", "cand_dtype", "tol_source", "status", "reason", "call", "source")
_INT = ("step", "rank", "order")
_FLOAT = ("rtol", "atol")
_SHAPE = ("ref_shape", "cand_shape")
_JSON = ("metrics", "fp64")


def _types() -> dict[str, Any]:
    import pyarrow as pa

    t: dict[str, Any] = {c: pa.string() for c in _TEXT}
    t.update({c: pa.int64() for c in _INT})
    t.update({c: pa.float64() for c in _FLOAT})
    t.update({c: pa.list_(pa.field("element", pa.int64())) for c in _SHAPE})
    t.update({c: pa.string() for c in _JSON})
    t["error"] = pa.float64()
    return t


def columns() -> dict[str, str]:
    """Each column's Arrow type as ``str(type)`` spells it (what a pair file must hold)."""
    return {c: str(t) for c, t in _types().items()}


def pairs_path(json_path: str | os.PathLike[str]) -> Path:
    """The pair file next to a result's JSON: its name with ``.json`` replaced."""
    p = Path(json_path)
    stem = p.name[:-5] if p.name.endswith(".json") else p.name
    return p.with_name(stem + ".pairs.parquet")


def write_pairs(pairs: Any, dest: str | os.PathLike[str], *, histograms: bool = True) -> None:
    """Write the pairs of matched calls of ``pairs`` -- a
    :class:`~netparity.compare.results.CompareResult` (read from its pair table's columns
    where it has one: :func:`netparity.report.pair_columns.chunks`) or a list of
    :class:`~netparity.compare.results.PairResult` -- as ``dest``, one row group per chunk
    (atomically: :func:`netparity.outputs.atomic_output`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from netparity.outputs import atomic_output
    from netparity.report.pair_columns import chunks

    if isinstance(pairs, list):
        from netparity.compare.results import CompareResult

        held, pairs = pairs, CompareResult()
        pairs.pairs = held
    types = _types()
    schema = pa.schema([(c, t) for c, t in types.items()])
    with atomic_output(dest, what="pair table") as tmp, \
            pq.ParquetWriter(tmp, schema, compression="zstd") as w:
        for cols in chunks(pairs, metrics_json=True, histograms=histograms):
            w.write_table(pa.table({c: pa.array(cols[c], type=t) for c, t in types.items()},
                                   schema=schema))
            del cols


def read_pairs(path: str | os.PathLike[str], *, within: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The pairs of a pair file as the dicts :meth:`CompareResult.from_json` reads (through
    :func:`netparity.inputs.open_parquet`: a file inside ``within``, exactly these columns).

    Raises:
        UsageError: missing, not a pair file, or a row that does not decode.
    """
    import pyarrow as pa

    from netparity import inputs

    pf = inputs.open_parquet(path, within=within, error=UsageError, what="pair table",
                             tree="the result's folder", columns=columns())
    try:
        table = pf.read(use_threads=False)
        data = {c: table.column(c).to_pylist() for c in table.column_names if c != "error"}
    except (pa.ArrowException, OSError) as e:
        raise UsageError(f"{path}: corrupt pair table ({str(e).splitlines()[0]:.200})") from None
    n = table.num_rows
    loads = json.loads
    try:
        for c in _JSON:
            data[c] = [None if v is None else loads(v) for v in data[c]]
    except ValueError as e:
        raise UsageError(f"{path}: corrupt pair table ({e})") from None
    names = list(data)
    cols = [data[c] for c in names]
    return [dict(zip(names, row)) for row in zip(*cols)] if n else []
