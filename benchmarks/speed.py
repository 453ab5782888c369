"""The JAX half of the side-by-side speed benchmark (``benchmarks/bench_vs_trl.py``).

The model: Qwen3 architecture, hidden 256, 4 layers, 4 heads / 2 KV heads,
head_dim 64, intermediate 768, tied embeddings, a 1,024-token byte-level BPE
trained here on the prompts' text: 3.41M parameters, fp32, random weights
from a seed, written as a Hugging Face folder that every engine loads. The
work: arithmetic prompts ("What is 417 * 38? Put the final answer in
\\boxed{}."), n = 8 samples each, up to 64 new tokens at T = 1, the clipped
token-mean loss (0.2 / 0.28), one AdamW update per step (lr 1e-6), and an
exact-match reward on the boxed answer.
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graft_jax.data.problem import Problem
from graft_jax.models import ModelConfig, init_model, load_hf, load_tokenizer, save_hf
from graft_jax.config import run_config as config_lib
from graft_jax.train.policy import make_policy
from graft_jax.train.step import train_step

SUFFIX = " Put the final answer in \\boxed{}."


def bench_model_config(vocab_size: int, eos_id: int, pad_id: int) -> ModelConfig:
  return ModelConfig(model_type="qwen3", vocab_size=vocab_size, hidden_size=256,
                     intermediate_size=768, num_layers=4, num_heads=4, num_kv_heads=2,
                     head_dim=64, qk_norm=True, tie_word_embeddings=True,
                     max_position_embeddings=512, eos_token_ids=(eos_id,), pad_token_id=pad_id)


def arithmetic_problems(num: int, seed: int = 0) -> list[Problem]:
  """``num`` problems "What is a op b?" with a, b in 1..999 and op in + - *."""
  rng = random.Random(seed)
  out = []
  for i in range(num):
    a, b, op = rng.randint(1, 999), rng.randint(1, 999), rng.choice("+-*")
    answer = {"+": a + b, "-": a - b, "*": a * b}[op]
    out.append(Problem(id=f"bench-{seed}-{i}", problem=f"What is {a} {op} {b}?",
                       answer=str(answer), source="bench"))
  return out


def boxed_reward(texts, golds):
  """1 where the response contains ``\\boxed{gold}`` exactly; ``(rewards, None)``."""
  return [float(f"\\boxed{{{g}}}" in t) for t, g in zip(texts, golds)], None


def train_tokenizer(texts, vocab_size: int = 1024):
  """A byte-level BPE of ``vocab_size`` tokens trained on ``texts`` (eos, pad specials)."""
  import transformers
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  tok.train_from_iterator(texts, trainers.BpeTrainer(
      vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|pad|>"], show_progress=False,
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
  return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                              pad_token="<|pad|>")


def write_bench_model(folder, *, seed: int = 0, vocab_size: int = 1024):
  """Trains the tokenizer and writes the random model to ``folder`` (HF format)."""
  texts = [f"{p.problem}{SUFFIX} The answer is \\boxed{{{p.answer}}}."
           for p in arithmetic_problems(4000, seed=10_000 + seed)]
  tok = train_tokenizer(texts, vocab_size)
  cfg = bench_model_config(len(tok), tok.eos_token_id, tok.pad_token_id)
  save_hf(init_model(cfg, rngs=nnx.Rngs(seed)), cfg, tok, folder)
  return folder


def grpo_config(max_prompt_len: int, *, new_tokens: int = 64, prompts: int = 16, n: int = 8,
                micro_batch_tokens: int = 0, skip_silent_rows: bool = False,
                sampler_streams: int = 0):
  """The benchmark's GRPO run: one update per step, fp32, the paper's clip and AdamW.

  The gradient is accumulated over micro-batches of ``micro_batch_tokens``
  (rows x padded length): one optimizer step either way.
  Every row runs (``skip_silent_rows`` off): the random model earns no reward, so
  every group is silent and skipping would leave no update to compare with TRL's.
  ``micro_batch_tokens`` and ``sampler_streams`` are the config's
  ``perf.micro_batch_tokens`` and ``perf.sampler_streams`` (0: the backend's choice, as
  in a training run).
  """
  return config_lib.from_config_dict(dict(
      method="grpo", prompts_per_step=prompts, n=n, num_minibatches=1, ppo_epochs=1,
      max_prompt_len=max_prompt_len, max_response_len=new_tokens, dtype="float32",
      skip_silent_rows=skip_silent_rows,
      perf=dict(micro_batch_tokens=micro_batch_tokens, sampler_streams=sampler_streams),
      optimizer=dict(lr=1e-6),
      data=dict(prompt_suffix=SUFFIX)))


@dataclasses.dataclass
class JaxSide:
  """One GRPO policy on the benchmark folder; ``step`` runs and times one training step."""

  cfg: object
  policy: object
  problems: list
  longest_row: int = 0  # prompt + response tokens of the last step's longest row

  @classmethod
  def load(cls, folder, problems, **kw):
    tok = load_tokenizer(folder)
    longest = max(len(tok.encode(p.problem + SUFFIX, add_special_tokens=False)) for p in problems)
    cfg = grpo_config(longest, **kw)
    model, _ = load_hf(folder)
    return cls(cfg, make_policy("jax", model, tok, cfg.optimizer, SUFFIX,
                                  sampler_streams=cfg.perf.sampler_streams), problems)

  def step(self, index: int) -> dict:
    """Step ``index`` on problems [index * G, (index + 1) * G): seconds per phase."""
    g = self.cfg.prompts_per_step
    t0 = time.perf_counter()
    metrics, rolls = train_step(self.cfg, {"jax": self.policy},
                                self.problems[index * g:(index + 1) * g], boxed_reward, index,
                                jax.random.fold_in(jax.random.key(0), index))
    roll, t = rolls["jax"], metrics["time"]
    self.longest_row = max(len(roll.prompt_ids[b // roll.n]) + len(r)
                           for b, r in enumerate(roll.response_ids))
    return {"generate": t["jax/sample_s"], "old_logp": t["jax/old_logp_s"],
            "update": t["jax/update_s"], "reward": t["jax/reward_s"],
            "step": time.perf_counter() - t0}

  def update_batch(self):
    """A host minibatch of the shape the last step's update had (G x n rows of its
    length), as the method's loss reads it; and that loss."""
    from graft_jax.models.logprobs import bucket_length
    from graft_jax.train import methods
    from graft_jax.train.update_rows import Rows, typed_batch

    cfg, rows = self.cfg, Rows()
    for q in range(cfg.prompts_per_step * cfg.n):
      rows.add([1], [1] * (self.longest_row - 1), q // cfg.n,
               old_logp=np.zeros(self.longest_row - 1))
    length = bucket_length(self.longest_row, cfg.max_prompt_len + cfg.max_response_len)
    loss = methods.make(cfg).loss_fn
    return typed_batch(loss.Batch, rows, range(len(rows)), self.policy.pad_id,
                       multiple=length), loss

  def update_program(self, micro: bool):
    """(the compiled gradient program of one minibatch, its arguments): every row in
    one micro-batch, or micro-batches of the run's budget (``perf.micro_batch_tokens``)."""
    from graft_jax.packing import length_packing
    from graft_jax.train.update import micro_batch_budget, update_program

    p, (batch, loss) = self.policy, self.update_batch()
    b, length = batch.ids.shape
    budget = micro_batch_budget(self.cfg.perf.micro_batch_tokens) if micro else 0
    rows = min(max(1, budget // length), b) if budget else b
    slots = -(-b // rows)
    (grads, _), _ = update_program(p.graphdef, p.params, p.tx, loss, rows=rows, length=length,
                                   slots=slots)
    stack = length_packing.stack_micro_batches(
        (batch, np.zeros(b, np.float32)), [np.arange(i * rows, min(b, (i + 1) * rows)) for i in range(slots)], rows,
        length, slots)
    scalars = {k: np.full(slots, v, np.float32) for k, v in loss.totals(batch).items()}
    scalars["share"] = np.full(slots, 1 / slots, np.float32)
    acc = jax.tree.map(lambda x: np.zeros(x.shape, np.float32), p.params)
    args = (p.params, acc, stack, scalars, np.int32(slots), np.int32(0))
    return grads.lower(*args).compile(), args

  def update_flops(self) -> float:
    """XLA's FLOP count of the gradient of the whole minibatch the last step's shape needs."""
    compiled, _ = self.update_program(micro=False)
    return float(compiled.cost_analysis()["flops"])


def matmul_flops_per_s(size: int = 2048, repeats: int = 5) -> float:
  """Measured f32 FLOP/s of a ``size``-cubed matmul in XLA (best of ``repeats``)."""
  a = jnp.asarray(np.random.default_rng(0).standard_normal((size, size), np.float32))
  f = jax.jit(lambda x, y: x @ y)
  f(a, a).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    t = time.perf_counter()
    f(a, a).block_until_ready()
    best = min(best, time.perf_counter() - t)
  return 2 * size ** 3 / best


def read_bytes_per_s(gib: float = 1.0, repeats: int = 5) -> float:
  """Measured bytes/s of summing a ``gib``-GiB fp32 array in XLA (best of ``repeats``):
  the rate at which a decode step can read its KV cache from memory."""
  x = jnp.ones((int(gib * 2 ** 28),), jnp.float32)
  f = jax.jit(jnp.sum)
  f(x).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    t = time.perf_counter()
    f(x).block_until_ready()
    best = min(best, time.perf_counter() - t)
  return x.nbytes / best


def sampler_floor(cfg: ModelConfig, rows: int, prompt_len: int, new_tokens: int,
                  flops_per_s: float, bytes_per_s: float) -> dict:
  """A lower bound on the seconds of one JAX sampler call of ``rows`` x ``new_tokens``
  (prompts left-padded to ``prompt_len``), from its two unavoidable costs:

  - projection matmuls, 2 x (per-layer projection weights x layers + V x D) FLOPs
    per token, at ``flops_per_s`` (the f32 matmul ceiling);
  - attention reading the KV cache: step i (from 0) reads the slots filled by
    then, rows x layers x 2 x K x H x (prompt_len + i + 1) fp32 values, at
    ``bytes_per_s`` (the CPU kernel reads each row's live span, about that;
    XLA's decode attention reads the whole cache, allocated once per call).

  The prefill, norms, RoPE, softmax, sampling and cache writes are left out, so
  the real call is slower. Returns {'matmul_s', 'kv_bytes', 'kv_s', 'floor_s'}.
  """
  from graft_jax.rollout.kv_budget import kv_bytes_per_row

  d, hd = cfg.hidden_size, cfg.head_dim
  per_layer = (d * cfg.num_heads * hd * 2 + d * cfg.num_kv_heads * hd * 2
               + 3 * d * cfg.intermediate_size)
  flops = 2 * (per_layer * cfg.num_layers + cfg.vocab_size * d) * rows * new_tokens
  per_slot = rows * kv_bytes_per_row(cfg, slots=1, itemsize=4)
  kv_bytes = per_slot * (new_tokens * prompt_len + new_tokens * (new_tokens + 1) // 2)
  out = {"matmul_s": flops / flops_per_s, "kv_bytes": kv_bytes, "kv_s": kv_bytes / bytes_per_s}
  out["floor_s"] = out["matmul_s"] + out["kv_s"]
  return out


def median_of(rows: list[dict], key: str) -> float:
  return statistics.median(r[key] for r in rows)
