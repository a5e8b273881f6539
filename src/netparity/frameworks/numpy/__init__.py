"""The NumPy adapter: arrays as "tensors" (imported traces, reference runs, tests).

Example:
    >>> import numpy as np
    >>> NumpyAdapter().dtype_name(np.zeros(2, dtype=np.bool_))
    'bool'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from netparity.frameworks.base import FrameworkAdapter


class NumpyAdapter(FrameworkAdapter):
    """:class:`FrameworkAdapter` for ``numpy.ndarray`` and NumPy scalars (the reference)."""

    name = "numpy"
    module = "numpy"

    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, (np.ndarray, np.generic))

    def dtype_name(self, t: Any) -> str:
        dt = np.asarray(t).dtype
        # numpy's own names are the canonical ones except bool_ (named "bool" in netparity)
        return "bool" if dt == np.bool_ else dt.name

    def to_numpy(self, t: Any) -> np.ndarray:
        return np.asarray(t)

    def facts(self) -> dict[str, Any]:
        return {"framework": "numpy", "framework_version": np.__version__, "device": "cpu"}

    def seed(self, seed: int, deterministic: bool = True) -> dict[str, Any]:
        np.random.seed(seed % (2**32))
        return {"seed": seed}


#: the registry's entry point (see :mod:`netparity.frameworks.registry`)
Adapter = NumpyAdapter
