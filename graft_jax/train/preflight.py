"""Start-up checks of this node against the config: the faults that would otherwise
surface late (a GPU node training on its CPU, CPU vLLM servers beside a GPU trainer,
NCCL peers of two versions, a /dev/shm too small for the weights, GPU ids outside
the job's share) stop the run before the workdir, the data or any model is touched.

`check` raises `PreflightError`, one line per failure, each naming the field or the
fix; `Host.detect` reads what the checks need of this node, and tests build a `Host`
by hand to stand for another node.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import pathlib
import shutil
from collections.abc import Mapping

from graft_jax.config import placement as config_placement
from graft_jax.config.checks import ConfigError, policy_configs
from graft_jax.rollout import vllm_sidecar

# The installs the fixes name (README: A real pair on GPUs).
GPU_JAX_FIX = "pip install -e '.[cuda13]' (or '.[cuda12]'), or make gpu-venv"
GPU_VLLM_FIX = "make vllm-gpu-venv and --config.vllm.python=.venv-vllm-gpu/bin/python"
GPU_NCCL_FIX = "make gpu-venv vllm-gpu-venv (one NCCL: requirements/gpu-nccl.lock)"


class PreflightError(ConfigError):
  """This node cannot run the config; ``failures`` holds one `ConfigError` per fault,
  each printed on its own line (`graft_jax.cli.one_line`)."""

  def __init__(self, failures: list[ConfigError]):
    super().__init__("\n".join(map(str, failures)), field=failures[0].field)
    self.failures = failures


@dataclasses.dataclass(frozen=True)
class Host:
  """What the checks read of this node.

  ``cuda_visible_devices``: the inherited ``CUDA_VISIBLE_DEVICES`` (None: unset);
  ``gpus``: GPUs the node shows (`config_placement.visible_gpus`; None: no NVIDIA
  driver); ``backend``: JAX's default backend (None: not asked, since a bad GPU id
  would start it on the wrong devices); ``platforms``: ``jax_platforms`` as set
  (``cpu`` asks for the CPU on purpose); ``processes``: the run's process count;
  ``writer``: whether this process writes the served weights (process 0);
  ``weights_room``: ``(folder, free bytes)`` where the servers' weight files go,
  None when they go to the workdir (no writable /dev/shm); ``trainer_nccl``: the
  ``libnccl.so.2`` the trainer's push loads (None: none installed).
  """
  cuda_visible_devices: str | None = None
  gpus: int | None = None
  backend: str | None = "cpu"
  platforms: str = ""
  processes: int = 1
  writer: bool = True
  weights_room: tuple[pathlib.Path, int] | None = None
  trainer_nccl: str | None = None

  @classmethod
  def detect(cls, cfg, *, environ: Mapping[str, str] = os.environ,
             weights_folder: pathlib.Path | None = None) -> Host:
    """This process's node; call it after ``jax.distributed.initialize``.
    ``weights_folder`` stands in for where the servers' weights would go."""
    import jax
    from graft_jax import distributed
    cvd = environ.get("CUDA_VISIBLE_DEVICES")
    ask = not gpu_id_failures(cfg, cvd)
    folder = weights_folder or _weights_folder(cfg)
    return cls(cuda_visible_devices=cvd, gpus=config_placement.visible_gpus(environ),
               backend=jax.default_backend() if ask else None,
               platforms=str(jax.config.jax_platforms or ""),
               processes=jax.process_count() if ask else 1, writer=distributed.is_writer(),
               weights_room=None if folder is None else (folder, free_bytes(folder)),
               trainer_nccl=_trainer_nccl())


def check(cfg, host: Host) -> None:
  """Raises `PreflightError` listing every failure of `failures`."""
  found = failures(cfg, host)
  if found:
    raise PreflightError(found)


def failures(cfg, host: Host) -> list[ConfigError]:
  """The config's faults on `host`, in the order the run would meet them."""
  ids = gpu_id_failures(cfg, host.cuda_visible_devices)
  if ids:  # the backend was not asked: the checks below would guess
    return ids
  out = backend_failures(host) + vllm_build_failures(cfg, host)
  if not out:
    out += nccl_failures(cfg, host)
  return out + weights_room_failures(cfg, host)


def gpu_id_failures(cfg, cvd: str | None) -> list[ConfigError]:
  """GPU ids index into the inherited ``CUDA_VISIBLE_DEVICES``
  (`config_placement.physical_gpus`); an id past its end is refused."""
  if cvd is None:
    return []
  have = config_placement.cuda_visible_list(cvd)
  fields = [("jax_devices", tuple(cfg.jax_devices))]
  if cfg.engine == "vllm":
    fields += [(f, g) for f, _, g in config_placement.server_gpus(cfg)]
  return [ConfigError(f"{field}={ids} names GPU {max(ids)}, but CUDA_VISIBLE_DEVICES={cvd} "
                      f"shows {len(have)} GPU(s): ids index into that list "
                      f"({_id_range(len(have))})", field=field)
          for field, ids in fields if ids and max(ids) >= len(have)]


def _id_range(n: int) -> str:
  return f"ids 0..{n - 1}" if n else "no ids: the job was given no GPU"


def backend_failures(host: Host) -> list[ConfigError]:
  """A node that shows GPUs but whose JAX has no GPU backend would train on its CPU."""
  cpu_on_purpose = host.platforms.split(",")[0] == "cpu"
  if not host.gpus or host.backend != "cpu" or cpu_on_purpose:
    return []
  where = (f"CUDA_VISIBLE_DEVICES={host.cuda_visible_devices}"
           if host.cuda_visible_devices is not None else "the NVIDIA driver")
  return [ConfigError(f"this node shows {host.gpus} GPU(s) ({where}) but JAX runs on the CPU: "
                      f"install GPU JAX with {GPU_JAX_FIX}; or set JAX_PLATFORMS=cpu to "
                      f"train on the CPU on purpose")]


def vllm_build_failures(cfg, host: Host) -> list[ConfigError]:
  """A GPU trainer's vLLM servers must be GPU builds."""
  if cfg.engine != "vllm" or host.backend != "gpu":
    return []
  python = cfg.vllm.python
  if not os.path.exists(python):
    return [ConfigError(f"vllm.python={python} does not exist: {GPU_VLLM_FIX}",
                        field="vllm.python")]
  build = vllm_sidecar.cpu_build(python)
  if build is None:
    return []
  return [ConfigError(f"vllm.python={python} is a CPU build of vLLM ({build}) beside a GPU "
                      f"trainer: {GPU_VLLM_FIX}", field="vllm.python")]


def nccl_failures(cfg, host: Host) -> list[ConfigError]:
  """With 'nccl' pushes, both ends must load the same NCCL version."""
  sync = config_placement.sync_backend(cfg, on_gpu=host.backend == "gpu",
                                       processes=host.processes)
  if cfg.engine != "vllm" or sync != "nccl":
    return []
  if host.trainer_nccl is None:
    return [ConfigError(f"vllm.weight_sync='nccl' needs NCCL in the trainer's environment: "
                        f"{GPU_JAX_FIX}", field="vllm.weight_sync")]
  server = server_nccl(cfg.vllm)
  if server is None:
    return [ConfigError(f"no libnccl.so.2 in the venv of vllm.python={cfg.vllm.python}: set "
                        f"vllm.nccl_library to the servers' NCCL, or {GPU_VLLM_FIX}",
                        field="vllm.nccl_library")]
  try:
    mine, theirs = nccl_version(host.trainer_nccl), nccl_version(server)
  except (OSError, AttributeError) as e:
    return [ConfigError(f"cannot read NCCL's version ({e}): set vllm.nccl_library to a "
                        f"libnccl.so.2", field="vllm.nccl_library")]
  if mine == theirs:
    return []
  return [ConfigError(f"NCCL {version_text(mine)} in the trainer ({host.trainer_nccl}) but "
                      f"{version_text(theirs)} for the vLLM servers (vllm.nccl_library="
                      f"{cfg.vllm.nccl_library or server}): rebuild both, {GPU_NCCL_FIX}; or "
                      f"set vllm.nccl_library={host.trainer_nccl}", field="vllm.nccl_library")]


def server_nccl(v) -> str | None:
  """The NCCL the servers load: ``vllm.nccl_library``, else their venv's."""
  return v.nccl_library or vllm_sidecar.venv_nccl(v.python)


def nccl_version(path: str) -> int:
  """``ncclGetVersion`` of the library at `path`: e.g. 22703 for 2.27.3."""
  code = ctypes.c_int()
  status = ctypes.CDLL(path).ncclGetVersion(ctypes.byref(code))
  if status:
    raise OSError(f"{path}: ncclGetVersion returned {status}")
  return code.value


def version_text(code: int) -> str:
  """NCCL's version code as major.minor.patch (codes before 2.9 used 1000 a major)."""
  major = code // 10000 if code >= 10000 else code // 1000
  return f"{major}.{code % (10000 if code >= 10000 else 1000) // 100}.{code % 100}"


def _trainer_nccl() -> str | None:
  from graft_jax.rollout.weight_transfer import nccl
  try:
    return nccl.library_path()
  except (FileNotFoundError, ImportError):  # ImportError: no nvidia wheel at all
    return None


def weights_room_failures(cfg, host: Host) -> list[ConfigError]:
  """The servers' first weights always go through files (tmpfs when writable)."""
  if cfg.engine != "vllm" or host.weights_room is None or not host.writer:
    return []
  folder, free = host.weights_room
  on_gpu = host.backend == "gpu"
  sync = config_placement.sync_backend(cfg, on_gpu=on_gpu, processes=host.processes)
  need = served_weight_bytes(cfg, untie=sync == "reload")
  if need <= free:
    return []
  gib = -(-need // 2**30)
  return [ConfigError(f"{folder} has {free / 2**30:.2f} GiB free but the vLLM servers' weights "
                      f"take {need / 2**30:.2f} GiB there: give it more room (docker run "
                      f"--shm-size={gib + 1}g, or mount -o remount,size={gib + 1}G {folder})")]


def served_weight_bytes(cfg, *, untie: bool) -> int:
  """Bytes of the weight files the servers start from: every served model's parameters
  in the serving dtype (`graft_jax.rollout.vllm_sync.write_weights`), a tied embedding
  written twice when `untie`. Models without a config.json yet count nothing."""
  import jax.numpy as jnp
  from graft_jax.models.config import ModelConfig
  from graft_jax.models.size import all_params
  from graft_jax.train import methods
  served = cfg.vllm.dtype if cfg.vllm.dtype != "auto" else cfg.param_dtype
  itemsize = jnp.dtype(served).itemsize
  total = 0
  for m in policy_configs(cfg):
    path = pathlib.Path(m.path or "", "config.json")
    if not m.path or not path.is_file() or not methods.trains(cfg, m):
      continue
    mc = ModelConfig.from_hf_config(json.loads(path.read_text()))
    head = mc.vocab_size * mc.hidden_size if untie and mc.tie_word_embeddings else 0
    total += (all_params(mc) + head) * itemsize
  return total


def free_bytes(folder: pathlib.Path) -> int:
  return shutil.disk_usage(folder).free


def _weights_folder(cfg) -> pathlib.Path | None:
  """Where `vllm_engine.default_weights_dir` puts the servers' weights, when that is a
  tmpfs rather than the workdir; None without servers."""
  if cfg.engine != "vllm":
    return None
  from graft_jax.rollout.vllm_engine import default_weights_dir
  run_dir = pathlib.Path(cfg.workdir, "vllm").resolve()
  folder = default_weights_dir(run_dir)
  return None if run_dir in folder.parents else folder.parent
