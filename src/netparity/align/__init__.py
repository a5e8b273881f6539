"""netparity.align."""
