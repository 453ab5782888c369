"""Three GRAFT steps of the tiny vLLM pair in a process of its own, for the stop tests.

  python -m tests.rollout.vllm_stop_child WORKDIR [PHASE@STEP]

Each policy samples with a vLLM sidecar of its own (the trainer owns and closes them), as
``launch/train.py`` runs them; the run is ``tests/rollout/test_vllm_train``'s setting,
checkpointed every step, under the launchers' console (``graft_jax.cli.guard``). With
``PHASE@STEP`` (PHASE ``sampling``, ``update``: the first model's weight sync after its
update, or ``save``: orbax writing checkpoint STEP, its folder not yet committed), the run
writes ``WORKDIR/reached`` on entering that phase of that step, holding its staged-weights
and socket folders, then waits there until a stop signal has come: the test signals
every process of the run meanwhile. A finished run writes ``WORKDIR/final_params.npz``.
"""

from __future__ import annotations

import pathlib
import sys
import time

import jax
import numpy as np
import orbax.checkpoint as ocp

from graft_jax import cli, preemption
from graft_jax.rollout.vllm_engine import VLLMEngine
from graft_jax.train.setup import attach_engines
from graft_jax.train.trainer import Trainer
from tests.rollout import vllm_fixtures, vllm_models
from tests.rollout.test_vllm_train import _cfg
from tests.train import tiny_pair

STEPS = 3


def hold_at(workdir: pathlib.Path, point: str, engines: list) -> None:
  """Marks ``point`` (``PHASE@STEP``) once reached and waits there for a stop signal."""
  phase, _, step = point.partition("@")
  state = {"step": 0}
  generate, set_weights = VLLMEngine.generate, VLLMEngine.set_weights

  def reach() -> None:
    (workdir / "reached").write_text("\n".join(
        [str(e.weights_dir) for e in engines] + [str(e.sidecar.socket_path.parent)
                                                 for e in engines]))
    deadline = time.monotonic() + 120
    while not preemption.stopped_since() and time.monotonic() < deadline:
      time.sleep(0.01)

  def held_generate(self, *args, **kwargs):
    if phase == "sampling" and state["step"] == int(step) and self is engines[0]:
      reach()
    return generate(self, *args, **kwargs)

  def held_set_weights(self, model):
    if phase == "update" and state["step"] == int(step) and self is engines[0]:
      reach()
    out = set_weights(self, model)
    if self is engines[-1]:  # the step's last sync: the next step begins
      state["step"] += 1
    return out

  handler = ocp.handlers.JsonCheckpointHandler
  save_json = handler._save_fn  # pylint: disable=protected-access

  async def held_save_json(self, x, directory):  # the run's metadata, into the temporary folder
    if phase == "save" and isinstance(x, dict) and x.get("step") == int(step):
      reach()
    return await save_json(self, x, directory)

  VLLMEngine.generate, VLLMEngine.set_weights = held_generate, held_set_weights
  handler._save_fn = held_save_json  # pylint: disable=protected-access


def main(argv) -> None:
  workdir = pathlib.Path(argv[1])
  cfg = _cfg(workdir)
  pair = vllm_models.make_pair()
  models = {cfg.model_a.name: pair["a"], cfg.model_b.name: pair["b"]}
  trainer = Trainer(cfg, tiny_pair.problems(), models, reward_fn=tiny_pair.contains_reward)
  engines = []
  try:
    def engine(name, model, tokenizer):
      e = VLLMEngine(model, eos_ids=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
                     run_dir=workdir / "vllm" / name, options=vllm_fixtures.options(),
                     name=name, check_every=1)
      trainer.own(e)
      engines.append(e)
      return e
    attach_engines(trainer, engine)
    if len(argv) > 2:
      hold_at(workdir, argv[2], engines)
    trainer.run(STEPS)
  finally:
    trainer.close()
  np.savez(workdir / "final_params.npz",
           **{f"{name}/{i}": np.asarray(x) for name, p in trainer.policies.items()
              for i, x in enumerate(jax.tree.leaves(jax.device_get(p.params)))})


if __name__ == "__main__":
  cli.guard(main, sys.argv)
