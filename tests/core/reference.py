"""Independent float64 NumPy / pure-Python references for the core math tests.

Written from the paper's equations (arXiv 2609.37868, restated in graft_jax.core's
docstrings) directly, loop by loop, without calling graft_jax.
"""

import numpy as np


def grpo_adv(rewards, scale_by_std=True, eps=1e-6):
  r = np.asarray(rewards, np.float64)
  out = np.zeros_like(r)
  for g in range(r.shape[0]):
    mu = r[g].mean()
    sd = r[g].std(ddof=1)
    out[g] = (r[g] - mu) / (sd + eps) if scale_by_std else r[g] - mu
  return out


def exchange(k_a, k_b, n, balance=True):
  """Selection by explicit sorting and counting."""
  k_a, k_b = list(map(int, k_a)), list(map(int, k_b))
  cand_a = [q for q in range(len(k_a)) if k_a[q] == 0 and 1 <= k_b[q] <= n - 1]
  cand_b = [q for q in range(len(k_a)) if k_b[q] == 0 and 1 <= k_a[q] <= n - 1]
  if not balance:
    keep_a, keep_b = set(cand_a), set(cand_b)
  else:
    m = min(len(cand_a), len(cand_b))

    def keep(cands, k_src):
      if m == 0:
        return set()
      ranked = sorted(cands, key=lambda q: -k_src[q])
      cutoff = k_src[ranked[m - 1]]
      return {q for q in cands if k_src[q] >= cutoff}

    keep_a, keep_b = keep(cand_a, k_b), keep(cand_b, k_a)
  a = np.array([q in keep_a for q in range(len(k_a))])
  b = np.array([q in keep_b for q in range(len(k_a))])
  return a, b


def token_loss(logp, old, adv, w, mask, clip_low=0.2, clip_high=0.28, sequence=False):
  logp, old, mask = (np.asarray(x, np.float64) for x in (logp, old, mask))
  total, count = 0.0, 0.0
  for j in range(logp.shape[0]):
    toks = [t for t in range(logp.shape[1]) if mask[j, t] > 0]
    seq_lr = np.mean([logp[j, t] - old[j, t] for t in toks]) if toks else 0.0
    for t in toks:
      lr = seq_lr if sequence else logp[j, t] - old[j, t]
      rho = np.exp(lr)
      obj = min(rho * adv[j], np.clip(rho, 1 - clip_low, 1 + clip_high) * adv[j])
      total += w[j] * obj
      count += 1
  return -total / max(count, 1.0)
