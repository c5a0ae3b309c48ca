"""A tiny shop: placing an order sends a receipt through pgqueue, in the order's transaction."""
