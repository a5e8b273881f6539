"""netparity.scan: what porting a PyTorch script to MindSpore takes, before any code is written.

:func:`scan_paths` parses scripts (never imports them), finds every PyTorch API they use and
classifies each use as mapped / missing / trap against the packaged table ``mapping.json``;
:func:`netparity.scan.runtime.run_coverage` adds the aten ops one captured run executes.
"""

from __future__ import annotations

from netparity.scan.analyze import Finding, RuntimeOp, ScanResult, load_table, scan_paths

__all__ = ["Finding", "RuntimeOp", "ScanResult", "load_table", "scan_paths"]
