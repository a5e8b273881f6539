"""Model states kept on disk while ``netparity step`` runs (bounded memory).

The step workflow needs the reference's state at the start of every step, the candidate's
state at the start of every later step and both initial states, for the noise run, the golden
run, evaluation and every replay. Held in memory they were ~36 copies of the weights at once
for a ViT-B/32 (killed at 12.8 GB). A :class:`StateStore` writes each state once, as raw
bytes in one file under a private folder, and hands back a :class:`SpilledState`: a read-only
mapping (name -> array, plus ``dtypes`` like a :class:`~netparity.ckpt.io.CheckpointDict`)
that reads one array from the file each time it is looked up (no ``mmap``: what is read is
freed when the caller drops it). Only the arrays in use are in memory.

Example:
    >>> store = StateStore(out_dir)                       # doctest: +SKIP
    >>> st = store.spill(state_of(model))                 # doctest: +SKIP
    >>> set_weights(model, st)                            # one array at a time   # doctest: +SKIP
    >>> store.close()                                     # removes the files     # doctest: +SKIP
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from netparity.errors import UsageError


class SpilledState(Mapping[str, np.ndarray]):
    """A model state written to one file; each lookup reads that array (a fresh copy)."""

    def __init__(self, path: Path, index: dict[str, tuple[int, str, tuple[int, ...]]],
                 dtypes: dict[str, str], store: StateStore) -> None:
        self.path, self._index, self.dtypes = path, index, dtypes
        self.store = store  # its folder lives as long as a state written there is in use

    def __getitem__(self, name: str) -> np.ndarray:
        off, dt, shape = self._index[name]
        count = int(np.prod(shape, dtype=np.int64))
        with open(self.path, "rb") as f:
            f.seek(off)
            a = np.fromfile(f, dtype=np.dtype(dt), count=count)
        if a.size != count:
            raise UsageError(f"{self.path}: a kept model state was truncated (disk full?)")
        return a.reshape(shape)

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def shape(self, name: str) -> tuple[int, ...]:
        """The shape of ``name`` without reading it."""
        return self._index[name][2]


class StateStore:
    """Where :class:`SpilledState` files live: a private folder inside ``parent`` (the
    workflow's output folder), removed by :meth:`close` (or, when the workflow stopped on an
    error, once the store is garbage, at the latest when the interpreter exits)."""

    def __init__(self, parent: str | os.PathLike[str]) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix=".states-", dir=parent))
        self._n = 0
        self._remove = weakref.finalize(self, shutil.rmtree, str(self.folder), True)

    def spill(self, state: Mapping[str, Any]) -> SpilledState:
        """Write ``state`` (name -> array; its ``dtypes`` kept) to disk; returns it lazily."""
        if isinstance(state, SpilledState):
            return state
        self._n += 1
        path = self.folder / f"{self._n}.bin"
        index: dict[str, tuple[int, str, tuple[int, ...]]] = {}
        off = 0
        try:
            with open(path, "wb") as f:
                for k, v in state.items():
                    a = np.asarray(v)  # (np.ascontiguousarray makes a 0-d array 1-d)
                    f.write(np.ascontiguousarray(a.reshape(-1)).view(np.uint8).data)
                    index[k] = (off, a.dtype.str, tuple(int(x) for x in a.shape))
                    off += a.nbytes
        except OSError as e:
            raise UsageError(f"{self.folder}: cannot keep a model state on disk "
                             f"({e.strerror})") from None
        return SpilledState(path, index, dict(getattr(state, "dtypes", {}) or {}), self)

    def keep(self, obj: Any) -> KeptObject:
        """Write any picklable object (an optimizer's state in its framework's format) to disk;
        :meth:`KeptObject.load` reads back a fresh copy."""
        self._n += 1
        path = self.folder / f"{self._n}.pkl"
        try:
            with open(path, "wb") as f:
                pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
        except OSError as e:
            raise UsageError(f"{self.folder}: cannot keep an optimizer state on disk "
                             f"({e.strerror})") from None
        return KeptObject(path, self)

    def close(self) -> None:
        """Remove every state written (each :class:`SpilledState` is unusable after)."""
        self._remove()


class KeptObject:
    """An object :meth:`StateStore.keep` wrote to disk."""

    def __init__(self, path: Path, store: StateStore) -> None:
        self.path, self.store = path, store

    def load(self) -> Any:
        """A fresh copy of the object (the caller may change it)."""
        with open(self.path, "rb") as f:
            return pickle.load(f)  # noqa: S301 - written by this process


class KeptList(Sequence[Any]):
    """A list whose items live on disk (:meth:`StateStore.keep`): ``append`` writes one,
    indexing reads a fresh copy back. An optimizer watcher's states before each step
    (:meth:`netparity.frameworks.base.OptimizerStates.keep_on_disk`)."""

    #: each lookup is a fresh copy, the caller's to change (optimizer replay loads it as is)
    fresh = True

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self._items: list[KeptObject] = []

    def append(self, obj: Any) -> None:
        """Write ``obj`` (or take one already written: a :class:`KeptObject`)."""
        self._items.append(obj if isinstance(obj, KeptObject) else self.store.keep(obj))

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [k.load() for k in self._items[i]]
        return self._items[i].load()

    def __len__(self) -> int:
        return len(self._items)
