"""The torch half of `benchmarks/bench_vs_trl.py`: TRL's GRPOTrainer with per-phase clocks,
transformers `generate`, and a torch matmul. Needs the `bench` extra (trl, torch)."""

from __future__ import annotations

import collections
import statistics
import time

import torch
import transformers
import trl

from benchmarks import speed


class ClockedGRPO(trl.GRPOTrainer):
  """GRPOTrainer that adds up the seconds of its phases into ``clock`` (reset per step)."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.clock = collections.defaultdict(float)

  def _clocked(self, key, fn, *args, **kwargs):
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    self.clock[key] += time.perf_counter() - t
    return out

  def _generate_single_turn(self, *args, **kwargs):
    return self._clocked("generate", super()._generate_single_turn, *args, **kwargs)

  def _calculate_rewards(self, *args, **kwargs):
    return self._clocked("reward", super()._calculate_rewards, *args, **kwargs)

  def _prepare_inputs(self, *args, **kwargs):
    return self._clocked("prepare", super()._prepare_inputs, *args, **kwargs)

  def compute_loss(self, *args, **kwargs):
    return self._clocked("loss_fwd", super().compute_loss, *args, **kwargs)


class Alternate(transformers.TrainerCallback):
  """Times each TRL step (begin to end, optimizer included), then runs ``between(step)``."""

  def __init__(self, trainer_ref: list, between):
    self.trainer_ref, self.between, self.rows = trainer_ref, between, []

  def on_step_begin(self, args, state, control, **kwargs):
    self.trainer_ref[0].clock.clear()
    self.t0 = time.perf_counter()

  def on_step_end(self, args, state, control, **kwargs):
    step_s = time.perf_counter() - self.t0
    c = dict(self.trainer_ref[0].clock)
    prep = c.get("prepare", 0.0)
    self.rows.append({"generate": c.get("generate", 0.0), "reward": c.get("reward", 0.0),
                      "loss_fwd": c.get("loss_fwd", 0.0),
                      "bwd_opt": step_s - prep - c.get("loss_fwd", 0.0),
                      "other_prep": prep - c.get("generate", 0.0) - c.get("reward", 0.0),
                      "step": step_s})
    self.between(state.global_step - 1)


def run_trl(folder, problems, *, steps: int, between, out_dir, new_tokens: int = 64,
            prompts: int = 16, n: int = 8) -> list[dict]:
  """``steps`` GRPO steps of TRL on ``problems`` in order (``prompts`` per step), calling
  ``between(step)`` after each; returns each step's seconds per phase."""
  import datasets

  tok = transformers.AutoTokenizer.from_pretrained(folder)
  model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
  data = datasets.Dataset.from_list([{"prompt": p.problem + speed.SUFFIX, "answer": p.answer}
                                     for p in problems[:steps * prompts]])

  def reward(prompts, completions, answer, **kwargs):
    return speed.boxed_reward(completions, answer)[0]

  args = trl.GRPOConfig(
      output_dir=str(out_dir), per_device_train_batch_size=prompts * n, num_generations=n,
      max_completion_length=new_tokens, temperature=1.0, top_p=1.0, top_k=0, beta=0.0,
      epsilon=0.2, epsilon_high=0.28, loss_type="dapo", num_iterations=1, learning_rate=1e-6,
      lr_scheduler_type="constant", weight_decay=0.01, max_grad_norm=1.0, max_steps=steps,
      shuffle_dataset=False, use_cpu=True, bf16=False, report_to="none", save_strategy="no",
      logging_steps=10 ** 6, disable_tqdm=True, seed=0)
  ref: list = [None]
  clock = Alternate(ref, between)
  trainer = ClockedGRPO(model=model, reward_funcs=[reward], args=args, train_dataset=data,
                        processing_class=tok, callbacks=[clock])
  ref[0] = trainer
  trainer.train()
  return clock.rows


class HfSampler:
  """transformers ``generate`` on left-padded prompts, EOS off: ``__call__(seed) -> seconds``."""

  def __init__(self, folder, prompt_ids, n: int, new_tokens: int, pad_id: int):
    self.model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    self.model.eval()
    width = max(map(len, prompt_ids))
    self.ids = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in prompt_ids])
    self.mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids])
    self.kw = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, num_return_sequences=n,
                   max_new_tokens=new_tokens, min_new_tokens=new_tokens, eos_token_id=None,
                   pad_token_id=pad_id)
    with torch.no_grad():  # warm-up
      self.model.generate(self.ids[:2], attention_mask=self.mask[:2],
                          **dict(self.kw, max_new_tokens=4, min_new_tokens=4))

  def __call__(self, seed: int) -> float:
    torch.manual_seed(seed)
    t = time.perf_counter()
    with torch.no_grad():
      self.model.generate(self.ids, attention_mask=self.mask, **self.kw)
    return time.perf_counter() - t


def torch_matmul_flops_per_s(size: int = 2048, repeats: int = 5) -> float:
  a = torch.randn(size, size)
  a @ a
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    a @ a
    times.append(time.perf_counter() - t)
  return 2 * size ** 3 / min(times)


def median_s(times) -> float:
  return statistics.median(times)
