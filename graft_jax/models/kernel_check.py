"""The custom kernels a run will use, each compiled and run once on a small case against
XLA's reference before any model loads.

A kernel that compiles but computes wrong numbers on this device (a new driver, a
Triton or Mosaic change, a block size the hardware rounds) would otherwise train on
them for hours; a kernel that fails to compile would stop the run after the models
loaded. Here either is one line naming the kernel and the config setting that runs
the run without it (`check`):

- the live-span decode kernel of the JAX samplers, where `backends.live_decode_by_default`
  (off: ``perf.decode_attention='xla'``), against XLA's attention over each row's live
  slots, with a finished row among them (a span of one slot);
- cuDNN's or splash attention where ``perf.attention_impl`` resolves to one (off:
  ``perf.attention_impl='blocked'``), on padded rows (the samplers' prefill; forward and
  backward when the update pads, ``perf.packed_update=False``) and on packed rows (the
  scorer's forward; the backward when the update packs, off: ``perf.packed_update=False``)
  in each kernel they can run in (`packed_kernels`), against `dense_attention`.

On a CPU nothing custom runs, so nothing is checked unless ``force``: then the kernels
run in Pallas's interpret mode (tests), cuDNN's, which has none, excepted.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from graft_jax import backends
from graft_jax.config.checks import ConfigError, policy_configs
from graft_jax.models.attention import attention, dense_attention, resolve_impl
from graft_jax.models.packed_attention import MAX_SEGMENTS

# bf16 inputs: the kernels and the reference round differently, by up to about 1% of the
# largest value; a kernel off by a scale, a mask or a block is off by tens of percent.
TOLERANCE = {"bfloat16": 5e-2, "float16": 5e-2, "float32": 1e-3}
# (head_dim, query heads per kv head) when no model folder says (Qwen3-1.7B's).
DEFAULT_SHAPE = (128, 2)


@dataclasses.dataclass(frozen=True)
class Case:
  """One kernel's check: ``run()`` gives its largest error against the reference, relative
  to the reference's largest value; ``field`` = ``value`` turns the kernel off."""
  kernel: str
  field: str
  value: str
  run: Callable[[], float]
  tolerance: float

  def failure(self) -> str | None:
    """None when the kernel agrees with the reference, else one line saying why not."""
    fix = f"set {self.field}={self.value} to run without it"
    try:
      err = self.run()
    except Exception as e:  # pylint: disable=broad-except
      first = (str(e).strip().splitlines() or [""])[0][:200]
      return f"{self.kernel} failed to compile or run here ({type(e).__name__}: {first}); {fix}"
    if err <= self.tolerance:  # NaN fails too
      return None
    return (f"{self.kernel} disagrees with XLA's reference on a small case (largest error "
            f"{err:.3g} of the reference's largest value, tolerance {self.tolerance:g}); {fix}")


def _rel_err(got, want) -> float:
  got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
  return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def _normal(key, shape, dtype):
  return jax.random.normal(key, shape, jnp.float32).astype(dtype)


def xla_decode(q_BxKxGxH, k_BxKxHxS, v_BxKxSxH, start_B, end_B):
  """One query per row over its cache slots [start_B, end_B) by XLA, in float32."""
  h, s = q_BxKxGxH.shape[-1], k_BxKxHxS.shape[-1]
  f32 = lambda x: x.astype(jnp.float32)
  scores_BxKxGxS = jnp.einsum("bkgh,bkhs->bkgs", f32(q_BxKxGxH), f32(k_BxKxHxS)) * h ** -0.5
  slot_S = jnp.arange(s)
  live_BxS = (slot_S[None] >= start_B[:, None]) & (slot_S[None] < end_B[:, None])
  scores_BxKxGxS = jnp.where(live_BxS[:, None, None], scores_BxKxGxS, -jnp.inf)
  return jnp.einsum("bkgs,bksh->bkgh", jax.nn.softmax(scores_BxKxGxS, -1), f32(v_BxKxSxH))


def decode_spans(slots: int, block: int):
  """(start_B, end_B) of four rows: the whole window, a left-padded prompt with its
  response crossing blocks, a finished row (its current slot alone) and a span ending on a
  block edge."""
  start = [0, block + 2, slots // 2 + 3, block]
  end = [slots, slots - block + 1, slots // 2 + 4, slots - block]
  return jnp.asarray(start, jnp.int32), jnp.asarray(end, jnp.int32)


def live_decode_error(*, head_dim: int, groups: int, dtype, kv_heads: int = 2,
                      slots: int = 1024, decode=None) -> float:
  """The live-span decode kernel (``decode``: `backends.live_decode_attention`'s signature)
  on four rows (`decode_spans`) over ``slots`` cache slots, several of its blocks on a GPU
  or TPU, against `xla_decode`."""
  decode = decode or backends.live_decode_attention
  block = backends.live_decode_block(slots)
  keys = jax.random.split(jax.random.key(0), 3)
  q_BxKxGxH = _normal(keys[0], (4, kv_heads, groups, head_dim), dtype)
  k_BxKxHxS = _normal(keys[1], (4, kv_heads, head_dim, slots), dtype)
  v_BxKxSxH = _normal(keys[2], (4, kv_heads, slots, head_dim), dtype)
  operands = (q_BxKxGxH, k_BxKxHxS, v_BxKxSxH, *decode_spans(slots, block))
  got, _ = jax.jit(functools.partial(decode, scale=head_dim ** -0.5, block_k=block))(*operands)
  return _rel_err(got, xla_decode(*operands))


def attention_rows(length: int, *, packed: bool, segments: int = 3):
  """Two rows' mask: packed, segment ids of ``segments`` sequences and a padded tail, and
  one sequence filling the row; else booleans, a left-padded row and a right-padded one."""
  slot = np.arange(length)
  if packed:
    seg = np.zeros((2, length), np.int32)
    if segments == 3:
      cuts = [0, length // 3, length // 3 + length // 4 + 1, length - length // 8]
    else:
      cuts = np.linspace(0, length - length // 8, segments + 1).astype(int).tolist()
    for s, (a, b) in enumerate(zip(cuts, cuts[1:])):
      seg[0, a:b] = s + 1
    seg[1] = 1
    return jnp.asarray(seg)
  return jnp.asarray(np.stack([slot >= length // 5, slot < length - length // 7]))


def attention_error(impl: str, *, packed: bool, grad: bool, head_dim: int, groups: int,
                    dtype, kv_heads: int = 2, length: int = 256, segments: int = 3,
                    attend=None) -> float:
  """``attend`` (`attention`'s signature, default `attention`) with ``impl`` on two rows
  (`attention_rows`) against `dense_attention`: the output at every real position and,
  with ``grad``, the gradient of a random projection of it by q, k and v."""
  attend = attend or attention
  mask_BxT = attention_rows(length, packed=packed, segments=segments)
  real_BxT = np.asarray(mask_BxT > 0 if packed else mask_BxT)
  keys = jax.random.split(jax.random.key(1), 4)
  qkv = (_normal(keys[0], (2, length, kv_heads, groups, head_dim), dtype),
         _normal(keys[1], (2, length, kv_heads, head_dim), dtype),
         _normal(keys[2], (2, length, kv_heads, head_dim), dtype))
  # Read at real positions only: a right pad's output is the implementations' choice.
  ct_BxTxKxGxH = _normal(keys[3], qkv[0].shape, jnp.float32) * real_BxT[:, :, None, None, None]
  # The reference in float32 from the same (rounded) inputs: the error is the kernel's.
  fns = {"kernel": (lambda q, k, v: attend(q, k, v, mask_BxT, impl=impl), qkv),
         "reference": (lambda q, k, v: dense_attention(q, k, v, mask_BxT),
                       tuple(x.astype(jnp.float32) for x in qkv))}
  outs = {n: np.asarray(jax.jit(f)(*args), np.float32)[real_BxT] for n, (f, args) in fns.items()}
  errs = [_rel_err(outs["kernel"], outs["reference"])]
  if grad:
    loss = lambda f: lambda *qkv: (f(*qkv).astype(jnp.float32) * ct_BxTxKxGxH).sum()
    grads = {n: jax.jit(jax.grad(loss(f), argnums=(0, 1, 2)))(*args)
             for n, (f, args) in fns.items()}
    errs += [_rel_err(g, w) for g, w in zip(grads["kernel"], grads["reference"])]
  return max(errs)


def model_shapes(cfg) -> set[tuple[int, int]]:
  """(head_dim, query heads per kv head) of each model whose folder has a config.json,
  else `DEFAULT_SHAPE` (a toy pair's folders are built after this check)."""
  shapes = set()
  for m in policy_configs(cfg):
    path = pathlib.Path(m.path or "", "config.json")
    if m.path and path.is_file():
      from graft_jax.models.config import ModelConfig  # pylint: disable=import-outside-toplevel
      mc = ModelConfig.from_hf_config(json.loads(path.read_text()))
      shapes.add((mc.head_dim, mc.num_heads // mc.num_kv_heads))
  return shapes or {DEFAULT_SHAPE}


def custom_kernels_run() -> bool:
  """Whether programs here run hand-written kernels: traced for a GPU or TPU and run on it."""
  return backends.live_decode_by_default()


def planned(cfg, shapes, *, force: bool = False, decode=None, attend=None) -> list[Case]:
  """The checks of every custom kernel ``cfg`` runs here, at each model's ``shapes``
  (`model_shapes`); none on a CPU unless ``force``. ``decode`` and ``attend`` replace the
  kernels' entry points (`live_decode_error`, `attention_error`)."""
  if not (force or custom_kernels_run()):
    return []
  perf, dtype = cfg.perf, jnp.dtype(cfg.dtype)
  tol = TOLERANCE.get(dtype.name, TOLERANCE["bfloat16"])
  where = f"on {backends.platform()}" + ("" if custom_kernels_run() else ", interpreted")
  cases = []
  for head_dim, groups in sorted(shapes):
    shape = dict(head_dim=head_dim, groups=groups, dtype=dtype)
    about = f"{where}, head_dim {head_dim}, {groups} query heads per kv head"
    if cfg.engine == "jax" and perf.decode_attention == "auto":
      cases.append(Case(f"the live-span decode kernel ({about})", "perf.decode_attention",
                        "'xla'", functools.partial(live_decode_error, decode=decode, **shape),
                        tol))
    impl = resolve_impl(perf.attention_impl, dtype=dtype, head_dim=head_dim,
                        length=cfg.max_prompt_len + cfg.max_response_len,
                        block=perf.attention_block)
    if impl not in ("cudnn", "splash"):
      continue
    run = functools.partial(attention_error, impl, attend=attend, **shape)
    off = ("perf.attention_impl", "'blocked'")
    if impl == "splash" or backends.kernels_native():  # cuDNN has no interpret mode
      cases.append(Case(f"{impl} attention on padded rows ({about})", *off,
                        functools.partial(run, packed=False, grad=not perf.packed_update), tol))
    for kernel, rows in packed_kernels(impl, dtype, head_dim):
      packed = functools.partial(run, packed=True, segments=rows)
      cases.append(Case(f"{kernel} attention on packed rows, forward ({about})", *off,
                        functools.partial(packed, grad=False), tol))
      if perf.packed_update:
        cases.append(Case(f"{kernel} attention on packed rows, backward ({about})",
                          "perf.packed_update", "False", functools.partial(packed, grad=True),
                          tol))
  return cases


def packed_kernels(impl: str, dtype, head_dim: int) -> list[tuple[str, int]]:
  """(kernel, sequences in the case's packed row) of each kernel packed rows run in:
  splash on a TPU; on a GPU the door's choice (`backends.packed_attention_kernel`), and
  where that is cuDNN's packed layout also the Pallas kernel a row of more than
  `MAX_SEGMENTS` sequences falls back to."""
  if impl == "splash":
    return [("splash", 3)]
  kernel = backends.packed_attention_kernel(dtype, head_dim)
  return [(kernel, 3)] + ([("pallas", MAX_SEGMENTS + 1)] if kernel == "cudnn_packed" else [])


def check(cfg, *, shapes=None, force: bool = False, decode=None, attend=None) -> None:
  """Runs `planned`'s checks; raises `ConfigError`, one line per kernel that failed, naming
  the setting that turns it off."""
  if not (force or custom_kernels_run()):
    return
  cases = planned(cfg, model_shapes(cfg) if shapes is None else shapes, force=force,
                  decode=decode, attend=attend)
  failed = [(c, line) for c in cases if (line := c.failure()) is not None]
  if failed:
    raise ConfigError("\n".join(line for _, line in failed), field=failed[0][0].field)
