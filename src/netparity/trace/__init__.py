"""The on-disk trace: schema, writer and reader. See :mod:`netparity.trace.schema`."""

from netparity.trace.reader import Trace, holds_trace, open_trace
from netparity.trace.schema import SCHEMA_VERSION, STAT_FIELDS, Record
from netparity.trace.writer import TraceWriter, build_manifest

__all__ = ["SCHEMA_VERSION", "STAT_FIELDS", "Record", "Trace", "TraceWriter", "build_manifest",
           "holds_trace", "open_trace"]
