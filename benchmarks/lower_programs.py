"""Every program of the paper's pair runs lowered for CUDA and for a TPU, on any machine.

  .venv/bin/python benchmarks/lower_programs.py [--configs=configs/pair_smollm3_qwen3.py,...]
      [--platforms=cuda,tpu] [--programs=sampler,pool,...]

Each program of each config's models (`graft_jax.plan.lowering.PROGRAMS`: the samplers,
the slot pool, scoring, exchange scoring, the update's gradient and optimizer step,
validation's sampler) is built at the models' real widths, heads, head_dim and
vocabulary with abstract weights and lowered with ``jax.export`` for each platform:
Pallas to Triton or Mosaic, cuDNN's attention as on an H100, every shape rule;
nothing compiles and nothing runs. A failure prints its error; the last line counts
the programs that lowered per platform.
"""

import _path  # noqa: F401  (the repository root on sys.path)

import pathlib

from absl import app, flags

from graft_jax.config import load as config_load
from graft_jax.plan import lowering
from graft_jax.train import methods

_PAIRS = sorted(str(p) for p in (pathlib.Path(_path.ROOT) / "configs").glob("pair_*.py"))
_CONFIGS = flags.DEFINE_list("configs", _PAIRS, "run config files (each model once)")
_PLATFORMS = flags.DEFINE_list("platforms", sorted(lowering.PLATFORMS), "jax.export platforms")
_PROGRAMS = flags.DEFINE_list("programs", list(lowering.PROGRAMS), "programs to lower")


def main(_):
  lowered = {p: 0 for p in _PLATFORMS.value}
  tried = dict(lowered)
  seen = set()
  for path in _CONFIGS.value:
    cfg = methods.from_config_dict(config_load.load_config(path))
    for name, mc in lowering.run_models(cfg).items():
      if name in seen:
        continue
      seen.add(name)
      for platform in _PLATFORMS.value:
        for program in _PROGRAMS.value:
          tried[platform] += 1
          try:
            kernels = lowering.kernel_calls(lowering.lower(cfg, program, mc, platform))
          except Exception as e:  # pylint: disable=broad-exception-caught
            print(f"FAILED {platform} {name} {program}: {type(e).__name__}: "
                  f"{str(e).splitlines()[0] if str(e) else ''}", flush=True)
            continue
          lowered[platform] += 1
          print(f"ok {platform} {name} {program}: {', '.join(sorted(kernels)) or 'no kernel'}",
                flush=True)
  print("; ".join(f"lowered {lowered[p]} of {tried[p]} programs for {p}" for p in lowered))
  return 0 if lowered == tried else 1


if __name__ == "__main__":
  app.run(main)
