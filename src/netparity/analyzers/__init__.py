"""netparity.analyzers."""
