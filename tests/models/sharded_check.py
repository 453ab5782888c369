"""Run in a subprocess with 8 fake CPU devices: sharded == unsharded.

Prints one line per check and exits non-zero on the first mismatch.
"""

import os
import sys

from tests import fake_devices  # noqa: E402

os.environ["XLA_FLAGS"] = fake_devices.env(8)["XLA_FLAGS"]

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from graft_jax.backends.cpu import decode_kernel  # noqa: E402
from graft_jax.models import load_hf, token_logprobs  # noqa: E402
from graft_jax.rollout import JaxSamplerEngine, SamplingParams  # noqa: E402
from graft_jax.sharding import (MeshConfig, batch_sharding, make_mesh,  # noqa: E402
                                state_shardings)


def check(path: str, meshes, with_sampler: bool) -> None:
  model, _ = load_hf(path)
  graphdef, state = nnx.split(model)
  rng = np.random.default_rng(0)
  ids = rng.integers(3, 160, (8, 80)).astype(np.int32)
  mask = np.ones(ids.shape, bool)
  mask[::2, 70:] = False

  def forward(state, ids, mask):
    return nnx.merge(graphdef, state)(ids, mask)

  def logprobs(state, ids, mask):
    return token_logprobs(nnx.merge(graphdef, state), ids, mask, temperature=0.9)

  for shape in meshes:
    mesh = make_mesh(MeshConfig(*shape))
    st_sh = state_shardings(state, mesh)
    rows = batch_sharding(mesh)
    sharded_state = jax.device_put(state, st_sh)
    # load_hf with the mesh places each tensor straight from the file.
    placed = nnx.state(load_hf(path, mesh=mesh)[0])
    for got, want, sh in zip(*(jax.tree.leaves(t) for t in (placed, state, st_sh))):
      if got.sharding != sh or not np.array_equal(np.asarray(got), np.asarray(want)):
        sys.exit(f"load_hf(mesh=...) placed {got.sharding} instead of {sh} on mesh {shape}")
    print(f"{path} {shape} load_hf placed every tensor")
    if with_sampler:
      check_stacked(path, mesh, ids, mask)
    assert any(len(leaf.sharding.device_set) == 8 and not leaf.sharding.is_fully_replicated
               for leaf in jax.tree.leaves(sharded_state)), "nothing was sharded"
    for fn, name in [(forward, "forward"), (logprobs, "logprobs")]:
      want = np.asarray(jax.jit(fn)(state, ids, mask))
      got = jax.jit(fn, in_shardings=(st_sh, rows, rows), out_shardings=rows)(
          sharded_state, ids, mask)
      diff = float(np.abs(np.asarray(got) - want).max())
      print(f"{path} {shape} {name} max|diff|={diff:.2e}")
      if diff > 1e-5 * max(1.0, float(np.abs(want).max())):
        sys.exit(f"{name} differs on mesh {shape}: {diff}")
    if not with_sampler:
      continue
    params = SamplingParams(max_new_tokens=16, temperature=0.0)
    plain = JaxSamplerEngine(model, eos_ids=2, pad_id=0).generate([[5, 6, 7], [9]], 2, params)
    sharded = JaxSamplerEngine(model, eos_ids=2, pad_id=0, state_sharding=st_sh).generate(
        [[5, 6, 7], [9]], 2, params)
    if not np.array_equal(plain.tokens_BxL, sharded.tokens_BxL):
      sys.exit(f"sampler differs on mesh {shape}")
    print(f"{path} {shape} sampler equal")


def check_stacked(path: str, mesh, ids, mask) -> None:
  """Stacking the blocks of a model loaded onto the mesh keeps every weight where the
  rules put it (the layer axis replicated) and the logits unchanged."""
  model = load_hf(path, mesh=mesh)[0]
  want = np.asarray(model(ids, mask))
  model.set_memory_options(scan_layers=True)
  state = nnx.state(model)
  for leaf, sh in zip(*(jax.tree.leaves(t) for t in (state, state_shardings(state, mesh)))):
    if leaf.sharding != sh:
      sys.exit(f"stacked weight placed {leaf.sharding} instead of {sh}")
  assert any(not leaf.sharding.is_fully_replicated and leaf.ndim == 4
             for leaf in jax.tree.leaves(nnx.state(model.stacks))), "no stacked weight sharded"
  graphdef = nnx.graphdef(model)
  got = np.asarray(jax.jit(lambda st: nnx.merge(graphdef, st)(ids, mask))(state))
  diff = float(np.abs(got - want).max())
  print(f"{path} stacked on {dict(mesh.shape)} max|diff|={diff:.2e}")
  if diff > 1e-5 * max(1.0, float(np.abs(want).max())):
    sys.exit(f"stacked forward differs: {diff}")


def check_decode_kernel() -> None:
  """The CPU decode kernel on operands split over the 8 devices (XLA runs it on
  every device at once, on one shared thread pool) returns what it does on one."""
  if decode_kernel.host_reason() is not None:
    print(f"decode kernel skipped: {decode_kernel.host_reason()}")
    return
  rng = np.random.default_rng(0)
  b, k, g, h, s = 16, 2, 2, 64, 40
  ops = [rng.standard_normal(shape).astype(np.float32)
         for shape in ((b, k, g, h), (b, k, h, s), (b, k, s, h), (b, k, h), (b, k, h))]
  ops += [np.int32(17), rng.random((b, s)) < 0.8]
  fn = jax.jit(lambda *a: decode_kernel.decode_attention(*a, scale=h ** -0.5))
  want = [np.asarray(x) for x in fn(*ops)]
  split = jax.sharding.NamedSharding(jax.make_mesh((8,), ("rows",)), jax.P("rows"))
  for _ in range(5):
    got = fn(*(jax.device_put(x, split) if np.ndim(x) else x for x in ops))
    for name, a, w in zip(("out", "keys", "values"), got, want):
      if not np.array_equal(np.asarray(a), w):
        sys.exit(f"decode kernel's {name} differ over 8 devices: {np.abs(np.asarray(a) - w).max()}")
  print("decode kernel over 8 devices equal")


def main(paths: list[str]) -> None:
  assert jax.device_count() == 8, jax.devices()
  check_decode_kernel()
  for i, path in enumerate(paths):
    # Every family on the 3-axis mesh; the first also on a wide tensor axis
    # (4 > its 2 kv heads) and through the sampler. Each compile costs seconds here.
    check(path, [(2, 2, 2)] + ([(1, 2, 4)] if i == 0 else []), with_sampler=i == 0)
  print("OK")


if __name__ == "__main__":
  main(sys.argv[1:])
