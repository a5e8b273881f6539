"""A float64 golden run: the error floor of parameter gradients that replay cannot judge.

Replay judges a parameter gradient by calling its module's backward on the reference's
tensors; it needs that module's call records. Where there are none -- a candidate compiled
with ``torch.compile`` is captured at the compiled module's boundary only -- the honest bound
is the one mixed-precision tools use against a higher-precision golden: run the reference
step again in float64 (same weights, same batch, same seeds) and hold the candidate to the
reference's own float32 error against it::

    ||cand - ref64|| <= K * ||ref - ref64|| + floor        (normwise, relative to ||ref64||)

so a gradient that is chaotic in float32 (a BatchNorm normalising two values per channel:
rounding moves it by tens of percent) is excused exactly as far as float32 itself moves it,
while a real difference far beyond float32's own error still fails. The bound used is named
in the phase's text. PyTorch references only (the reference model is converted with
``.double()``); elsewhere the phase keeps the comparison's answer and says why.

Example:
    >>> golden_ok(0.40, 0.20, 5.0)
    True
    >>> golden_ok(0.40, 1e-7, 5.0)
    False
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

#: relative floor below which two float32 gradients are one rounding apart anyway
FLOOR = 1e-6


def golden_ok(cand_err: float, ref_err: float, k: float) -> bool:
    """Whether the candidate's error against the golden is within ``k`` times the reference's
    own (plus :data:`FLOOR`)."""
    return cand_err <= k * ref_err + FLOOR


def golden_run(src: str, options: dict[str, Any], seed: int, batch: tuple[Any, Any],
               state: Any, path: Path, progress: Any) -> bool:
    """Capture step 0 of the reference spec in float64 into ``path`` (parameter gradients);
    False when the reference cannot run in float64 here (not PyTorch)."""
    from netparity.frameworks.models import set_weights
    from netparity.seeding import seed_everything
    from netparity.workflow.spec import load_spec
    from netparity.workflow.step import _train

    seed_everything(seed)
    spec = load_spec(src, defaults={"steps": 1}, **options)
    if spec.framework != "torch":
        return False
    spec.model.double()  # the optimizer keeps the same Parameter objects
    set_weights(spec.model, {k: np.asarray(v, np.float64) for k, v in state.items()
                             if np.issubdtype(np.asarray(v).dtype, np.floating)
                             and state.dtypes.get(k) != "bfloat16"})
    x, y = batch
    x64 = np.asarray(x, np.float64) if np.issubdtype(np.asarray(x).dtype, np.floating) else x
    _train(spec, [(x64, y)], path, 1, "module", "tensors", progress, seed=seed)
    return True


def judge_params(result: Any, ref_tr: Any, cand_tr: Any, gold_tr: Any, k: float
                 ) -> list[dict[str, Any]]:
    """Each failing step-0 parameter gradient of ``result`` (a comparison) against the
    golden: ``{"param", "cand_err", "ref_err", "ok"}``."""
    def grads(tr: Any) -> dict[str, Any]:
        return {r.module: r for r in tr.load_records(kind=("grad",)) if r.step == 0}

    ref_g, cand_g, gold_g = grads(ref_tr), grads(cand_tr), grads(gold_tr)
    out = []
    for p in result.divergent_params("grad"):
        if p.step != 0 or p.status != "fail":
            continue
        r, c, g = ref_g.get(p.module), cand_g.get(p.cand_module or p.module), \
            gold_g.get(p.module)
        if r is None or c is None or g is None:
            continue
        gold = np.asarray(gold_tr.tensor(g), np.float64).ravel()
        scale = float(np.linalg.norm(gold)) or 1.0
        ref_err = float(np.linalg.norm(np.asarray(ref_tr.tensor(r), np.float64).ravel()
                                       - gold)) / scale
        cand_err = float(np.linalg.norm(np.asarray(cand_tr.tensor(c), np.float64).ravel()
                                        - gold)) / scale
        out.append({"param": p.module, "cand_err": cand_err, "ref_err": ref_err,
                    "ok": golden_ok(cand_err, ref_err, k)})
    return out
