"""netparity zero-code capture bootstrap (put on PYTHONPATH by ``netparity run``).

Runs at interpreter start. It does not import torch: it only arranges for the capture to start
when the program imports torch, then hands over to any other ``sitecustomize`` module.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))

try:
    if os.environ.get("NETPARITY_CAPTURE"):
        from netparity.frameworks.torch.launcher import activate_from_env

        activate_from_env()
except Exception as _e:  # never break the user's program because of the capture
    print(f"netparity: capture disabled ({_e})", file=sys.stderr)

# chain to the sitecustomize this one shadows (e.g. a distribution's own)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
_me = sys.modules.pop("sitecustomize", None)
try:
    import sitecustomize  # noqa: F401
except ImportError:
    if _me is not None:
        sys.modules["sitecustomize"] = _me
