"""The run's configuration: its fields and defaults, loading and overrides, checks, and the device placement."""
