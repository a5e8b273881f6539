"""netparity.capture: capture policies and the framework-independent capture session.

The framework captures (``netparity.frameworks.torch.capture``, ``...mindspore.capture``) build
on :class:`~netparity.capture.session.CaptureSession`; the public entry point
``netparity.capture(model, path, ...)`` finds the model's framework through
:mod:`netparity.frameworks.registry`. ``netparity`` makes this package callable for that (see
``netparity/__init__.py``): ``import netparity.capture.policy`` binds the package to the name
``netparity.capture``, which must stay the documented function.

Example:
    >>> import netparity, netparity.capture.policy
    >>> callable(netparity.capture)
    True
"""
