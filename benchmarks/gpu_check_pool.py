"""gpu_check's slot-pool half of the sampler section: the pool's seconds, occupancy and
achieved bytes/s on long-tailed lengths, and the live-span decode kernel against
float64 NumPy with the KV blocks it read (`graft_jax.backends.gpu.live_decode`)."""

from __future__ import annotations

import sys
import time
import traceback

import _path  # noqa: F401  (the repository root on sys.path, for `benchmarks.`)

import jax.numpy as jnp
import numpy as np

from graft_jax import backends
from graft_jax.plan import costs
from graft_jax.rollout import ContinuousSamplerEngine, SamplingParams

from benchmarks.slot_occupancy import CAP, lognormal_lengths


def _failed(out: dict, key: str, label: str, e: Exception) -> None:
  """A part that raised: one line saying why, its traceback on stderr."""
  out[key] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
  print(f"{label}: failed: {out[key]['error']}")
  traceback.print_exc(file=sys.stderr)


def pool_section(out: dict, model, prompts, n: int, *, slots: int, hbm_tbps: float,
                 dry: bool) -> None:
  """The slot pool over ``prompts`` x ``n`` with lognormal budgets (capped at 4,096,
  divided by 64 on a dry run), the weights and live KV per step against HBM peak."""
  try:
    scale = 64 if dry else 1
    budgets = lognormal_lengths(len(prompts) * n, scale, seed=0)
    engine = ContinuousSamplerEngine(model, eos_ids=-1, pad_id=0, slots=slots,
                                     max_prompt_len=max(len(p) for p in prompts),
                                     prefill_chunk=16 if dry else 256)
    params = SamplingParams(max_new_tokens=-(-CAP // scale), temperature=1.0, seed=0)
    engine.generate(prompts, n, params, budgets=budgets.tolist())  # compiles
    start = time.perf_counter()
    engine.generate(prompts, n, params, budgets=budgets.tolist())
    seconds = time.perf_counter() - start
    m = engine.last_metrics
    weights = 2 * costs.all_params(model.cfg)
    achieved = (weights + m["live_kv_bytes_per_step"]) * m["decode_steps"] / seconds
    out["sampler_pool"] = {"seconds": seconds, "tokens_per_s": m["tokens"] / seconds,
                           "hbm_share": achieved / (hbm_tbps * 1e12), **m}
    print(f"sampler pool {len(budgets)} rows in {slots} slots: {seconds:.2f} s, "
          f"{m['tokens'] / seconds:,.0f} tokens/s, occupancy {m['slot_occupancy']:.1%}, "
          f"{100 * achieved / (hbm_tbps * 1e12):.0f}% of HBM peak (weights + live KV)")
  except Exception as e:  # pylint: disable=broad-except
    _failed(out, "sampler_pool", "sampler pool", e)
  live_kernel_section(out)


def live_kernel_section(out: dict) -> None:
  """The live-span kernel on spans of 1 to all 4 blocks: float64 NumPy's output, and
  exactly the blocks that meet each span read."""
  try:
    rng = np.random.default_rng(0)
    b, k, g, h, s, block = 4, 2, 8, 128, 256, 64
    q = rng.normal(size=(b, k, g, h)).astype(np.float32)
    keys = rng.normal(size=(b, k, h, s)).astype(np.float32)
    values = rng.normal(size=(b, k, s, h)).astype(np.float32)
    start, end = np.array([0, 10, 130, 64]), np.array([256, 70, 131, 128])
    got, blocks = backends.live_decode_attention(
        *map(jnp.asarray, (q, keys, values, start, end)), scale=h ** -0.5, block_k=block)
    want = np.zeros(q.shape)
    for r in range(b):
      live = slice(start[r], end[r])
      sc = np.einsum("kgh,khs->kgs", q[r].astype(np.float64), keys[r][:, :, live]) * h ** -0.5
      p = np.exp(sc - sc.max(-1, keepdims=True))
      want[r] = np.einsum("kgs,ksh->kgh", p / p.sum(-1, keepdims=True), values[r][:, live])
    err = float(np.abs(np.asarray(got, np.float64) - want).max())
    read = np.asarray(blocks)[:, 0].tolist()
    out["live_kernel"] = {"max_abs_err": err, "blocks": read, "want_blocks": [4, 2, 1, 1]}
    print(f"live decode kernel: max |err| {err:.1e} against float64, blocks read {read} "
          f"(want [4, 2, 1, 1])")
    if read != [4, 2, 1, 1] or err > 1e-4:
      out["live_kernel"]["error"] = "wrong blocks or output"
  except Exception as e:  # pylint: disable=broad-except
    _failed(out, "live_kernel", "live decode kernel", e)
