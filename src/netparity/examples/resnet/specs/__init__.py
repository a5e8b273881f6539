"""One-step workflow specs of the ResNet demo (``torch_spec.py``, ``ms_spec.py``).

Each file defines ``build(**options) -> dict``; copy one to write a spec for your own network.
``common.py`` holds what both share (options, data); a user's spec does not need it.
"""
