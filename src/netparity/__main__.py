"""``python -m netparity`` entry point."""

from netparity.cli import main

raise SystemExit(main())
