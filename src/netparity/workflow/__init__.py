"""netparity.workflow."""
