"""A worked example of one GRAFT step on synthetic groups, printed as text.

It uses only ``graft_jax.core``: rewards, advantages, the exchange with its
balancing, the compatibility gate, the minibatch order and the loss.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from graft_jax import core


def synthetic_step(seed: int = 0, g: int = 8, n: int = 8):
  """Rewards of two models with complementary skills on the same G prompts."""
  rng = np.random.default_rng(seed)
  # Prompts 0..3 are "A's kind", 4..7 "B's kind": each model is good at its own.
  p_a = np.where(np.arange(g) < g // 2, 0.6, 0.05)
  p_b = np.where(np.arange(g) < g // 2, 0.05, 0.6)
  p_a[g // 2] = p_b[0] = 0.0  # one hard prompt per side that its owner always fails
  rewards_a = (rng.uniform(size=(g, n)) < p_a[:, None]).astype(np.float32)
  rewards_b = (rng.uniform(size=(g, n)) < p_b[:, None]).astype(np.float32)
  return rewards_a, rewards_b


def _row(cells, widths):
  return "  ".join(str(c).rjust(w) for c, w in zip(cells, widths))


def run(seed: int = 0, delta: float = 0.8, num_minibatches: int = 4) -> str:
  rewards_a, rewards_b = synthetic_step(seed)
  g, n = rewards_a.shape
  out = [f"One GRAFT step on synthetic groups: G={g} prompts, n={n} samples per model.", ""]
  k_a = rewards_a.sum(1).astype(int)
  k_b = rewards_b.sum(1).astype(int)
  adv_a = np.asarray(core.group_advantages(rewards_a))
  adv_b = np.asarray(core.group_advantages(rewards_b))
  a_recv, b_recv = (np.asarray(x) for x in core.select_exchange(k_a, k_b, n))
  a_cand = np.asarray(core.exchange_candidates(k_a, k_b, n))
  b_cand = np.asarray(core.exchange_candidates(k_b, k_a, n))
  w = [3, 5, 5, 12, 12, 9, 9, 9, 9]
  out.append(_row(["q", "k_A", "k_B", "|A_A| max", "|A_B| max", "A cand", "A takes", "B cand",
                   "B takes"], w))
  for q in range(g):
    out.append(_row([q, k_a[q], k_b[q], f"{np.abs(adv_a[q]).max():.3f}",
                     f"{np.abs(adv_b[q]).max():.3f}", "yes" if a_cand[q] else "-",
                     "GRAFT" if a_recv[q] else "-", "yes" if b_cand[q] else "-",
                     "GRAFT" if b_recv[q] else "-"], w))
  silent_a = int((k_a == 0).sum() + (k_a == n).sum())
  m = min(int(a_cand.sum()), int(b_cand.sum()))
  out += ["", f"A's groups with zero advantage (all-fail or all-pass): {silent_a} of {g}.",
          f"Candidates: B->A {int(a_cand.sum())}, A->B {int(b_cand.sum())}; m = {m}; "
          f"kept B->A {int(a_recv.sum())}, A->B {int(b_recv.sum())} (ties at the cutoff stay).", ""]

  # The gate on the peer responses A receives, with synthetic mean log-probs.
  key = jax.random.key(seed)
  rows = np.flatnonzero(a_recv)
  r = len(rows) * n
  gen_lbar = -1.0 + 0.2 * jax.random.normal(key, (r,))
  recv_lbar = gen_lbar - jnp.abs(0.3 * jax.random.normal(jax.random.fold_in(key, 1), (r,)))
  weight, admitted = core.compat_weights(recv_lbar, gen_lbar, delta=delta)
  s = np.exp(np.asarray(recv_lbar - gen_lbar))
  out.append(f"Gate on the {r} peer responses A receives (delta={delta}): "
             f"admitted {int(np.asarray(admitted).sum())}, mean s {s.mean():.3f}, "
             f"mean w of admitted {float(np.asarray(weight)[np.asarray(admitted)].mean()) if np.asarray(admitted).any() else 0:.3f}.")

  perm = np.asarray(core.order_minibatches(a_recv, num_minibatches))
  mbs = perm.reshape(num_minibatches, -1)
  out.append("Minibatch order for A (peer_last): " + " | ".join(
      ",".join(f"{q}{'*' if a_recv[q] else ''}" for q in mb) for mb in mbs) + "   (* grafted)")

  # Receiver A's update batch: own groups (w = 1) and grafted groups (source advantages, gate w).
  t = 6
  adv_rows = np.where(a_recv[:, None], adv_b, adv_a).reshape(-1)
  wts = np.ones(g * n, np.float32)
  keep_mask = np.ones((g * n, t), np.float32)
  graft_rows = (np.repeat(a_recv, n)).nonzero()[0]
  wts[graft_rows] = np.asarray(weight)
  keep_mask[graft_rows] *= np.asarray(admitted, np.float32)[:, None]  # dropped: leave denominator
  old = -1.0 + 0.1 * np.asarray(jax.random.normal(jax.random.fold_in(key, 2), (g * n, t)))
  for name, shift in (("at ratio 1", 0.0), ("after a move", 0.4)):
    logp = old + shift * np.sign(adv_rows)[:, None]
    loss, aux = core.clipped_token_loss(logp, old, adv_rows, wts, keep_mask)
    out.append(f"Loss {name}: {float(loss):+.4f}  clip low/high "
               f"{float(aux['clip_frac_low']):.2f}/{float(aux['clip_frac_high']):.2f}  "
               f"tokens {int(aux['token_count'])}")
  return "\n".join(out)
