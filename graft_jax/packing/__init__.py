"""Which sequences share a device row or a micro-batch: host-side plans, NumPy only."""
