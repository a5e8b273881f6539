"""Reference PyTorch -> MindSpore ResNet migration shipped as netparity's built-in demo.

Submodules are imported lazily (each needs its framework):

- ``torch_resnet``: torchvision-compatible ResNet-18/34/50/101/152 in PyTorch.
- ``ms_resnet``: the MindSpore port (document names), with injectable migration bugs.
- ``data``: a tiny generated ImageFolder dataset and matching PyTorch/MindSpore pipelines.
- ``torch_train`` / ``ms_train``: schedules, losses, optimizer groups, training, evaluation.
- ``specs/``: one-step workflow spec templates.

Example:
    >>> from netparity.examples.resnet import torch_resnet  # doctest: +SKIP
"""
