"""netparity.compare."""
