"""Where a pair's vLLM servers sit, as the plan of its sampling sees it.

Two placements of the 4-GPU pair node, modelled side by side in `launch/plan.py`:

- ``dedicated``: one tensor-parallel-1 server per model on a GPU of its own (GPUs 2
  and 3 at 0.45 of each). The models sample side by side, each on one GPU's HBM,
  and the trainer's other two GPUs idle meanwhile.
- ``replicas``: one server per model on every GPU (``vllm.data_parallel`` = 4, 0.25
  of each GPU per server), colocated with the trainer. A model's prompts split over its
  four replicas; on each GPU the two models' replicas share its HBM bandwidth, so a
  GPU's sampling takes the sum of its two replicas' times. Decode is bound by KV
  and weight reads, so spreading both models over four GPUs instead of one each
  gives each model's reads twice the bandwidth, less the extra weight reads of
  three more copies.

A replica's slots come from its memory share (`sampling_plan.vllm_slots`); its
weights are pushed once per replica at each sync.
"""

from __future__ import annotations

import dataclasses

from graft_jax.config.placement import replica_gpus, server_gpus


@dataclasses.dataclass(frozen=True)
class ServerLayout:
  """Per model: ``replicas`` servers of ``gpus_per_replica`` GPU(s), each with ``share`` of
  each of its GPUs; ``shared``: the models' servers share GPUs (their sampling adds up on
  the shared HBM instead of running side by side)."""
  name: str
  replicas: int = 1
  gpus_per_replica: int = 1
  share: float = 0.45
  shared: bool = False

  def share_bytes(self, device_bytes: float) -> float:
    return self.share * device_bytes * self.gpus_per_replica

  def describe(self) -> str:
    where = "sharing their GPUs" if self.shared else "on GPUs of their own"
    return (f"{self.name}: {self.replicas} server(s) per model x {self.gpus_per_replica} GPU, "
            f"{self.share:g} of each GPU, {where}")


DEDICATED = ServerLayout("dedicated", replicas=1, gpus_per_replica=1, share=0.45, shared=False)
REPLICAS_4 = ServerLayout("replicas", replicas=4, gpus_per_replica=1, share=0.25, shared=True)


def from_config(cfg) -> ServerLayout:
  """The layout ``cfg``'s ``vllm`` fields place; `DEDICATED` when its servers are not placed
  on GPUs (``vllm.gpus`` empty)."""
  placed = [gpus for _, _, gpus in server_gpus(cfg)]
  if not all(placed):
    return dataclasses.replace(DEDICATED, share=cfg.vllm.gpu_memory_utilization)
  groups = replica_gpus(placed[0], cfg.vllm.data_parallel)
  shared = len(set().union(*placed)) < sum(len(set(gpus)) for gpus in placed)
  return ServerLayout("this config's", replicas=len(groups), gpus_per_replica=len(groups[0]),
                      share=cfg.vllm.gpu_memory_utilization, shared=shared)
