"""A worked GRAFT step on synthetic groups (graft_jax.walkthrough): ``python launch/demo.py``."""

from graft_jax import cli
from graft_jax import walkthrough

if __name__ == "__main__":
  cli.guard(lambda: print(walkthrough.run()))
