"""Benchmark and profiling scripts, and their helpers; never imported by graft_jax."""
