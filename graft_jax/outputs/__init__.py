"""What a run writes: metrics.jsonl and its writers, the progress bar, wandb, the workdir lock, durable file writes."""
