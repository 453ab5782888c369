"""The README's main job: a worked GRAFT step on synthetic groups (graft_jax.walkthrough)."""

from graft_jax import walkthrough

if __name__ == "__main__":
  print(walkthrough.run())
