"""Schema version 2 (records of kind ``timing``): traces written as version 1 still open."""

from __future__ import annotations

from pathlib import Path

import pytest

from netparity.trace import Record, TraceWriter, columnar, open_trace, writer
from netparity.trace.schema import SCHEMA_HISTORY, SCHEMA_VERSION


def test_version_2_is_the_timing_kind_and_every_version_is_described() -> None:
    assert SCHEMA_VERSION == 2 and sorted(SCHEMA_HISTORY) == [1, 2]
    assert "timing" in SCHEMA_HISTORY[2]


def test_a_trace_written_as_version_1_is_read_with_its_columnar_copy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the real writer, stamping version 1 (what netparity wrote before the bump) in the
    # manifest, the SQLite index and the columnar copy made at close
    monkeypatch.setattr(writer, "SCHEMA_VERSION", 1)
    monkeypatch.setattr(columnar, "SCHEMA_VERSION", 1)
    with TraceWriter(tmp_path / "old") as w:
        for step in range(3):
            w.add(Record(kind="loss", step=step, dtype="float32", shape=(),
                         stats={"mean": float(step)}))
    monkeypatch.undo()
    with TraceWriter(tmp_path / "new") as w:
        w.add(Record(kind="timing", op="step", step=0, extra={"t": 0.0, "d": 0.5}))
    old, new = open_trace(tmp_path / "old"), open_trace(tmp_path / "new")
    assert old.schema_version == 1 and new.schema_version == SCHEMA_VERSION == 2
    assert [r.stats["mean"] for r in old.records(kind="loss")] == [0.0, 1.0, 2.0]
    assert old.scan(["step"], kind="loss")["step"].tolist() == [0, 1, 2]
    # the version-1 columnar copy is still used (same layout), not silently dropped
    assert columnar.store(old, 0) is not None
    assert old.count(kind="timing") == 0
    # a version newer than this netparity is refused
    m = (tmp_path / "new" / "manifest.json").read_text()
    (tmp_path / "new" / "manifest.json").write_text(
        m.replace('"schema_version": 2', '"schema_version": 3'))
    from netparity.errors import SchemaError

    with pytest.raises(SchemaError, match="newer"):
        open_trace(tmp_path / "new")
