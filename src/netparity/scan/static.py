"""Find the PyTorch APIs a script uses, statically: parsed with :mod:`ast`, never imported or run.

Imports and aliases are resolved (``import torch.nn as nn``, ``from torch.nn import functional as
F``, ``from torch import optim``, ``import torch as t``), so ``nn.Conv2d(...)`` is reported as
``torch.nn.Conv2d`` with its line and the argument values written at the call. Tensor methods are
reported only where the receiver is known to be a tensor: a name assigned from a PyTorch call (or
from a method of such a tensor), a parameter annotated ``Tensor``, or a PyTorch call used directly
as the receiver; these uses carry ``confidence="inferred"``. A method on anything else
(``self.fc(x).view(...)``, ``model.parameters()``) is not guessed from its name.

Limits (see docs/scan.md): imports are collected per file, not per scope; names bound by
``getattr``, ``exec`` or star imports are invisible; annotations are not reported.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netparity import inputs
from netparity.errors import UsageError

#: directories never descended into when a package directory is scanned
_SKIP_DIRS = {"__pycache__", ".git", ".venv", "venv", "node_modules", "build", "dist", ".tox"}

#: Tensor methods whose result is not a tensor (the receiver inference stops there)
_NON_TENSOR_METHODS = {"item", "tolist", "numpy", "size", "dim", "numel", "backward", "data_ptr",
                       "element_size", "is_contiguous", "get_device", "stride", "nelement"}
#: torch functions that do not return a tensor
_NON_TENSOR_FUNCS = {"manual_seed", "save", "load", "no_grad", "enable_grad", "is_tensor",
                     "numel", "equal", "allclose", "compile", "device", "use_deterministic_algorithms"}


@dataclass(frozen=True)
class Arg:
    """An argument written at a call: its literal value when it has one, and its source text."""

    text: str
    value: Any = None
    known: bool = False


@dataclass
class Use:
    """One use of a PyTorch API in a scanned file."""

    name: str  #: resolved dotted name, e.g. ``torch.nn.Conv2d`` or ``torch.Tensor.view``
    file: str
    line: int
    col: int
    is_call: bool = False
    args: list[Arg] = field(default_factory=list)
    kwargs: dict[str, Arg] = field(default_factory=dict)
    confidence: str = "resolved"  #: ``resolved`` (by imports) or ``inferred`` (tensor receiver)
    params_from_model: bool = False  #: first argument is ``<something>.parameters()``
    #: a class named in ``isinstance``/``issubclass`` (tested, not built: no trap applies)
    type_check: bool = False

    def arg(self, name: str, pos: int | None) -> Arg | None:
        """The argument passed as keyword ``name`` or at position ``pos`` (None: not passed)."""
        if name in self.kwargs:
            return self.kwargs[name]
        if pos is not None and 0 <= pos < len(self.args):
            return self.args[pos]
        return None


def _arg(node: ast.expr) -> Arg:
    text = ast.unparse(node)
    try:
        return Arg(text, ast.literal_eval(node), True)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return Arg(text)


def collect_aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> dotted torch name, from every ``import``/``from ... import`` in the file."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name != "torch" and not a.name.startswith("torch."):
                    continue
                if a.asname:
                    aliases[a.asname] = a.name
                else:  # ``import torch.nn`` binds ``torch``
                    aliases["torch"] = "torch"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            mod = node.module
            if mod != "torch" and not mod.startswith("torch."):
                continue
            for a in node.names:
                if a.name == "*":
                    continue
                aliases[a.asname or a.name] = f"{mod}.{a.name}"
    return aliases


class _Visitor(ast.NodeVisitor):
    """Walks one module in source order, recording uses and tracking tensor-valued names."""

    def __init__(self, file: str, aliases: Mapping[str, str], known: set[str],
                 modules: set[str]) -> None:
        self.file = file
        self.aliases = aliases
        self.known = known  # names in the table (for "is this torch call a function?")
        self.modules = modules  # dotted names that are modules (never reported themselves)
        self.uses: list[Use] = []
        self.scopes: list[set[str]] = [set()]
        self.handled: set[int] = set()  # id() of nodes already reported as part of a call
        self.type_checks: set[int] = set()  # id() of nodes inside isinstance(_, HERE)

    # ------------------------------------------------------------------ resolution
    def resolve(self, node: ast.AST) -> str | None:
        """Dotted torch name of a Name/Attribute chain, or None."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def is_tensor(self, node: ast.AST) -> bool:
        """Conservative: is this expression certainly a torch tensor?"""
        if isinstance(node, ast.Name):
            return node.id in self.scopes[-1] or node.id in self.scopes[0]
        if isinstance(node, ast.Call):
            name = self.resolve(node.func)
            if name is not None:
                short = name.rsplit(".", 1)[-1]
                return (name not in self.modules and short not in _NON_TENSOR_FUNCS
                        and (name.startswith("torch.nn.functional.")
                             or (name.count(".") == 1 and short[:1].islower())))
            if isinstance(node.func, ast.Attribute):
                return (node.func.attr not in _NON_TENSOR_METHODS
                        and self.is_tensor(node.func.value))
            return False
        if isinstance(node, ast.BinOp):
            return self.is_tensor(node.left) or self.is_tensor(node.right)
        if isinstance(node, ast.UnaryOp):
            return self.is_tensor(node.operand)
        if isinstance(node, ast.Subscript):
            return self.is_tensor(node.value)
        return False

    # ------------------------------------------------------------------ recording
    def _record(self, name: str, node: ast.AST, call: ast.Call | None,
                confidence: str = "resolved") -> None:
        use = Use(name=name, file=self.file, line=getattr(node, "lineno", 0),
                  col=getattr(node, "col_offset", 0), is_call=call is not None,
                  confidence=confidence, type_check=id(node) in self.type_checks)
        if call is not None:
            use.args = [_arg(a) for a in call.args if not isinstance(a, ast.Starred)]
            use.kwargs = {k.arg: _arg(k.value) for k in call.keywords if k.arg}
            first = call.args[0] if call.args else next(
                (k.value for k in call.keywords if k.arg == "params"), None)
            use.params_from_model = (isinstance(first, ast.Call)
                                     and isinstance(first.func, ast.Attribute)
                                     and first.func.attr == "parameters")
        self.uses.append(use)

    # ------------------------------------------------------------------ visitors
    def visit_Call(self, node: ast.Call) -> None:
        name = self.resolve(node.func)
        if name is not None and name not in self.modules:
            self._record(name, node, node)
            self.handled.add(id(node.func))
        elif name is None and isinstance(node.func, ast.Attribute) \
                and self.is_tensor(node.func.value):
            self._record(f"torch.Tensor.{node.func.attr}", node, node, "inferred")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if id(node) in self.handled:
            self.generic_visit(node)
            return
        name = self.resolve(node)
        if name is not None:
            # outermost resolvable chain only: ``torch.nn.functional.relu`` is one use
            if name not in self.modules:
                self._record(name, node, None)
            return
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if id(node) in self.handled or not isinstance(node.ctx, ast.Load):
            return
        name = self.aliases.get(node.id)
        if name is not None and name not in self.modules and name in self.known:
            self._record(name, node, None)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for d in node.decorator_list:
            self.visit(d)
        for d in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.visit(d)
        scope: set[str] = set()
        for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
            if a.annotation is not None and self.resolve(a.annotation) == "torch.Tensor":
                scope.add(a.arg)
        self.scopes.append(scope)
        for stmt in node.body:  # annotations are skipped on purpose: they are not calls
            self.visit(stmt)
        self.scopes.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        tensor = self.is_tensor(node.value)
        for t in node.targets:
            if isinstance(t, ast.Name):
                (self.scopes[-1].add if tensor else self.scopes[-1].discard)(t.id)
            else:
                self.visit(t)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
        if isinstance(node.target, ast.Name):
            tensor = (self.resolve(node.annotation) == "torch.Tensor"
                      or (node.value is not None and self.is_tensor(node.value)))
            (self.scopes[-1].add if tensor else self.scopes[-1].discard)(node.target.id)
        else:
            self.visit(node.target)

    def visit_Import(self, node: ast.Import) -> None:
        return  # imports are declarations, not uses

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        return


def module_names(table_names: Iterable[str]) -> set[str]:
    """Dotted prefixes of table names that are modules (``torch.nn``...), never reported alone."""
    mods = {"torch"}
    for n in table_names:
        parts = n.split(".")
        for i in range(2, len(parts)):
            prefix = ".".join(parts[:i])
            if prefix != "torch.Tensor" and parts[i - 1][:1].islower():
                mods.add(prefix)
    return mods


def scan_source(source: str, file: str, known: set[str], modules: set[str]) -> list[Use]:
    """Uses of PyTorch APIs in one file's text; a syntax error -> ``UsageError`` naming the line."""
    try:
        tree = ast.parse(source, filename=file)
        visitor = _Visitor(file, collect_aliases(tree), known, modules)
        visitor.type_checks = {id(sub) for node in ast.walk(tree) if isinstance(node, ast.Call)
                               and isinstance(node.func, ast.Name)
                               and node.func.id in ("isinstance", "issubclass")
                               for arg in node.args[1:] for sub in ast.walk(arg)}
        visitor.visit(tree)
    except SyntaxError as e:
        raise UsageError(f"{file}:{e.lineno or 0}: syntax error: {e.msg}") from None
    except ValueError as e:  # e.g. null bytes
        raise UsageError(f"{file}: cannot parse: {e}") from None
    except (RecursionError, MemoryError):
        # ``x = 1 + 1 + ...`` 20k times: the parser and the tree walk recurse once per level
        raise UsageError(f"{file}: expressions nested too deeply to scan (a generated "
                         "file?); scan the scripts that use PyTorch") from None
    return sorted(visitor.uses, key=lambda u: (u.line, u.col))


def iter_python_files(paths: Iterable[str]) -> Iterator[Path]:
    """The files to scan: each file given, and every ``*.py`` under each directory given."""
    for p in paths:
        path = Path(p)
        if path.is_dir():
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
                for f in sorted(files):
                    if f.endswith(".py"):
                        inputs.check_within(Path(root) / f, path, error=UsageError,
                                            what="source file", tree="the scanned folder")
                        yield Path(root) / f
        elif path.exists():
            yield path
        else:
            raise UsageError(f"{p}: no such file or directory")


def _local_imports(path: Path, roots: list[Path]) -> list[Path]:
    """Files of the local modules ``path`` imports: relative imports, and absolute ones whose
    first part is a module or package next to the script (or in a folder being scanned)."""
    try:
        tree = ast.parse(read_source(path), filename=str(path))
    except (SyntaxError, ValueError, RecursionError, MemoryError, UsageError):
        return []  # the scan itself reports it
    here = path.parent
    out: list[Path] = []

    def add(base: Path, dotted: str) -> None:
        parts = [p for p in dotted.split(".") if p]
        for n in range(len(parts), 0, -1):
            stem = base.joinpath(*parts[:n])
            for cand in (stem.with_suffix(".py"), stem / "__init__.py"):
                if cand.is_file():
                    out.append(cand)
                    return

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here
                for _ in range(node.level - 1):
                    base = base.parent
                mod = node.module or ""
                if mod:
                    add(base, mod)
                for a in node.names:
                    add(base, f"{mod}.{a.name}" if mod else a.name)
            elif node.module:
                for root in (here, *roots):
                    add(root, node.module)
                    for a in node.names:
                        add(root, f"{node.module}.{a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                for root in (here, *roots):
                    add(root, a.name)
    return out


def follow_imports(files: Iterable[Path]) -> list[Path]:
    """``files`` plus, transitively, the local modules they import (a project, not a file);
    each file once, in discovery order. Only ``.py`` files on disk are followed."""
    start = list(files)
    roots = sorted({p.parent.resolve() for p in start})
    seen = {p.resolve() for p in start}
    out = list(start)
    queue = list(start)
    while queue:
        for dep in _local_imports(queue.pop(0), roots):
            r = dep.resolve()
            if r not in seen and dep.name.endswith(".py"):
                seen.add(r)
                out.append(dep)
                queue.append(dep)
    return out


#: the largest source file scanned (the biggest hand-written Python files are a few MB)
MAX_SOURCE = 64 << 20


def read_source(path: Path) -> str:
    """A file's text; not a regular file (a FIFO would hang, ``/dev/zero`` never end), larger
    than the opener's text limit, unreadable or undecodable -> ``UsageError``."""
    return inputs.read_text(path, error=UsageError, what="source file")
