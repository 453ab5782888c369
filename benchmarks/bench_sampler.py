"""Tokens/s of the JAX sampler vs transformers `generate` (torch CPU) on one tiny model.

Both sample (T=1, no top-k/top-p) the same random Llama-architecture weights,
64 prompts x n=8 x 128 new tokens with EOS disabled, so both produce exactly
the same number of tokens. Prints medians and the ratio.

  .venv/bin/python benchmarks/bench_sampler.py [--hidden 256 --layers 4 --repeats 3]
"""

import argparse
import os
import platform
import statistics
import tempfile
import time

import numpy as np
import torch
import transformers

from graft_jax.models import load_hf
from graft_jax.rollout import JaxSamplerEngine, SamplingParams


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--hidden", type=int, default=256)
  ap.add_argument("--layers", type=int, default=4)
  ap.add_argument("--vocab", type=int, default=8192)
  ap.add_argument("--prompts", type=int, default=64)
  ap.add_argument("--n", type=int, default=8)
  ap.add_argument("--new_tokens", type=int, default=128)
  ap.add_argument("--repeats", type=int, default=3)
  args = ap.parse_args()

  torch.manual_seed(0)
  hf_cfg = transformers.LlamaConfig(
      vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=3 * args.hidden,
      num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=2,
      max_position_embeddings=1024, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
  hf_model = transformers.LlamaForCausalLM(hf_cfg).eval()
  rng = np.random.default_rng(0)
  prompts = [rng.integers(3, args.vocab, rng.integers(16, 33)).tolist()
             for _ in range(args.prompts)]
  total = args.prompts * args.n * args.new_tokens

  with tempfile.TemporaryDirectory() as d:
    hf_model.save_pretrained(d)
    model, _ = load_hf(d)
  # EOS -1 never matches: every row runs the full budget, as on the torch side.
  engine = JaxSamplerEngine(model, eos_ids=[-1], pad_id=0)
  params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0)
  engine.generate(prompts, args.n, params)  # compile
  jax_s = []
  for seed in range(args.repeats):
    t = time.perf_counter()
    out = engine.generate(prompts, args.n, SamplingParams(
        max_new_tokens=args.new_tokens, temperature=1.0, seed=seed))
    jax_s.append(time.perf_counter() - t)
    assert int(out.mask_BxL.sum()) == total

  width = max(map(len, prompts))
  ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
  mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
  gen_kw = dict(attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                num_return_sequences=args.n, max_new_tokens=args.new_tokens,
                min_new_tokens=args.new_tokens, eos_token_id=None, pad_token_id=0)
  torch_s = []
  with torch.no_grad():
    hf_model.generate(ids[:2], **dict(gen_kw, attention_mask=mask[:2], max_new_tokens=4,
                                      min_new_tokens=4))  # warm-up
    for _ in range(args.repeats):
      t = time.perf_counter()
      seqs = hf_model.generate(ids, **gen_kw)
      torch_s.append(time.perf_counter() - t)
      assert seqs.shape == (args.prompts * args.n, width + args.new_tokens)

  jax_tps = total / statistics.median(jax_s)
  torch_tps = total / statistics.median(torch_s)
  print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"torch threads {torch.get_num_threads()}")
  print(f"model: llama hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}; "
        f"batch {args.prompts} x n {args.n}, {args.new_tokens} new tokens, fp32")
  print(f"jax sampler:            {jax_tps:10.0f} tok/s  (median of {args.repeats}: "
        f"{statistics.median(jax_s):.2f} s)")
  print(f"transformers generate:  {torch_tps:10.0f} tok/s  (median of {args.repeats}: "
        f"{statistics.median(torch_s):.2f} s)")
  print(f"ratio jax / transformers: {jax_tps / torch_tps:.2f}x")


if __name__ == "__main__":
  main()
