"""netparity.frameworks."""
