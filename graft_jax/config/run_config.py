"""Typed run configuration: the single definition of every field and its default.

`config_dict()` is these defaults as the ConfigDict that configs/*.py edit;
`from_config_dict` is the library boundary back: it rejects unknown keys,
wrong types and impossible values (see `config_checks`) before anything
loads. `write_run_config` stores the resolved config next to the run and
refuses a resume that would change the math.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import pathlib
from typing import Any

import ml_collections

from graft_jax.atomic_file import write_atomically
from graft_jax.config import checks as config_checks
from graft_jax.config import load as config_load
from graft_jax.config import placement as config_placement
from graft_jax.sharding.mesh import MeshConfig

ConfigError = config_checks.ConfigError
PathError = config_checks.PathError
check_paths = config_checks.check_paths
policy_configs = config_checks.policy_configs
import_config_file = config_load.import_config_file
# The file orbax writes last into a checkpoint step: the step is complete when it exists.
# The resume check here and the checkpointer (graft_jax.outputs.checkpoint) both read it.
COMMIT_MARKER = 'commit_success.txt'
load_config = config_load.load_config
apply_overrides = config_load.apply_overrides

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class PolicyConfig:
  """One policy. `path`: a local HF folder or a Hub id, `org/name` (`revision`: its branch, tag
  or commit; a run records the commit, `graft_jax.models.hub`); `name` keys logs and metrics.
  Its prompt is the problem text plus ``data.prompt_suffix``."""
  path: str = ''
  name: str = ''
  revision: str = ''


@dataclasses.dataclass(frozen=True)
class SyntheticConfig:
  """Synthetic verifiable tasks (the toy pair's data)."""
  families: tuple[str, ...] = ('add', 'mul')
  difficulty: int = 1
  num: int = 2048
  seed: int = 0


@dataclasses.dataclass(frozen=True)
class DataConfig:
  train_path: str = ''
  # 'file': data.train_path, read by its suffix (.jsonl, .json, .parquet);
  # 'synthetic': generated from data.synthetic.
  source: str = 'file'
  prompt_suffix: str = (
      " Let's think step by step and output the final answer within \\boxed{}.")
  shuffle: bool = True
  synthetic: SyntheticConfig = SyntheticConfig()
  skip_malformed: bool = False  # skip and count malformed rows instead of stopping
  too_long: str = 'skip'  # prompts over max_prompt_len: 'skip' (counted) | 'error'


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
  temperature: float = 1.0
  top_p: float = 1.0
  top_k: int = 0  # 0 disables top-k
  # Whether the models sample side by side, each from its own thread
  # (graft_jax.train.collect.collect_all): 'auto' = when every engine runs out of
  # process (vLLM) under one trainer process, 'on' = the same but stop the run where
  # it cannot, 'off' = one model after the other. The rollouts are the same.
  concurrent: str = 'auto'
  # The JAX engine (engine='jax'): 'static' decodes each call's rows until its longest stops
  # (graft_jax.rollout.jax_engine); 'pool' keeps ``pool_slots`` decode slots busy, a finished
  # row's slot taking the next waiting (prompt, sample), validation one call per model
  # (graft_jax.rollout.continuous). Same tokens. On a mesh, slots split over the batch axes.
  sampler: str = 'static'
  pool_slots: int = 64  # decode rows of the pool; its KV cache holds this many windows
  pool_prefill_chunk: int = 16  # prompt tokens per prefill pass (a prompt takes a multiple)
  # Prompts a refill prefills together in one batched pass per chunk (each pass reads every
  # weight); a device refills once pool_refill_at slots are free (0: pool_prefill_group).
  pool_prefill_group: int = 8
  pool_refill_at: int = 1


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
  """AdamW (graft_jax.train.update.make_optimizer)."""
  lr: float = 1e-6
  schedule: str = 'constant'  # after optional linear warmup
  warmup_steps: int = 0
  b1: float = 0.9
  b2: float = 0.999
  eps: float = 1e-8
  weight_decay: float = 0.01
  grad_clip: float = 1.0  # global-norm clip; 0 disables


@dataclasses.dataclass(frozen=True)
class GraftConfig:
  """Exchange, gate and ordering (the equations are in graft_jax.core's docstrings)."""
  delta: float = 0.8  # gate threshold on s(o); responses with s <= delta drop
  balance: bool = True  # m = min(|C(A->B)|, |C(B->A)|) with ties kept
  order: str = 'peer_last'  # 'peer_last' | 'peer_first' | 'uniform'
  advantages: str = 'source'  # 'source' | 'pooled'
  transfer: str = 'full'  # 'full' | 'success_only'
  gate: str = 'on'  # 'on' | 'off' (w = 1 for every peer response)
  ratio_level: str = 'token'  # 'token' | 'sequence'


@dataclasses.dataclass(frozen=True)
class HacpoConfig:
  """HACPO baseline (arXiv 2603.02604) defaults."""
  capability_window: int = 5
  ratio_clamp: tuple[float, float] = (0.1, 10.0)
  self_clip: tuple[float, float] = (3e-4, 4e-4)  # GSPO-style (low, high)
  cross_clip: float = 0.2
  cross_clip_step: float = 0.025  # lower bound grows by this per minibatch
  kl_coef: float = 1e-3
  minibatch_prompts: int = 64
  # Prompts whose peer group is pooled: 'all' (HACPO) or 'graft_selected', only
  # GRAFT's selected ones (graft_jax.train.methods.hacpo).
  prompts: str = 'all'


@dataclasses.dataclass(frozen=True)
class SgtConfig:
  coef: float = 0.1  # weight of the NLL on one correct peer response
  # Prompts the NLL may apply on: 'own_failures' (SGT) or 'graft_selected', only
  # GRAFT's selected ones (graft_jax.train.methods.sgt).
  prompts: str = 'own_failures'


@dataclasses.dataclass(frozen=True)
class ReplayConfig:
  """Stored-log replay: model_a learns from model_b's logs in `log_dir`."""
  log_dir: str = ''


@dataclasses.dataclass(frozen=True)
class RewardConfig:
  """The reward (graft_jax.rewards.make_reward): 'math_verify' (last box, then
  math-verify in a pool of `num_workers` processes), 'synthetic_exact' (last
  box equals the gold as a number or normalized string; no pool), or
  'pkg.module:function', a ``(texts, golds) -> (rewards, stats)`` of your own."""
  kind: str = 'math_verify'
  timeout_s: float = 5.0  # math_verify: a verifier timeout scores 0
  num_workers: int = 2  # math_verify: verifier processes
  # A method that counts successes (GRAFT's selection, SGT, HACPO, replay) needs 0/1
  # rewards; a reward of partial credit sets the score that counts as one (>=).
  # 0: rewards must be 0 or 1, checked as they come.
  success_threshold: float = 0.0


@dataclasses.dataclass(frozen=True)
class EvalConfig:
  """Validation during training (``graft_jax.train.validation``): every policy's
  held-out pass@1 after every ``every_steps`` steps and after the last."""
  every_steps: int = 5  # 0 disables
  temperature: float = 0.6
  top_p: float = 0.95
  k: int = 8  # samples per problem; pass@1 is their mean correctness
  # 'synthetic': held-out problems of data.synthetic's families, one benchmark per
  # family; any other name: <data_dir>/<name>.jsonl (or .json / .parquet).
  suite: tuple[str, ...] = ('math500', 'aime24', 'aime25', 'amc23', 'minerva')
  data_dir: str = ''
  max_examples: int = 0  # per benchmark; 0 = all (64 per synthetic family)


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
  every_steps: int = 10  # 0 disables periodic saves (the last step still saves)
  keep: int = 3
  dir: str = ''  # '' = <workdir>/checkpoints
  resume: bool = True
  # At the end of launch/train.py, each trained model as a Hugging Face folder
  # <workdir>/hf/<model> (tokenizer included): launch/eval.py's --model.
  export_hf: bool = True
  # The exported weights' dtype: 'stored' (param_dtype, fp32 master weights by
  # default: 4 bytes a parameter) or a cast, e.g. 'bfloat16' (half the size).
  export_dtype: str = 'stored'
  # Periodic saves copy the state to host memory and write it while the next step
  # runs; the last save and a stop signal's save are always waited for. Off by
  # default: a failed background write adds orbax's own log lines to the one-line
  # storage error. The pair configs turn it on (their saves are tens of GB).
  async_save: bool = False


@dataclasses.dataclass(frozen=True)
class LoggingConfig:
  """Every step writes a metrics row (metrics.jsonl, optionally TensorBoard and W&B)."""
  tensorboard: bool = True
  progress_bar: bool = True
  peer_log: bool = True  # record every rollout (needed for later replay)
  peer_log_dir: str = ''  # '' = <workdir>/peer_logs
  # Weights & Biases (the `wandb` extra): the same scalars against `step`, one W&B
  # run per workdir (resumed with the training); 'offline' keeps it in <workdir>/wandb.
  wandb: bool = False
  wandb_project: str = 'graft_jax'
  wandb_entity: str = ''  # '' = your default entity
  wandb_name: str = ''  # '' = the workdir's folder name
  wandb_mode: str = 'online'


@dataclasses.dataclass(frozen=True)
class VllmGpusConfig:
  """GPU ids (as the node numbers them) of each model's vLLM server: ``model_a`` and
  ``model_b`` place the run's first and second model (``models[0]``, ``models[1]``
  with a ``models`` list), ``more[j]`` places ``models[2 + j]``."""
  model_a: tuple[int, ...] = ()
  model_b: tuple[int, ...] = ()
  more: tuple[tuple[int, ...], ...] = ()


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
  """Multi-process start-up (graft_jax.distributed): an explicit coordinator, or
  `auto` to let jax.distributed read SLURM / Open MPI / Kubernetes variables."""
  coordinator_address: str = ''  # host:port of process 0; '' = not explicit
  num_processes: int = 0
  process_id: int = -1
  auto: bool = False


@dataclasses.dataclass(frozen=True)
class VllmConfig:
  """vLLM sidecar settings; `python` is checked at launch, not here."""
  python: str = '.venv-vllm/bin/python'
  gpu_memory_utilization: float = 0.4  # two sidecars share one GPU
  tensor_parallel_size: int = 1
  dtype: str = 'bfloat16'
  max_model_len: int = 0  # 0 = max_prompt_len + max_response_len
  enforce_eager: bool = False
  enable_prefix_caching: bool = True
  startup_timeout_s: float = 600.0
  # Recovery and checks (graft_jax.rollout.vllm_engine.VLLMEngine).
  check_every: int = 10  # probe vLLM against JAX on sync 1 and every N syncs; 0: after starts only
  probe_tolerance: float = 0.0  # 0: 1e-3 when both sides run float32, else 0.25
  max_restarts: int = 2  # per rollout call, before the run stops with the server's log
  request_timeout_s: float = 3600.0
  health_every_s: float = 10.0  # /health poll while requests run; 3 misses = a hung server
  # Parallel HTTP requests (one per prompt); 0: every prompt of a call at once, so the
  # server's scheduler, not the client, decides what runs together.
  max_concurrency: int = 0
  # Placement (README: Multi-host): each server's GPUs (its CUDA_VISIBLE_DEVICES;
  # the tensor-parallel size is their count); () = every visible device.
  gpus: VllmGpusConfig = VllmGpusConfig()
  # Servers per model (data-parallel replicas): each model's vllm.gpus split into this
  # many servers, the prompts of a call split among them (docs/clusters.md).
  data_parallel: int = 1
  host: str = ''  # '': a private Unix socket; an address opts into TCP (docs/clusters.md)
  # The NCCL library the servers load for 'nccl' pushes (VLLM_NCCL_SO_PATH); '' = the
  # vLLM venv's own. Its version must be the trainer's (graft_jax.train.preflight).
  nccl_library: str = ''
  # 'reload': safetensors in /dev/shm + reload_weights (any platform); on CUDA GPUs
  # 'nccl' (server on its own GPUs) or 'ipc' (server on the trainer's GPU) use vLLM's
  # weight-transfer API (graft_jax.rollout.weight_transfer). 'auto': nccl or ipc where
  # the placement allows, else reload (config_placement.sync_backend).
  weight_sync: str = 'auto'
  # The longest an NCCL weight push (and the opening of its group) may take; past it
  # the push is aborted, the step in flight is saved and the run stops.
  sync_timeout_s: float = 120.0


@dataclasses.dataclass(frozen=True)
class PerfConfig:
  """Memory and speed (graft_jax.train.update, graft_jax.models.decoder, the JAX
  sampler; launch/plan.py says which settings fit a device). None of them changes the
  objective, so a resumed run may change any but ``scan_layers``, which decides how
  the checkpoint stores the parameters."""
  # Tokens (rows x padded length) per device per gradient micro-batch; 0 = the
  # backend's choice (update.micro_batch_budget).
  micro_batch_tokens: int = 0
  # The update's micro-batches: whole sequences packed into rows of the run's length
  # with segment ids (graft_jax.train.packed_micro_batches), or, False, rows padded to
  # power-of-two length buckets.
  packed_update: bool = True
  remat: str = 'none'  # per decoder block: 'none' | 'full' | 'dots_saveable' | 'dots_no_batch'
  scan_layers: bool = False  # one compiled block under jax.lax.scan (flat compile time)
  # Forward / prefill attention (graft_jax.models.attention): 'auto' is cuDNN's flash
  # kernel on GPUs (bf16 / fp16), splash attention on TPUs, and on CPUs 'dense' (the
  # T x T scores) up to one block and 'blocked' (one block of scores at a time) beyond;
  # or one of 'dense' | 'blocked' | 'cudnn' | 'splash' by name. The run logs its choice.
  attention_impl: str = 'auto'
  attention_block: int = 512  # positions per query / key block of 'blocked'
  # The JAX sampler's decode-step attention over the KV cache: 'auto' runs the
  # hand-written CPU kernel (graft_jax.backends.cpu.decode_kernel: AVX-512 or AVX2, f32, built
  # with the host's g++ at first use) where it applies and XLA's elsewhere (GPUs,
  # a sampler sharded over several devices); 'xla'; 'kernel' (an error where it
  # cannot run).
  decode_attention: str = 'auto'
  # JAX sampler: bytes its KV cache may take per call; prompts decode in chunks that
  # fit (graft_jax.rollout.jax_engine). 0 = every prompt at once.
  sampler_max_kv_bytes: int = 0
  # JAX sampler: up to this many calls side by side, each from its own thread
  # (graft_jax.rollout.jax_engine). 0 = the engine's default: 4 on a CPU, else 1.
  sampler_streams: int = 0
  # XLA's persistent compilation cache (graft_jax.compile_cache): compiled programs
  # are kept here, per machine, for later processes; '' = off.
  compile_cache_dir: str = '~/.cache/graft_jax/xla'

  def check(self) -> None:
    """Raises `ConfigError` naming ``perf.<field>`` on a value no run can use; what a
    setting needs of the rest of the config (decode_attention='kernel' and the dtype)
    is checked with the whole config (`config_checks.validate`)."""
    for field, allowed in _PERF_CHOICES.items():
      config_checks.check_choice(f'perf.{field}', getattr(self, field), allowed)
    for field, lo in _PERF_MINIMUMS.items():
      config_checks.check_range(f'perf.{field}', getattr(self, field), lo=lo)


_PERF_CHOICES = {
    'remat': ('none', 'full', 'dots_saveable', 'dots_no_batch'),
    'attention_impl': ('auto', 'dense', 'blocked', 'cudnn', 'splash'),
    'decode_attention': ('auto', 'xla', 'kernel'),
}
_PERF_MINIMUMS = {'micro_batch_tokens': 0, 'attention_block': 1, 'sampler_max_kv_bytes': 0,
                  'sampler_streams': 0}


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Everything one run needs; defaults are the paper's (arXiv 2609.37868)."""
  method: str = 'graft'  # a name of graft_jax.train.methods.REGISTRY
  seed: int = 0
  workdir: str = 'runs/default'
  model_a: PolicyConfig = PolicyConfig(name='model_a')
  model_b: PolicyConfig = PolicyConfig(name='model_b')
  # The run's models in order, any number >= 2 (GRAFT across K models); when set,
  # model_a / model_b stay at their defaults. `policy_configs(cfg)` reads either.
  models: tuple[PolicyConfig, ...] = ()
  data: DataConfig = DataConfig()
  prompts_per_step: int = 128
  n: int = 8
  num_minibatches: int = 4
  ppo_epochs: int = 1
  total_steps: int = 0  # 0 = epochs * (num_train_prompts // prompts_per_step)
  epochs: int = 3
  max_prompt_len: int = 2048
  max_response_len: int = 4096
  rollout: RolloutConfig = RolloutConfig()
  optimizer: OptimizerConfig = OptimizerConfig()
  dtype: str = 'bfloat16'  # compute dtype
  param_dtype: str = 'float32'  # master weights and optimizer state
  clip_low: float = 0.2
  clip_high: float = 0.28
  scale_by_std: bool = True  # False = Dr.GRPO
  old_logp_source: str = 'teacher_forced'  # 'teacher_forced' | 'sampler'
  graft: GraftConfig = GraftConfig()
  hacpo: HacpoConfig = HacpoConfig()
  sgt: SgtConfig = SgtConfig()
  replay: ReplayConfig = ReplayConfig()
  reward: RewardConfig = RewardConfig()
  eval: EvalConfig = EvalConfig()
  checkpoint: CheckpointConfig = CheckpointConfig()
  logging: LoggingConfig = LoggingConfig()
  engine: str = 'jax'  # 'jax' | 'vllm'
  vllm: VllmConfig = VllmConfig()
  mesh: MeshConfig = MeshConfig()  # graft_jax.sharding.MeshConfig
  distributed: DistributedConfig = DistributedConfig()
  # The placement (graft_jax.config.placement), with vllm.gpus and
  # vllm.gpu_memory_utilization: the trainer's local GPU ids (() = all visible) and
  # its share of each (XLA_PYTHON_CLIENT_MEM_FRACTION; 0 = what the servers leave).
  jax_devices: tuple[int, ...] = ()
  xla_mem_fraction: float = 0.0
  # Leave out of the update the rows whose loss terms are all zero (w A = 0, not SGT:
  # all-fail and all-pass groups, rows the gate weighted to 0), and their old
  # log-probs. The gradient is the same; the ratio / KL / clip fractions are then over
  # the rows that ran (Method.has_signal). False: every row runs.
  skip_silent_rows: bool = True
  perf: PerfConfig = PerfConfig()  # memory and speed; none changes the objective
  # The registered methods' own sections, (name, settings) pairs read as cfg.<name>
  # (`add_method_section`); to_dict / from_config_dict keep them at the top level.
  method_sections: tuple[tuple[str, Any], ...] = dataclasses.field(
      default_factory=lambda: tuple((n, s()) for n, s in _METHOD_SECTIONS.items()))

  def __getattr__(self, name: str) -> Any:
    # Only reached for names that are not fields: a method's section, else no such field.
    for section, value in () if name.startswith('_') else self.method_sections:
      if section == name:
        return value
    raise AttributeError(f'TrainConfig has no field or method section {name!r}')

  @property
  def checkpoint_dir(self) -> str:
    return self.checkpoint.dir or str(pathlib.Path(self.workdir, 'checkpoints'))

  @property
  def peer_log_dir(self) -> str:
    return self.logging.peer_log_dir or str(
        pathlib.Path(self.workdir, 'peer_logs'))

  def num_steps(self, num_train_prompts: int) -> int:
    """Optimizer steps of the run; epochs drop the last partial batch."""
    if self.total_steps > 0:
      return self.total_steps
    return self.epochs * (num_train_prompts // self.prompts_per_step)


# Section name -> settings dataclass of each registered method; a method file declares
# its dataclass and the registry (graft_jax.train.methods.register) adds it here, so
# every config has every registered method's section (overrides, presets, the stored
# config and the resume check see it as any other section).
_METHOD_SECTIONS: dict[str, type] = {}


def add_method_section(name: str, settings: type) -> None:
  """Adds the section ``cfg.<name>`` with the frozen dataclass ``settings`` (its defaults)
  to every config built from now on."""
  if name in {f.name for f in dataclasses.fields(TrainConfig)}:
    raise ValueError(f'method section {name!r} would hide the config field of that name')
  if _METHOD_SECTIONS.setdefault(name, settings) is not settings:
    raise ValueError(f'two settings classes for the method section {name!r}')


def config_dict() -> ml_collections.ConfigDict:
  """The defaults of `TrainConfig` as an unlocked ConfigDict (what configs/*.py start from)."""
  return ml_collections.ConfigDict(to_dict(TrainConfig()))


def from_config_dict(cd: Any) -> TrainConfig:
  """Converts a ConfigDict (or nested mapping) and validates it.

  Missing keys take the dataclass defaults; unknown keys, wrong types and
  impossible values raise `ConfigError` naming the field.
  """
  mapping = dict(cd.to_dict() if hasattr(cd, 'to_dict') else cd)
  if 'method_sections' in mapping:
    raise ConfigError('unknown config key method_sections (a method\'s section is cfg.<name>)')
  sections = tuple((name, config_load.build_dataclass(settings, mapping.pop(name, {}),
                                                      prefix=f'{name}.'))
                   for name, settings in _METHOD_SECTIONS.items())
  cfg = dataclasses.replace(config_load.build_dataclass(TrainConfig, mapping),
                            method_sections=sections)
  config_checks.validate(cfg)
  config_placement.validate(cfg)
  return cfg


def to_dict(cfg: Any) -> dict[str, Any]:
  """Plain nested dict of a config, e.g. to store it next to a run; a method's section
  is a top-level key like any other."""
  d = dataclasses.asdict(cfg)
  d.update(d.pop('method_sections', ()))
  return d


def write_json(cfg: TrainConfig, path: str | pathlib.Path) -> pathlib.Path:
  """Writes the resolved config (every field, presets and overrides applied) as JSON.

  ``from_config_dict(json.load(open(path)))`` rebuilds the same config.
  """
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  # A reader (another process of the run) never sees half a file.
  write_atomically(path, json.dumps(to_dict(cfg), indent=1) + '\n')
  return path


def write_run_config(cfg: TrainConfig, *, locked: tuple[str, ...] = ()) -> pathlib.Path:
  """Writes ``<workdir>/config.json``; a resumed run must match the math of the stored one.

  When the run will resume (``checkpoint.resume`` and a committed checkpoint
  in ``checkpoint_dir``), the stored config is compared field by field
  (``config_checks.check_resume``): a change in ``config_checks.RESUME_LOCKED``
  or ``locked`` (the method's ``resume_locked``) raises ``ConfigError`` naming
  the field and both values; other changes are logged and the file is rewritten.
  """
  path = pathlib.Path(cfg.workdir, 'config.json')
  if cfg.checkpoint.resume and _has_checkpoint(cfg.checkpoint_dir):
    if path.is_file():
      try:
        stored = json.loads(path.read_text(encoding='utf-8'))
      except (OSError, ValueError) as e:
        raise ConfigError(f'{path}: cannot read the checkpointed run\'s config ({e}); '
                          f'restore the file or set checkpoint.resume=False') from e
      for field, old, new in config_checks.check_resume(stored, to_dict(cfg), where=str(path),
                                                           locked=locked):
        log.info('resuming with %s changed: %r -> %r', field, old, new)
    else:
      log.warning('%s: no config.json next to the checkpoints; resuming without checking '
                  'that the config is the same', cfg.workdir)
  return write_json(cfg, path)


def _has_checkpoint(directory: str) -> bool:
  """A committed checkpoint step is in ``directory`` (``graft_jax.outputs.checkpoint``)."""
  root = pathlib.Path(directory)
  return root.is_dir() and any(
      d.name.isdigit() and (d / COMMIT_MARKER).is_file() for d in root.iterdir())
