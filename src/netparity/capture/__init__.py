"""netparity.capture."""
