"""netparity.ckpt."""
