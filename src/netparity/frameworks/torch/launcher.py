"""Zero-code capture: run an unmodified PyTorch script with netparity watching.

``netparity run -o DIR -- python train.py ARGS`` starts the command with

* ``PYTHONPATH`` prefixed by ``netparity/frameworks/torch/_bootstrap`` (a ``sitecustomize`` module) and
  by the directory holding the ``netparity`` package, and
* ``NETPARITY_CAPTURE`` holding the capture policy as JSON.

In every Python process of the command (``torchrun`` workers included) the bootstrap waits for
``import torch`` without importing it itself. Once torch is imported it registers one global
module forward pre-hook; the capture proper starts at the first ``nn.Module`` call, so processes
that never run a model (the ``torchrun`` agent, data-loader workers) write nothing. From then on:

* global module forward hooks record every module (the first root module called is path ``""``;
  other root modules, e.g. a loss module, are named by their class);
* the op-level dispatch mode is pushed for op/both levels;
* global optimizer step hooks mark the ``update`` direction, record gradients and updated
  parameters, and end the step (one optimizer step = one step);
* the loss is the output of a ``torch.nn`` loss module (``nn.CrossEntropyLoss`` & co.) called
  outside any other module; a loss computed with a function (``F.cross_entropy``) is not detected;
* records go to ``DIR/rank{RANK}`` (``RANK``/``WORLD_SIZE`` from the environment, as set by
  ``torchrun``), and the trace is closed at interpreter exit.

Example:
    >>> env = capture_env("runs/ref", {"level": "module"}, base={})
    >>> sorted(k for k in env if k.startswith(("PYTHON", "NETPARITY")))
    ['NETPARITY_CAPTURE', 'NETPARITY_RUN_ID', 'PYTHONPATH']
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from netparity.capture.interpreter import own_interpreter
from netparity.errors import UsageError
from netparity.trace import holds_trace
from netparity.trace.claim import RUN_ID_ENV

ENV_VAR = "NETPARITY_CAPTURE"
BOOTSTRAP_DIR = str(Path(__file__).resolve().parent / "_bootstrap")
_SRC_DIR = str(Path(__file__).resolve().parents[3])  # the directory holding netparity/

#: keys of the JSON policy in ``NETPARITY_CAPTURE``
POLICY_KEYS = ("path", "level", "payload", "steps", "ranks", "include", "exclude", "directions",
               "max_bytes", "overwrite", "stop_on_nonfinite", "profile")

_state: dict[str, Any] = {}


def capture_env(path: str | os.PathLike[str], options: Mapping[str, Any],
                base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for a child process captured into ``path`` with ``options`` (policy keys)."""
    env = dict(os.environ if base is None else base)
    policy = {k: v for k, v in options.items() if k in POLICY_KEYS and v is not None}
    policy["path"] = str(Path(path).resolve())
    env[ENV_VAR] = json.dumps(policy)
    # every process of the command writes one run: a rank that starts after the others ended
    # (msrun's workers do not overlap on a short script) joins it instead of finding a trace
    env.setdefault(RUN_ID_ENV, uuid.uuid4().hex)
    parts = [BOOTSTRAP_DIR, _SRC_DIR]
    old = env.get("PYTHONPATH")
    if old:
        parts.append(old)
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def run_captured(cmd: Sequence[str], path: str | os.PathLike[str],
                 options: Mapping[str, Any]) -> int:
    """Run ``cmd`` captured into ``path``; returns its exit status (128+N when killed by signal N).

    Raises:
        UsageError: empty command, or an existing trace without ``overwrite``.
    """
    if not cmd:
        raise UsageError("no command to run (use: netparity run -o DIR -- python train.py ...)")
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} exists and is not a directory")
    if not options.get("overwrite") and holds_trace(out):
        raise UsageError(f"{out} already holds a trace; choose another directory or --overwrite")
    # ``python`` (by the command or by a launcher's workers) is the interpreter netparity runs in
    with own_interpreter(capture_env(out, options)) as env:
        try:
            proc = subprocess.Popen(list(cmd), env=env)
        except OSError as e:
            raise UsageError(f"cannot run {cmd[0]!r}: {e.strerror or e}") from None
        try:
            rc = proc.wait()
        except KeyboardInterrupt:  # the child got the same SIGINT; let it finish its exit handlers
            proc.send_signal(signal.SIGINT)
            rc = proc.wait()
    return 128 - rc if rc < 0 else rc


# ---- inside the captured process ------------------------------------------------------------
class ImportWatcher(importlib.abc.MetaPathFinder):
    """Finds nothing itself; when module ``name`` is imported, runs ``on_import`` after it
    loads (never breaking the program: an error disables netparity with one line)."""

    def __init__(self, name: str, on_import: Any):
        self.name = name
        self.on_import = on_import

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        orig = loader.exec_module
        then = self.on_import

        def exec_module(module: Any) -> None:
            orig(module)
            try:
                then()
            except Exception as e:  # never break the user's program
                print(f"netparity: capture disabled ({e})", file=sys.stderr)

        loader.exec_module = exec_module
        return spec


def when_imported(name: str, then: Any) -> None:
    """Run ``then()`` once module ``name`` is imported (now, when it already is)."""
    if name in sys.modules:
        then()
    else:
        sys.meta_path.insert(0, ImportWatcher(name, then))


def activate_from_env() -> None:
    """Called by the bootstrap ``sitecustomize``: arm the capture for when torch is imported."""
    raw = os.environ.get(ENV_VAR)
    if not raw or "--multiprocessing-fork" in sys.argv:  # spawned workers capture nothing
        return
    _state["policy"] = json.loads(raw)
    _state["pid"] = os.getpid()
    if "torch" in sys.modules:
        _on_torch()
    else:
        sys.meta_path.insert(0, ImportWatcher("torch", _on_torch))
    if _state["policy"].get("profile"):  # MindSpore scripts: step timing only
        from netparity.frameworks.mindspore.launcher import arm_profile

        arm_profile(_state["policy"], _state["pid"])
    else:  # MindSpore PyNative scripts: captured from their first root Cell call
        from netparity.frameworks.mindspore.zerocode import arm_capture

        arm_capture(_state["policy"], _state["pid"], _state)


def _on_torch() -> None:
    import torch.nn.modules.module as mm

    from netparity.frameworks.torch.optimizer_hooks import track_optimizers

    track_optimizers()  # the optimizers exist before the first model call starts the capture

    def first_call(module: Any, args: Any) -> None:
        if os.getpid() != _state.get("pid") or "cap" in _state or _mindspore_capturing():
            return
        handle.remove()
        if _state["policy"].get("profile"):
            _start_profile(module, args)
            return
        cap = _start()
        (cap._lg_gpre if cap.light else cap._global_pre)(module, args)

    handle = mm.register_module_forward_pre_hook(first_call)
    if _state["policy"].get("profile"):
        _time_loader_waits()


def _mindspore_capturing() -> bool:
    """Whether the MindSpore capture owns this process (it started first)."""
    ms = sys.modules.get("netparity.frameworks.mindspore.zerocode")
    return ms is not None and getattr(ms, "_state", {}).get("cap") is not None


def _time_loader_waits() -> None:
    """Time every ``DataLoader`` iterator's ``next()`` (class-level wrapper): the data phase
    of ``--profile`` is the waits, and the first step starts at the wait that fetched its
    batch (waits before the first model call are kept until the timing starts)."""
    import weakref

    from torch.utils.data.dataloader import _BaseDataLoaderIter

    waits: list[tuple[float, float]] = []
    _state["waits"] = waits
    orig = _BaseDataLoaderIter.__next__
    orig_init = _BaseDataLoaderIter.__init__
    clock = time.perf_counter

    def __init__(it: Any, loader: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        orig_init(it, loader, *args, **kwargs)
        try:  # the loader's settings, quoted by the data-starvation advice
            it._netparity_loader = weakref.ref(loader)
        except TypeError:
            pass

    def __next__(it: Any) -> Any:  # noqa: N807 - the dunder being wrapped
        t = clock()
        try:
            return orig(it)
        finally:
            timer = _state.get("cap")
            if timer is not None:
                timer._data_wait(t, clock())
            elif os.getpid() == _state.get("pid"):
                waits[:] = [(t, clock())]  # only the latest: the batch the first step uses
                _state["loader"] = getattr(it, "_netparity_loader", None)

    _BaseDataLoaderIter.__init__ = __init__  # type: ignore[method-assign,assignment]
    _BaseDataLoaderIter.__next__ = __next__  # type: ignore[method-assign,assignment]


def _start() -> Any:
    from netparity.capture.policy import CapturePolicy
    from netparity.frameworks.torch.capture import TorchCapture

    pol = dict(_state["policy"])
    path = pol.pop("path")
    overwrite = bool(pol.pop("overwrite", False))
    stop = bool(pol.pop("stop_on_nonfinite", False))
    light = stop and "level" not in pol  # no level asked for: the light stop
    if "directions" in pol:
        pol["directions"] = tuple(pol["directions"])
    policy = CapturePolicy(**pol)
    cap = TorchCapture(None, path, policy, overwrite=overwrite, global_mode=True,
                       auto_step=True, detect_loss=True,
                       manifest={"launcher": "netparity run"}, stop_on_nonfinite=stop,
                       light=light)
    if stop:
        _one_line_stop()
    cap.install()
    _state["cap"] = cap
    atexit.register(_finish)
    return cap


def _start_profile(module: Any, args: Any) -> None:
    """``netparity run --profile``: light step timing of the first root module called (its
    steps end at any optimizer's step) instead of a capture; docs/perf.md."""
    from netparity.capture.timing import loader_facts
    from netparity.frameworks.torch.timing import TorchTiming

    pol = _state["policy"]
    ref = _state.get("loader")  # the loader that fed the first step (as netparity.profile's)
    manifest: dict[str, Any] = {"launcher": "netparity run --profile"}
    loader = ref() if ref is not None else None
    if loader is not None:
        manifest["loader"] = loader_facts(loader)
    timer = TorchTiming(module, pol["path"], overwrite=bool(pol.get("overwrite", False)),
                        manifest=manifest, global_optimizer=True).install()
    if _state.get("waits"):  # the first step began with the loader wait that fetched its batch
        timer.backdate(_state["waits"][-1][0], _state["waits"])
    # this call's own pre-hooks were collected before ours existed: enter the root by hand
    timer._pre_hook("", type(module).__name__)(module, args)
    _state["cap"] = timer
    atexit.register(_finish)


def _one_line_stop() -> None:
    """A :class:`NonFiniteStop` that reaches the top of the script prints its one line, not a
    traceback through the user's training loop (the exit status stays 1)."""
    from netparity.capture.nonfinite import NonFiniteStop

    prev = sys.excepthook

    def hook(tp: Any, e: Any, tb: Any) -> None:
        if isinstance(e, NonFiniteStop):
            print(f"netparity: stopped: {e}", file=sys.stderr)
        else:
            prev(tp, e, tb)

    sys.excepthook = hook


def _finish() -> None:
    close_at_exit(_state.get("cap"), _state.get("pid"))


def close_at_exit(cap: Any, pid: Any) -> None:
    """Close ``cap`` (a capture or timer) in the process that opened it (``pid``), with one
    line instead of a traceback when that fails."""
    if cap is None or os.getpid() != pid:
        return
    try:
        cap.close()
    except Exception as e:
        print(f"netparity: could not close the trace ({e})", file=sys.stderr)
