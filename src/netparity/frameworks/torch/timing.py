"""Light timing of a PyTorch training run (``netparity.profile``): the hooks of
:class:`~netparity.capture.timing.StepTimer` for ``nn.Module`` and ``torch.optim``.

* every module: ``register_forward_pre_hook`` / ``register_forward_hook`` (the root's give the
  forward phase, the others the per-module times);
* every trainable parameter: ``register_post_accumulate_grad_hook`` (the last one ends the
  backward phase);
* the optimizer: ``register_step_pre_hook`` / ``register_step_post_hook`` (its end ends the step);
* a ``DistributedDataParallel`` model: a communication hook (``register_comm_hook``, once: DDP
  cannot remove it) that all-reduces each bucket as DDP's default does (sum, divided by the
  world size) and notes when the bucket was handed over and when it came back, its bytes and
  parameters; :meth:`TorchTiming.probe_comm` times plain all-reduces of several sizes (the
  bandwidth model of the bucket advice, ``netparity.analyzers.allreduce``).

Example:
    >>> import tempfile, torch
    >>> from netparity.frameworks.torch.timing import profile
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> with profile(model, tempfile.mkdtemp(), optimizer=opt) as prof:
    ...     for _ in range(3):
    ...         model(torch.ones(2, 4)).sum().backward(); opt.step(); opt.zero_grad()
    >>> prof.steps
    3
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterable
from typing import Any

from netparity.capture.timing import StepTimer
from netparity.errors import UsageError

__all__ = ["TorchTiming", "profile", "timing_facts"]


class TorchTiming(StepTimer):
    """Step timing of a ``torch.nn.Module`` (and its optimizer); see :func:`profile`."""

    def __init__(self, model: Any, path: str | os.PathLike[str], *, optimizer: Any = None,
                 loader: Iterable[Any] | None = None, modules: bool = True,
                 overwrite: bool = False, manifest: dict[str, Any] | None = None,
                 global_optimizer: bool = False, comm: bool = True, writer: Any = None,
                 step_of: Any = None, rank: int | None = None, module_memory_steps: int = 3,
                 module_backward: bool = True):
        import torch
        import torch.distributed as dist

        from netparity.frameworks.torch.compiled import clean_name, hooked_modules

        if not isinstance(model, torch.nn.Module):
            raise UsageError(f"profile needs a torch.nn.Module, got {type(model).__name__}")
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise UsageError(f"optimizer must be a torch.optim.Optimizer, got "
                             f"{type(optimizer).__name__}")
        self.model = model
        self.optimizer = optimizer
        self._tensor = torch.Tensor
        self._module_backward = module_backward and modules
        # without an optimizer object (``netparity run --profile``): every optimizer's step
        self._global_optimizer = global_optimizer and optimizer is None
        self._comm = comm
        self._comm_hooked = False
        params = list(model.parameters())
        self._param_index = {id(p): i for i, p in enumerate(params)}
        distributed = dist.is_available() and dist.is_initialized()
        if rank is None:
            rank = dist.get_rank() if distributed else 0
        memory = _memory_reader(_device_of(model))
        # the parameters under each module: its backward ends with their gradients
        owned = {name: [self._param_index[id(p)] for p in mod.parameters()]
                 for name, mod in hooked_modules(model)} if modules else {}
        facts = {"framework": "torch", "framework_version": torch.__version__,
                 "device": _device_of(model),
                 # (name, shape) in creation order: the side by side pairs modules by the
                 # parameters they own (netparity.align.ownership), across frameworks too
                 "params": [[clean_name(n), list(p.shape)] for n, p in model.named_parameters()],
                 "param_bytes": [p.numel() * p.element_size() for p in params],
                 "memory": memory[0],
                 "module_memory": memory[0] if memory[3] is not None else None,
                 **({"world_size": dist.get_world_size(), "backend": dist.get_backend()}
                    if distributed else {}),
                 **(manifest or {})}
        # ranks share the trace directory: rank 0 claims it and writes the manifest first, then
        # the others join its run (the claim also lets a rank join before the manifest exists:
        # the order only keeps rank 0 the run's first writer)
        ordered = distributed and dist.get_world_size() > 1 and writer is None
        if ordered and rank != 0:
            dist.barrier()
        try:
            super().__init__(path, facts, loader=loader, modules=modules, overwrite=overwrite,
                             rank=rank, writer=writer, step_of=step_of, memory=memory[:3],
                             module_memory=memory[3], module_memory_steps=module_memory_steps,
                             owned=owned)
        finally:
            if ordered and rank == 0:
                dist.barrier()

    def _register(self) -> list[Any]:
        root = self.model
        h: list[Any] = []
        # (compiled regions: timed at their boundaries, never traced into the compiled code)
        from netparity.frameworks.torch.compiled import boundary_hook, hooked_modules, unwrap

        mods = hooked_modules(root) if self._modules else [("", root)]
        for name, mod in mods:
            h.append(mod.register_forward_pre_hook(
                boundary_hook(mod, self._pre_hook(name, type(unwrap(mod)).__name__))))
            h.append(mod.register_forward_hook(boundary_hook(mod, self._post_hook(name))))
        for i, p in enumerate(root.parameters()):
            if p.requires_grad:
                h.append(p.register_post_accumulate_grad_hook(self._grad_hook_for(i)))
        if self._comm and not self._comm_hooked:
            self._hook_ddp(root)
        if self.optimizer is not None:
            h.append(self.optimizer.register_step_pre_hook(self._opt_pre))
            h.append(self.optimizer.register_step_post_hook(self._opt_post))
        elif self._global_optimizer:
            from torch.optim.optimizer import (
                register_optimizer_step_post_hook,
                register_optimizer_step_pre_hook,
            )

            h.append(register_optimizer_step_pre_hook(self._opt_pre))
            h.append(register_optimizer_step_post_hook(self._opt_post))
        return h


    def _watch_backward(self, out: Any, row: list[Any], args: Any = ()) -> None:
        # the module's backward begins when the gradient reaches its output's autograd node
        # and ends with the gradients of the parameters it owns (whose accumulation is the
        # module's first op's node) or of its inputs; node hooks die with the graph
        if not self._handles or not self._module_backward:
            return
        outs = out if isinstance(out, (tuple, list)) else (out,)
        nodes = [o.grad_fn for o in outs if isinstance(o, self._tensor) and o.grad_fn is not None]
        for node in nodes:
            node.register_prehook(functools.partial(self._bwd_begins, row))
        if not nodes or self._owned.get(row[0]):
            return  # with parameters: their gradients end it (after its output's node)
        # parameterless: it ends when the gradient leaves it, i.e. when its inputs' gradients
        # are made -- not when its output's node is done (a softmax-attention's other ops ran
        # after that, and were charged to its parent: the root)
        ins = [a for a in (args if isinstance(args, (tuple, list)) else (args,))
               if isinstance(a, self._tensor) and a.requires_grad
               and not any(a is o for o in outs)  # in place: the input is the output now
               and a.grad_fn not in nodes]
        end = functools.partial(self._bwd_ends, row)
        for a in ins:
            a.register_hook(lambda g, end=end: end())
        if not ins:  # its gradient leaves for no input (data in): its output's node ends it
            for node in nodes:
                node.register_hook(end)

    def _hook_ddp(self, model: Any) -> None:
        from torch.nn.parallel import DistributedDataParallel

        if not isinstance(model, DistributedDataParallel):
            return
        import torch.distributed as dist

        group = model.process_group
        index = self._param_index
        done = self._comm_done

        def allreduce(_state: Any, bucket: Any) -> Any:
            # DDP's default reduction (the mean over ranks), timed: handed over -> reduced
            t = time.perf_counter()
            buf = bucket.buffer()
            buf.div_(group.size())
            params = [index.get(id(p), -1) for p in bucket.parameters()]
            nbytes = buf.numel() * buf.element_size()
            fut = dist.all_reduce(buf, group=group, async_op=True).get_future()
            b = bucket.index()

            def finished(f: Any) -> Any:
                done(b, t, nbytes, params)
                return f.value()[0]

            return fut.then(finished)

        # DDP checks the hook's annotations against dist.GradBucket (ours are strings here)
        allreduce.__annotations__ = {}
        try:
            model.register_comm_hook(None, allreduce)
        except RuntimeError:  # the user registered one already: no bucket times (tail only)
            return
        self._comm_hooked = True

    def probe_comm(self, sizes: list[int] | None = None, repeats: int = 5) -> list[float]:
        """Time a plain all-reduce of float32 tensors of ``sizes`` bytes (default 4 KiB to
        16 MiB), median of ``repeats``, on the default process group; every rank must call it
        (a collective). Kept in the trace (``comm_probe``): the bucket advice fits its
        bandwidth model (latency + bytes / bandwidth) on it. Returns the seconds per size."""
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise UsageError("probe_comm needs an initialised torch.distributed process group")
        sizes = sizes or [4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]
        dev = torch.device(_device_of(self.model))
        sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
        out = []
        for nbytes in sizes:
            x = torch.ones(max(nbytes // 4, 1), dtype=torch.float32, device=dev)
            dist.all_reduce(x)  # warm the connection and the buffers
            sync()
            times = []
            for _ in range(max(repeats, 1)):
                dist.barrier()
                t = time.perf_counter()
                dist.all_reduce(x)
                sync()
                times.append(time.perf_counter() - t)
            out.append(sorted(times)[len(times) // 2])
        self.record_probe(list(sizes), out)
        return out


def _memory_reader(device: str) -> tuple[str, Any, Any, Any]:
    """What the memory peak per phase reads: CUDA's allocator peak on a CUDA model; else the
    process's peak resident set (Linux ``/proc/self/status`` ``VmHWM``, reset at each phase
    start by writing 5 to ``/proc/self/clear_refs``); else (no /proc) the ``getrusage``
    high-water mark, which never goes down (and after ``exec`` still holds the parent's)."""
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():  # (untested: no GPU here)
        dev = torch.device(device)
        return ("cuda.max_memory_allocated", lambda: int(torch.cuda.max_memory_allocated(dev)),
                lambda: torch.cuda.reset_peak_memory_stats(dev),
                lambda: (int(torch.cuda.max_memory_allocated(dev)),
                         int(torch.cuda.memory_allocated(dev))))
    if _vm_hwm() is not None and _reset_hwm():
        pm = _ProcMemory()
        return ("rss_peak", _vm_hwm, pm.reset, pm.read)
    import resource
    import sys

    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return ("rss_high_water", lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale,
            None, None)


class _ProcMemory:
    """``VmHWM`` and ``VmRSS`` in one read of ``/proc/self/status`` through a descriptor kept
    open (``pread`` at 0: ~45 us against ~100 us for open/read/close), for the per-module
    forward peaks."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._clear: int | None = None

    def reset(self) -> None:
        """``VmHWM`` back to the current resident set (``_reset_hwm``, descriptor kept)."""
        if self._clear is None:
            self._clear = os.open("/proc/self/clear_refs", os.O_WRONLY)
        os.write(self._clear, b"5")

    def read(self) -> tuple[int, int]:
        if self._fd is None:
            self._fd = os.open("/proc/self/status", os.O_RDONLY)
        b = os.pread(self._fd, 8192, 0)
        i, j = b.find(b"VmHWM:"), b.find(b"VmRSS:")
        return (int(b[i + 6:b.index(b"kB", i)]) * 1024, int(b[j + 6:b.index(b"kB", j)]) * 1024)

    def __del__(self, _close: Any = os.close) -> None:  # (os may be gone at shutdown)
        for fd in (self._fd, self._clear):
            if fd is not None:
                _close(fd)


def _vm_hwm() -> Any:
    """This process's peak resident set in bytes (``VmHWM``), or None without /proc."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_hwm() -> bool:
    """Reset ``VmHWM`` to the current resident set (Linux >= 4.0); False where refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def timing_facts(model: Any, loader: Any = None) -> dict[str, Any]:
    """The manifest facts a timed trace carries (for a capture that records timing too)."""
    from netparity.capture.timing import loader_facts

    params = list(model.parameters())
    mem = _memory_reader(_device_of(model))
    return {"timing": "light", "loader": loader_facts(loader),
            "params": [[n, list(p.shape)] for n, p in model.named_parameters()],
            "param_bytes": [p.numel() * p.element_size() for p in params],
            "memory": mem[0], "module_memory": mem[0] if mem[3] is not None else None}


def _device_of(model: Any) -> str:
    for p in model.parameters():
        return str(p.device)
    return "cpu"


def profile(model: Any, path: str | os.PathLike[str], *, optimizer: Any = None,
            loader: Iterable[Any] | None = None, modules: bool = True, overwrite: bool = False,
            manifest: dict[str, Any] | None = None, module_memory_steps: int = 3,
            module_backward: bool = True) -> TorchTiming:
    """Time each training step of ``model`` into the trace directory ``path`` (light mode).

    ``optimizer``: its ``step()`` ends each step (else call ``prof.step()``); ``loader``: its
    ``next()`` waits are the data phase (the loader keeps working unchanged; restored on close).
    ``module_memory_steps``: each module's forward memory peak is read in this many first
    steps (two reads and resets per module call; 0: never). ``module_backward=False`` leaves
    out the per-module backward times (one autograd-node hook per module call: ~0.1 ms each
    on this machine's ResNet-50, see docs/perf.md).
    Read the result with ``netparity perf PATH`` or :func:`netparity.analyzers.perf.analyze`.

    Example:
        >>> import tempfile, torch
        >>> m = torch.nn.Linear(2, 2)
        >>> with profile(m, tempfile.mkdtemp()) as prof:
        ...     _ = m(torch.ones(1, 2)); prof.step()
        >>> prof.steps
        1
    """
    return TorchTiming(model, path, optimizer=optimizer, loader=loader, modules=modules,
                       overwrite=overwrite, manifest=manifest,
                       module_memory_steps=module_memory_steps,
                       module_backward=module_backward).install()
