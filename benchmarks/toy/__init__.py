"""The toy reproduction benchmark (every method, several seeds, both directions), its
tables, figure and sign table, and the friction regime's gate check: scripts' helpers
built on the library (``graft_jax.experiments`` keeps the toy job and colab 02's view)."""
