"""netparity.report."""
