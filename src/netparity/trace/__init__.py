"""The on-disk trace: schema, writer and reader. See :mod:`netparity.trace.schema`."""

from netparity.trace.reader import Trace, open_trace, trace_exists
from netparity.trace.schema import SCHEMA_VERSION, STAT_FIELDS, Record
from netparity.trace.writer import TraceWriter, build_manifest

__all__ = ["SCHEMA_VERSION", "STAT_FIELDS", "Record", "Trace", "TraceWriter", "build_manifest", "open_trace", "trace_exists"]
