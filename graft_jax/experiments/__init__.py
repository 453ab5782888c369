"""Experiment drivers built on the library: the toy GRPO-vs-GRAFT comparison."""
