"""netparity.capture: capture policies and the framework-independent capture session.

``netparity.capture`` is both this package and the public function ``netparity.capture(model,
path, ...)``: importing a submodule (``netparity.capture.policy``) binds the package to the
``capture`` attribute of ``netparity``, replacing the function, so the package is callable and
forwards to the framework's capture (chosen by the model's type).

Example:
    >>> import netparity, netparity.capture.policy
    >>> callable(netparity.capture)
    True
"""

import sys
import types
from typing import Any


def capture(model: Any, path: Any, **kwargs: Any) -> Any:
    """Capture ``model`` into ``path``; see :func:`netparity.frameworks.torch_capture.capture`."""
    from netparity.errors import FrameworkError
    from netparity.frameworks.base import adapter_for

    name = adapter_for(model).name
    if name == "torch":
        from netparity.frameworks.torch_capture import capture as _cap
    elif name == "mindspore":
        from netparity.frameworks.mindspore_capture import (  # type: ignore[assignment]
            capture as _cap,
        )
    else:
        raise FrameworkError(f"capture does not support {name} models")
    return _cap(model, path, **kwargs)


class _CallablePackage(types.ModuleType):
    def __call__(self, model: Any, path: Any, **kwargs: Any) -> Any:
        return capture(model, path, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
