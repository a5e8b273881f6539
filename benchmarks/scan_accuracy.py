"""How often is ``netparity scan`` right about real projects? Judged by running (issue 32, item 7).

Scans each project (timm from site-packages; fairseq 0.12.2 and yolov5 7.0.14 unpacked from the
files ``pip download`` gives, in ``--data``), takes EVERY distinct API the scan reports with a
claim (mapped, trap, missing; "not in the table" is no claim and is only counted), and judges the
claim on the installed MindSpore (CPU) and PyTorch:

* mapped / trap, functions, methods and modules: the advised CPU target is called on small tensors
  with the first generic argument form PyTorch accepts (``f(x)``, ``f(x, x)``, ``f(x, 1)`` ...;
  modules: built with ``C()``, ``C(3)``, ``C(3, 3)`` ... and run on a (2, 3[, 4[, 4]]) input). It
  must run (else: wrong). Where the scan says "mapped" (same result) and the op is deterministic
  and parameter-free, the outputs must agree (``allclose``, rtol 1e-4) -- a disagreement is
  wrong. Where it says "trap" with a default-value rule, the two stated defaults must be the
  signatures' defaults and differ (else: wrong: a false trap).
* mapped / trap, other kinds (optimizers, dtypes, schedulers, init, data...): the target must
  exist and not be deprecated ("exists" level).
* missing: the table's own target (if any) must indeed not run on CPU, else wrong.
* an API no generic form can call on either side is "unchecked" and listed, not counted right.

Run: ``PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/scan_accuracy.py [--data DIR]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import io
import sys
import warnings
from collections import Counter
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np

RANDOM = ("rand", "dropout", "normal", "bernoulli", "multinomial", "uniform", "empty", "randint",
          "randperm", "Dropout", "poisson", "exponential", "random", "manual_seed", "seed",
          "gumbel")
FORMS: list[tuple[Any, ...]] = [(), ("x",), ("x", "x"), ("x", 1), ("x", 0), ("x", -1),
                                ("x", 2), ("x", "x", "x"), ("x", 0.5), ("b", "x", "x"),
                                ("L",), ("L", 0), ("x", 1, 0), ("x", 0, 1), ("x", 0, 0, 1),
                                ("x", 2, 1), ("x", (1, 1)), ("x", "i"), ("x", 1, "i"), (3,),
                                ((2, 3),), ((2, 3), 1.5), (0, 3), (0, 1, 5), ("x", -1, 1)]
CTOR: list[tuple[Any, ...]] = [(), (3,), (3, 3), (3, 3, 1), (3, 3, 3), (3, 4, 3)]


def _projects(data: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    spec = importlib.util.find_spec("timm")
    if spec and spec.submodule_search_locations:
        out["timm"] = Path(next(iter(spec.submodule_search_locations)))
    for name, sub in (("fairseq 0.12.2", "fairseq-0.12.2/fairseq"),
                      ("yolov5 7.0.14", "yolov5/yolov5")):
        if (data / sub).is_dir():
            out[name] = data / sub
    return out


def _torch_obj(name: str) -> Any:
    import torch

    obj: Any = torch
    for p in name.split(".")[1:]:
        obj = getattr(obj, p, None)
        if obj is None:
            return None
    return obj


def _np(out: Any) -> np.ndarray | None:
    if isinstance(out, (tuple, list)) and out:
        out = out[0]
    for attr in ("asnumpy", "detach"):
        if hasattr(out, attr):
            out = out.asnumpy() if attr == "asnumpy" else out.detach().numpy()
            break
    try:
        return np.asarray(out, dtype=np.float64)
    except (TypeError, ValueError):
        return None


class Judge:
    def __init__(self) -> None:
        import mindspore as ms
        import torch

        ms.set_context(pynative_synchronize=True)
        self.ms, self.torch = ms, torch
        base = (np.arange(1, 7, dtype=np.float32).reshape(2, 3) / 7)
        self.inputs = [base, np.random.default_rng(0).random((2, 3, 4)).astype(np.float32),
                       np.random.default_rng(1).random((2, 3, 4, 4)).astype(np.float32),
                       np.random.default_rng(2).random((2, 4, 3)).astype(np.float32)]

    def _args(self, form: tuple[Any, ...], x: np.ndarray, side: str) -> list[Any]:
        mk = (lambda a: self.torch.from_numpy(a.copy())) if side == "torch" else self.ms.Tensor
        idx = np.zeros(x.shape, np.int64) if len(x.shape) > 1 else np.zeros(1, np.int64)
        val = {"x": lambda: mk(x), "b": lambda: mk(x > 0.3), "L": lambda: [mk(x), mk(x)],
               "i": lambda: mk(idx[:, :1])}
        return [val[a]() if isinstance(a, str) else a for a in form]

    def _call(self, obj: Any, kind: str, form: tuple[Any, ...], x: np.ndarray, side: str,
              method: str = "") -> Any:
        args = self._args(form, x, side)
        if method:
            return getattr(args[0], method)(*args[1:])
        return obj(*args)

    def function(self, tname: str, target: str, kind: str, compare: bool) -> tuple[str, str]:
        """(verdict, why): right | wrong | unchecked."""
        from netparity.frameworks.mindspore.api import resolve

        tmethod = tname.rsplit(".", 1)[1] if tname.startswith("torch.Tensor.") else ""
        mmethod = target.rsplit(".", 1)[1] if target.startswith("mindspore.Tensor.") else ""
        tobj = None if tmethod else _torch_obj(tname)
        mobj = None if mmethod else resolve(target)
        if not mmethod and mobj is None:
            return "wrong", f"{target} does not exist"
        forms = [f for f in FORMS if f and f[0] == "x"] if tmethod or mmethod else FORMS
        trap = not compare  # a trap's advice may rewrite the call: a failure as written is no
        # verdict (the advised rewrites are run in tests/scan)
        last_err = ""
        for x in self.inputs:
            for form in forms:
                try:
                    want = self._call(tobj, kind, form, x, "torch", tmethod)
                except Exception:  # noqa: BLE001 - a form torch refuses: try the next
                    continue
                try:
                    got = self._call(mobj, kind, form, x, "ms", mmethod)
                    g = _np(got)
                except Exception as e:  # noqa: BLE001
                    last_err = str(e).strip().splitlines()[0][:100] if str(e).strip() else repr(e)
                    continue
                w = _np(want)
                if not compare or any(r in tname for r in RANDOM):
                    return "right", "runs"
                if g is None or w is None:
                    return "right", "runs (output not numeric)"
                if g.shape != w.shape or not np.allclose(g, w, rtol=1e-4, atol=1e-5,
                                                         equal_nan=True):
                    return "wrong", (f"same call {tname}{form} differs: shape {w.shape} vs "
                                     f"{g.shape}" + ("" if g.shape != w.shape else
                                                     f", max |d| {np.max(np.abs(g - w)):.3g}"))
                return "right", "agrees"
        if last_err and not trap:
            return "wrong", f"torch runs, {target} fails: {last_err}"
        return "unchecked", ("the trap's advice rewrites the call" if last_err
                             else "no generic call form")

    def module(self, tname: str, target: str, compare: bool,
               tuples: bool = False) -> tuple[str, str]:
        """``tuples``: the scan's advice says the sizes are tuples in MindSpore: ints -> (n,)."""
        from netparity.frameworks.mindspore.api import resolve

        tcls, mcls = _torch_obj(tname), resolve(target)
        if mcls is None:
            return "wrong", f"{target} does not exist"
        if not callable(mcls):
            return "unchecked", "not callable"
        last_err = ""
        for ctor in CTOR:
            try:
                tm = tcls(*ctor)
                tm.eval()
            except Exception:  # noqa: BLE001
                continue
            for x in self.inputs:
                try:
                    want = tm(self.torch.from_numpy(x.copy()))
                except Exception:  # noqa: BLE001
                    continue
                try:
                    mm = mcls(*[(a,) if tuples and i == 0 else a
                                for i, a in enumerate(ctor)])
                    if hasattr(mm, "set_train"):
                        mm.set_train(False)
                    g = _np(mm(self.ms.Tensor(x)))
                except Exception as e:  # noqa: BLE001
                    last_err = str(e).strip().splitlines()[0][:100] if str(e).strip() else repr(e)
                    continue
                has_params = any(True for _ in tm.parameters())
                if not compare or has_params or any(r in tname for r in RANDOM):
                    return "right", "runs"
                w = _np(want)
                if g is None or w is None:
                    return "right", "runs (output not numeric)"
                if g.shape != w.shape or not np.allclose(g, w, rtol=1e-4, atol=1e-5):
                    return "wrong", f"same module {tname}{ctor} differs on {x.shape}"
                return "right", "agrees"
        if last_err and compare:
            return "wrong", f"torch runs, {target} fails: {last_err}"
        return "unchecked", ("the trap's advice rewrites the call" if last_err
                             else "no generic construction")

    def trap_defaults(self, tname: str, target: str, traps: list[dict[str, Any]]) -> str:
        """'' when every default-value trap states both signatures' defaults and they differ."""
        from netparity.frameworks.mindspore.api import resolve

        bad = []
        for tr in traps:
            if tr.get("rule") != "arg_default" or "ms_default" not in tr:
                continue
            tobj, mobj = _torch_obj(tname), resolve(target)
            try:
                tsig = inspect.signature(tobj.__init__ if inspect.isclass(tobj) else tobj)
                msig = inspect.signature(mobj.__init__ if inspect.isclass(mobj) else mobj)
            except (TypeError, ValueError):
                continue
            tp, mp = tsig.parameters.get(tr["arg"]), msig.parameters.get(tr.get("ms_arg",
                                                                              tr["arg"]))
            if tp is None or mp is None:
                continue
            if tr.get("transform") == "one_minus":
                continue  # a convention, not a default: measured in tests/scan
            if tp.default != tr["torch_default"] or mp.default != tr["ms_default"]:
                bad.append(f"{tr['arg']}: stated {tr['torch_default']}/{tr['ms_default']}, "
                           f"signatures {tp.default}/{mp.default}")
            elif tp.default == mp.default:
                bad.append(f"{tr['arg']}: both default to {tp.default} (false trap)")
        return "; ".join(bad)


def resolve_ok(target: str) -> bool:
    from netparity.frameworks.mindspore.api import resolve

    return resolve(target) is not None


def judge_project(judge: Judge, path: Path) -> dict[str, Any]:
    from netparity.scan import targets
    from netparity.scan.analyze import load_table, scan_paths

    table = load_table()
    res = scan_paths([str(path)], device="cpu")
    per: dict[str, Any] = {}
    for f in res.findings:
        per.setdefault(f.name, f)
    rows = []
    unlisted = 0
    for name, f in sorted(per.items()):
        if f.status == "unlisted":
            unlisted += 1
            continue
        entry = table["apis"].get(name, {})
        kind = entry.get("kind", "")
        target = f.target.split(" (or ")[0]
        if f.status == "missing":
            prim = entry.get("target")
            if prim and targets.runs_on(prim, "cpu", table.get("cpu_runs")) is not False \
                    and targets.facts(prim).exists and not targets.facts(prim).deprecated:
                verdict, why = "wrong", f"said missing, but {prim} exists and runs"
            else:
                verdict, why = "right", "no counterpart runs on CPU (" + (
                    "composition given" if not f.blocking else "blocks") + ")"
        elif target.startswith("(none") or name.startswith("torch.jit."):  # (decorators)
            verdict, why = ("right", "nothing to port") if target.startswith("(none") else (
                ("right", "exists") if resolve_ok(target) else ("wrong", f"{target} absent"))
        elif kind in ("function", "method"):
            # a "mapped" call whose entry has rules for this target: the rules judged the
            # call's own arguments (var_mean(unbiased=False)); a generic call lacks them
            ruled = bool(entry.get("traps") if target == entry.get("target")
                         else (entry.get("alt_traps") or {}).get(target))
            verdict, why = judge.function(name, target, kind,
                                          compare=f.status == "mapped" and not ruled)
        elif kind == "module":
            verdict, why = judge.module(name, target, compare=f.status == "mapped",
                                        tuples="must be a tuple" in f.note)
        else:
            from netparity.frameworks.mindspore.api import resolve

            ok = resolve(target) is not None and not targets.facts(target).deprecated
            verdict, why = ("right", "exists") if ok else ("wrong", f"{target} absent/deprecated")
        if verdict == "right" and f.status == "trap":
            traps = list(entry.get("traps", []))
            if target != entry.get("target"):
                traps = list((entry.get("alt_traps") or {}).get(target, []))
            bad = judge.trap_defaults(name, target, traps)
            if bad:
                verdict, why = "wrong", bad
        rows.append({"api": name, "status": f.status, "target": target, "verdict": verdict,
                     "why": why})
    return {"rows": rows, "unlisted": unlisted}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="/work/wt/scan3-data", type=Path)
    ap.add_argument("-v", "--verbose", action="store_true", help="every API with its verdict")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    judge = Judge()
    projects = _projects(args.data)
    print(f"{'project':16} {'reported':>8} {'checked':>8} {'right':>6} {'% right':>8} "
          f"{'unchecked':>9} {'no claim':>8}")
    for pname, path in projects.items():
        with redirect_stderr(io.StringIO()), redirect_stdout(io.StringIO()):
            out = judge_project(judge, path)
        rows = out["rows"]
        c = Counter(r["verdict"] for r in rows)
        checked = c["right"] + c["wrong"]
        pct = 100.0 * c["right"] / checked if checked else 0.0
        print(f"{pname:16} {len(rows):8} {checked:8} {c['right']:6} {pct:7.1f}% "
              f"{c['unchecked']:9} {out['unlisted']:8}")
        for r in rows:
            if r["verdict"] == "wrong" or args.verbose:
                print(f"    {r['verdict']:9} {r['status']:7} {r['api']} -> {r['target']}: "
                      f"{r['why']}")
        levels = Counter(r["why"].split(" (")[0] for r in rows if r["verdict"] == "right")
        print("    right by: " + ", ".join(f"{k} {v}" for k, v in levels.most_common(6)))
        unchecked = [r["api"] for r in rows if r["verdict"] == "unchecked"]
        if unchecked:
            print(f"    unchecked ({len(unchecked)}): " + ", ".join(unchecked[:40])
                  + (" ..." if len(unchecked) > 40 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
