"""gpu_check's first two sections: the kernels a GPU run leans on, at production shapes.

env_decode: the live-span decode kernel (`graft_jax.backends.live_decode_attention`) at
Qwen3-1.7B's and SmolLM3-3B's heads (8 and 4 kv heads of 128, 2 and 4 query heads
each) over a 6,144-slot window, 64 rows (one device's share of the pool), spans drawn
from the pool's lengths with a whole-window row and a finished row (its current slot
alone): its largest error against XLA's float32 attention over the live slots
(`kernel_check.xla_decode`), the blocks it read against those meeting each span, and
its time beside XLA's whole-window decode step in bf16.

packed: packed attention at 6,144 tokens through `attention` (whatever kernel 'auto'
picks here) forward and backward, timed, and against 'dense' on two rows, one holding 3
sequences or more than cuDNN's packed layout takes (`kernel_check.attention_error`);
then one packed micro-batch of Qwen3-1.7B (fp32 master weights, bf16 compute, every
block rematerialised, blocks under a scan): the gradient of a row's summed token
log-probs, its sequences told apart by segment ids.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import traceback

import _path  # noqa: F401  (the repository root on sys.path, for `benchmarks.`)

import jax
import jax.numpy as jnp
import numpy as np

from graft_jax import backends
from graft_jax.models import kernel_check
from graft_jax.models.attention import attention, describe_impl

from benchmarks.gpu_check_step import median_seconds

# (name, kv heads, query heads per kv head) of the pair's models; head_dim 128.
HEADS = (("qwen3_1p7b", 8, 2), ("smollm3_3b", 4, 4))
WINDOW, ROWS, LENGTH = 6144, 64, 6144
DRY = dict(window=256, rows=4, length=256, head_dim=16)


def failed(out: dict, key: str, e: Exception) -> None:
  out[key] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
  print(f"{key}: failed: {out[key]['error']}", flush=True)
  traceback.print_exc(file=sys.stderr)


def spans(rows: int, window: int, seed: int = 0):
  """(start_B, end_B): left-padded prompts of up to a twelfth of the window and responses
  of long-tailed lengths; row 0 the whole window, row 1 a finished row (one slot)."""
  rng = np.random.default_rng(seed)
  start = rng.integers(0, window // 12, rows)
  end = np.minimum(start + 1 + rng.lognormal(np.log(window / 6), 0.8, rows).astype(int), window)
  start[0], end[0] = 0, window
  start[1], end[1] = window // 2 + 3, window // 2 + 4
  return jnp.asarray(start, jnp.int32), jnp.asarray(end, jnp.int32)


def xla_window_decode(q_BxKxGxH, k_BxKxHxS, v_BxKxSxH, start_B, end_B):
  """XLA's decode step as the model's whole-window path runs it: bf16 operands, every slot
  scored, float32 accumulation."""
  h, s = q_BxKxGxH.shape[-1], k_BxKxHxS.shape[-1]
  scores = jnp.einsum("bkgh,bkhs->bkgs", q_BxKxGxH, k_BxKxHxS,
                      preferred_element_type=jnp.float32) * h ** -0.5
  slot_S = jnp.arange(s)
  live = (slot_S[None] >= start_B[:, None]) & (slot_S[None] < end_B[:, None])
  probs = jax.nn.softmax(jnp.where(live[:, None, None], scores, -jnp.inf), -1)
  return jnp.einsum("bkgs,bksh->bkgh", probs.astype(v_BxKxSxH.dtype), v_BxKxSxH)


def env_decode_section(out: dict, *, dry: bool, reps: int) -> None:
  """The environment, then the live-span kernel per model's heads (module docstring)."""
  out["environment"] = {"platform": backends.platform(),
                        "live_decode_by_default": backends.live_decode_by_default(),
                        "devices": jax.device_count()}
  window, rows, h = (DRY["window"], DRY["rows"], DRY["head_dim"]) if dry else (WINDOW, ROWS, 128)
  block = backends.live_decode_block(window)
  print(f"env_decode: platform {backends.platform()}, live-span kernel by default: "
        f"{backends.live_decode_by_default()} (else it runs interpreted)", flush=True)
  for name, kv, g in HEADS:
    key, kv = f"live_decode/{name}", 2 if dry else kv
    try:
      keys = jax.random.split(jax.random.key(0), 3)
      q = jax.random.normal(keys[0], (rows, kv, g, h), jnp.bfloat16)
      k = jax.random.normal(keys[1], (rows, kv, h, window), jnp.bfloat16)
      v = jax.random.normal(keys[2], (rows, kv, window, h), jnp.bfloat16)
      start, end = spans(rows, window)
      kernel = jax.jit(functools.partial(backends.live_decode_attention, scale=h ** -0.5,
                                         block_k=block))
      xla = jax.jit(xla_window_decode)
      got, blocks = kernel(q, k, v, start, end)
      want = kernel_check.xla_decode(q, k, v, start, end)
      err = float(jnp.abs(got.astype(jnp.float32) - want).max() / jnp.abs(want).max())
      meet = -(-np.asarray(end) // block) - np.asarray(start) // block
      read_ok = bool((np.asarray(blocks) == meet[:, None]).all())
      t_kernel = median_seconds(lambda: jax.block_until_ready(kernel(q, k, v, start, end)), reps)
      t_xla = median_seconds(lambda: jax.block_until_ready(xla(q, k, v, start, end)), reps)
      live_share = float(np.sum(meet) * block / (rows * window))
      out[key] = {"rows": rows, "kv_heads": kv, "groups": g, "head_dim": h, "window": window,
                  "block": block, "max_rel_err_vs_xla_f32": err, "blocks_as_spans": read_ok,
                  "kernel_s": t_kernel, "xla_window_s": t_xla, "share_of_window_read": live_share}
      print(f"live decode {name}: {rows} rows x {kv} kv heads x {g} over {window} slots, "
            f"largest error {err:.1e} of XLA's largest value, blocks read "
            f"{'as the spans say' if read_ok else 'NOT as the spans say'}; "
            f"{1e6 * t_kernel:.0f} us against XLA's whole window {1e6 * t_xla:.0f} us "
            f"({live_share:.0%} of the window live)", flush=True)
      if err > kernel_check.TOLERANCE["bfloat16"] or not read_ok:
        out[key] = {**out[key], "error": "wrong output or blocks"}
    except Exception as e:  # pylint: disable=broad-except
      failed(out, key, e)


def packed_section(out: dict, *, dry: bool, reps: int, peak_tflops: float, dry_model) -> None:
  """Packed attention forward + backward, then one packed micro-batch (module docstring)."""
  t = DRY["length"] if dry else LENGTH
  h = DRY["head_dim"] if dry else 128
  _, kv, g = HEADS[0]
  kv = 2 if dry else kv
  # --dry: the attention traced as for a GPU, its Pallas kernel interpreted on the CPU.
  with backends.traced_for("gpu") if dry else contextlib.nullcontext():
    packed_attention(out, t, h, kv, g, reps)
  try:
    out["packed_micro_batch"] = packed_micro_batch(t, dry=dry, reps=reps, peak_tflops=peak_tflops,
                                                   dry_model=dry_model)
  except Exception as e:  # pylint: disable=broad-except
    failed(out, "packed_micro_batch", e)


def packed_attention(out: dict, t: int, h: int, kv: int, g: int, reps: int) -> None:
  impl = describe_impl("auto", dtype=jnp.bfloat16, head_dim=h, length=t)  # packed rows' too
  try:
    # A row of 3 sequences, and one of more than cuDNN's packed layout takes.
    err = max(kernel_check.attention_error("auto", packed=True, grad=True, head_dim=h,
                                           groups=g, dtype=jnp.bfloat16, kv_heads=kv,
                                           length=t, segments=n)
              for n in (3, kernel_check.MAX_SEGMENTS + 1))
    seg = kernel_check.attention_rows(t, packed=True)[:1]
    keys = jax.random.split(jax.random.key(2), 3)
    q = jax.random.normal(keys[0], (1, t, kv, g, h), jnp.bfloat16)
    k, v = (jax.random.normal(x, (1, t, kv, h), jnp.bfloat16) for x in keys[1:])
    loss = lambda q, k, v: attention(q, k, v, seg).astype(jnp.float32).sum()
    step = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    seconds = median_seconds(lambda: jax.block_until_ready(step(q, k, v)), reps)
    out["packed_attention"] = {"length": t, "impl": impl, "fwd_bwd_s": seconds,
                               "max_rel_err_vs_dense": err}
    print(f"packed attention T={t} ({impl}): fwd+bwd {1e3 * seconds:.2f} ms, largest error "
          f"of output and gradients {err:.1e} of 'dense''s largest value", flush=True)
    if not err <= kernel_check.TOLERANCE["bfloat16"]:
      out["packed_attention"] = {**out["packed_attention"], "error": "disagrees with dense"}
  except Exception as e:  # pylint: disable=broad-except
    failed(out, "packed_attention", e)


def packed_micro_batch(t: int, *, dry: bool, reps: int, peak_tflops: float, dry_model) -> dict:
  """The gradient of one packed row's summed token log-probs (module docstring)."""
  from flax import nnx  # pylint: disable=import-outside-toplevel
  from graft_jax.models import token_logprobs  # pylint: disable=import-outside-toplevel
  from graft_jax.models.config import ModelConfig  # pylint: disable=import-outside-toplevel
  from graft_jax.models.decoder import init_model  # pylint: disable=import-outside-toplevel
  from graft_jax.plan import costs  # pylint: disable=import-outside-toplevel

  cfg = dry_model if dry else ModelConfig.qwen3_1p7b()
  model = init_model(cfg, rngs=nnx.Rngs(0), param_dtype=jnp.float32, dtype=jnp.bfloat16)
  model.set_memory_options(remat="full", scan_layers=True, attention="auto")
  graphdef, params = nnx.split(model)
  seg = kernel_check.attention_rows(t, packed=True)[:1]
  ids = jax.random.randint(jax.random.key(3), (1, t), 0, cfg.vocab_size)

  def loss(p):
    logp = token_logprobs(nnx.merge(graphdef, p), ids, seg > 0, segment_ids_BxT=seg)
    return -(logp * (seg > 0)).sum()

  grad = jax.jit(jax.value_and_grad(loss))
  seconds = median_seconds(lambda: jax.block_until_ready(grad(params)), reps)
  lengths = np.bincount(np.asarray(seg[0]))[1:]
  flops = sum(n * costs.train_flops_per_token(cfg, int(n)) for n in lengths)
  peak = (jax.devices()[0].memory_stats() or {}).get("peak_bytes_in_use")
  got = {"length": t, "sequences": len(lengths), "seconds": seconds,
         "tokens_per_s": int(lengths.sum()) / seconds,
         "mfu": flops / seconds / (peak_tflops * 1e12), "peak_bytes": peak}
  print(f"packed micro-batch {cfg.model_type}, one row of {t} ({len(lengths)} sequences): "
        f"{seconds:.3f} s, {got['tokens_per_s']:,.0f} tokens/s, MFU {100 * got['mfu']:.1f}%, "
        f"device peak {'n/a' if peak is None else f'{peak / 2**30:.2f} GiB'}", flush=True)
  return got
