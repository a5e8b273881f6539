"""Measure which MindSpore targets of the scan table run on CPU (writes tools/scan_cpu_runs.json).

Each function/method target is called on small tensors with a few argument forms; a call that
fails with "kernel ... unregistered" is recorded as not running on CPU, one that returns a tensor
as running. Only facts that contradict (or are absent from) the docstring's "Supported Platforms"
are kept. Run: ``PYTHONPATH=src python tools/probe_scan_cpu.py`` (both frameworks installed);
``tools/gen_scan_mapping.py`` then copies the result into mapping.json's ``cpu_runs``.
"""

from __future__ import annotations

import io
import json
import sys
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import mindspore as ms
import numpy as np

from netparity.frameworks.mindspore.api import resolve
from netparity.scan.analyze import load_table
from netparity.scan.targets import facts

OUT = Path(__file__).resolve().parent / "scan_cpu_runs.json"

ms.set_context(pynative_synchronize=True)  # an error is raised by the call that caused it
X = ms.Tensor(np.arange(1, 7, dtype=np.float32).reshape(2, 3) / 7)
X4 = ms.Tensor(np.random.default_rng(0).random((1, 2, 4, 4)).astype(np.float32))
XI = ms.Tensor(np.array([[0, 1, 2], [1, 0, 2]], dtype=np.int64))
FORMS: list[tuple[Any, ...]] = [(), (X,), (X, X), (X, 1), (X, 0), (X4,), (X4, 2), ([X, X],), ((2, 3),),
                                (X, X, X), (X4, X4), (X, X.T), (X, 1, XI[:, :1], X[:, :1]), (X, (2, 1)), (XI,), (X, -1.0, 1.0), (X4, (2, 2))]


def probe(target: str) -> bool | None:
    """True: ran on CPU; False: no CPU kernel; None: no argument form fitted."""
    obj = resolve(target)
    if obj is None or isinstance(obj, type):
        return None
    meth = target.split(".")[-1] if target.startswith("mindspore.Tensor.") else None
    for args in FORMS:
        try:
            with redirect_stderr(io.StringIO()):
                if meth is not None:
                    if not args or not isinstance(args[0], ms.Tensor):
                        continue
                    out = getattr(args[0].copy(), meth)(*args[1:])
                else:
                    out = obj(*args)
                for o in out if isinstance(out, (tuple, list)) else [out]:
                    if isinstance(o, ms.Tensor):
                        o.asnumpy()
            return True
        except Exception as e:  # noqa: BLE001 -- any failure: try the next form
            if "unregistered" in str(e) or "not support" in str(e) and "CPU" in str(e):
                return False
    return None


def main() -> int:
    table = load_table()
    targets = sorted({t for e in table["apis"].values()
                      for t in [e.get("target"), *e.get("alt", []), *e.get("device_alt", [])]
                      if t and t.startswith(("mindspore.mint.", "mindspore.ops.",
                                             "mindspore.Tensor.", "mindspore.from_numpy"))})
    out: dict[str, bool] = {}
    for t in targets:
        ran = probe(t)
        claims = facts(t).platforms
        if ran is None:
            continue
        if ran != (claims is None or "cpu" in claims) or (ran is False):
            out[t] = ran
    OUT.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}: {sum(out.values())} run on CPU against their docstring, "
          f"{sum(not v for v in out.values())} do not run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
