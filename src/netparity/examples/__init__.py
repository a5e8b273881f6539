"""netparity.examples."""
