"""gpu_check's pool section: the slot pool (`ContinuousSamplerEngine`) at one device's
share, 64 slots and no shrink, on Qwen3-1.7B from bf16 weights: its seconds, occupancy
and achieved bytes/s on long-tailed lengths against HBM peak. The slots are as many of
the 64 as the device's memory holds beside the weights (their KV windows sized from
``bytes_limit``); the decode attention is the pool's own choice here (the live-span
kernel on a GPU)."""

from __future__ import annotations

import sys
import time
import traceback

import _path  # noqa: F401  (the repository root on sys.path, for `benchmarks.`)

import jax.numpy as jnp
import numpy as np
from flax import nnx

from graft_jax.models.config import ModelConfig
from graft_jax.models.decoder import init_model
from graft_jax.plan import costs
from graft_jax.rollout import ContinuousSamplerEngine, SamplingParams
from graft_jax.rollout.kv_budget import bucket

from benchmarks.slot_occupancy import CAP, lognormal_lengths

SLOTS, PROMPTS, N, PROMPT_LEN = 64, 16, 8, 512  # 128 rows through 64 slots
SCALE = 4  # lognormal budgets of the speed benchmark over 4: capped at 1,024 tokens
# The KV windows may take this share of the device's pool; the rest is the weights and
# the programs' scratch.
KV_SHARE = 0.6


def pool_slots(cfg, device_bytes, window: int) -> int:
  """`SLOTS`, or as many multiples of 8 as fit ``KV_SHARE`` of ``device_bytes``."""
  if not device_bytes:
    return SLOTS
  per_slot = window * costs.kv_bytes_per_position(cfg, 2)
  room = KV_SHARE * device_bytes - 2 * costs.all_params(cfg)
  return int(max(8, min(SLOTS, room // per_slot // 8 * 8)))


def pool_section(out: dict, *, dry: bool, hbm_tbps: float, device_bytes, dry_model) -> None:
  """The pool over `PROMPTS` x `N` rows (module docstring); one line and
  ``out['sampler_pool'] = {'error': ...}`` if it fails."""
  try:
    cfg = dry_model if dry else ModelConfig.qwen3_1p7b()
    prompts_n, n, prompt_len, scale = (4, 2, 16, 64) if dry else (PROMPTS, N, PROMPT_LEN, SCALE)
    new = -(-CAP // scale)
    window = bucket(prompt_len, 16) + bucket(new, 16)
    slots = 8 if dry else pool_slots(cfg, device_bytes, window)
    model = init_model(cfg, rngs=nnx.Rngs(0), param_dtype=jnp.bfloat16, dtype=jnp.bfloat16)
    model.set_memory_options(scan_layers=False, attention="auto")
    rng = np.random.default_rng(2)
    prompts = [rng.integers(3, cfg.vocab_size, prompt_len).tolist() for _ in range(prompts_n)]
    budgets = lognormal_lengths(prompts_n * n, scale, seed=0).tolist()
    engine = ContinuousSamplerEngine(model, eos_ids=-1, pad_id=0, slots=slots, shrinks=0,
                                     max_prompt_len=prompt_len, max_new_tokens=new,
                                     prefill_chunk=16 if dry else 256)
    params = SamplingParams(max_new_tokens=new, temperature=1.0, seed=0)
    engine.generate(prompts, n, params, budgets=[1] * len(budgets))  # compiles, one token each
    start = time.perf_counter()
    engine.generate(prompts, n, params, budgets=budgets)
    seconds = time.perf_counter() - start
    m = engine.last_metrics
    weights = 2 * costs.all_params(cfg)
    achieved = (weights + m["live_kv_bytes_per_step"]) * m["decode_steps"] / seconds
    out["sampler_pool"] = {"seconds": seconds, "tokens_per_s": m["tokens"] / seconds,
                           "hbm_share": achieved / (hbm_tbps * 1e12), "slots": slots,
                           "window": window, "decode_attention": engine.decode_attention, **m}
    print(f"sampler pool {len(budgets)} rows in {slots} slots ({engine.decode_attention} decode "
          f"attention, {window}-slot windows): {seconds:.2f} s, {m['tokens'] / seconds:,.0f} "
          f"tokens/s, occupancy {m['slot_occupancy']:.1%}, "
          f"{out['sampler_pool']['hbm_share']:.0%} of HBM peak (weights + live KV)", flush=True)
  except Exception as e:  # pylint: disable=broad-except
    out["sampler_pool"] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
    print(f"sampler pool: failed: {out['sampler_pool']['error']}", flush=True)
    traceback.print_exc(file=sys.stderr)
