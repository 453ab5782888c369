"""The two-policy trainer and its infrastructure (config, logs, checkpoints)."""
