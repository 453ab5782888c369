"""The step's prompts: a seeded, resumable walk over the training problems in shuffled epochs."""

from __future__ import annotations

import numpy as np


class PromptStream:
  """Batch ``i`` is a pure function of (seed, i), so the position alone resumes the stream.

  Each epoch is a fresh permutation (``shuffle``) and drops its last partial
  batch, as the paper's 7,500 / 128 -> 58 steps per epoch.
  """

  def __init__(self, problems, batch_size: int, *, seed: int = 0, shuffle: bool = True):
    if len(problems) < batch_size:
      raise ValueError(f"{len(problems)} training problems cannot fill one batch of {batch_size}")
    self.problems = list(problems)
    self.batch_size = batch_size
    self.seed = seed
    self.shuffle = shuffle
    self.position = 0

  @property
  def steps_per_epoch(self) -> int:
    return len(self.problems) // self.batch_size

  def epoch_of(self, position: int) -> int:
    return position // self.steps_per_epoch

  def _order(self, epoch: int) -> np.ndarray:
    if not self.shuffle:
      return np.arange(len(self.problems))
    return np.random.default_rng([self.seed, epoch]).permutation(len(self.problems))

  def next(self):
    """The next batch of problems; advances the position."""
    epoch, offset = divmod(self.position, self.steps_per_epoch)
    idx = self._order(epoch)[offset * self.batch_size:(offset + 1) * self.batch_size]
    self.position += 1
    return [self.problems[i] for i in idx]
