"""netparity.frameworks: one subpackage per framework (``torch``, ``mindspore``, ``numpy``), each
with its adapter (:class:`~netparity.frameworks.base.FrameworkAdapter`), found through
:mod:`netparity.frameworks.registry`. The only package that imports a framework."""
