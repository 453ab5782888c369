"""gpu_check's `step` and `sampler_window` sections: a whole GRAFT step on one device
against the plan's prediction for exactly that config and the path its engine takes
there, and the JAX sampler's decode at two cache windows.

step: the library's own run (`setup.build_trainer`, then `Trainer.run_step` per step),
GRAFT, 2 steps, two random-weight models written as HF folders with the toy
tokenizers: on a GPU Qwen3-1.7B's blocks and SmolLM3-3B's width with
``--step_smollm3_layers`` of its 36 layers (both fit one 80 GB GPU); with --dry tiny
models. The samplers are slot pools of one device's share (``rollout.sampler='pool'``,
64 slots), so the plan models the decode attention they really run (the live-span
kernel on a GPU, `graft_jax.plan.sampling_plan.pool_generate`). No checkpoint is
written (``Trainer.run`` would save the last step: 3 x the fp32 state of both models
on the machine's disk); each step's metrics row goes to ``DIR/step/metrics.jsonl`` as
it is done, where the driver and a reader find it if the section is cut short. The
reward is 0/1 from a hash of the response text (`hash_reward`), so groups are mixed
or all-fail and rows are exchanged. A random model stops at its EOS token about once
per vocabulary size of tokens, so lengths spread over every bucket below the cap.
Per phase (the trainer's ``time/...``), step 2 beside the plan (`graft_jax.plan.phases`,
fed the run's measured mean prompt and response lengths and share of rows with a
signal); step 1's compilations; the device's peak memory.

sampler_window: the same rows and live lengths decoded from caches of 1,024 and
4,608 slots (a prompt bucket of 512 + the new tokens'), XLA's decode attention:
whether a decode step's time follows the window, as the plan's JAX-sampler term says,
or the live tokens. The rows are as many as the larger window's KV holds in half the
device's pool.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pathlib
import statistics
import sys
import tempfile
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags
from flax import nnx

_STEP_PROMPTS = flags.DEFINE_integer("step_prompts", 16, "step: prompts per step")
_STEP_N = flags.DEFINE_integer("step_n", 8, "step: samples per prompt")
_STEP_CAP = flags.DEFINE_integer("step_cap", 1024, "step: max_response_len")
_STEP_LAYERS = flags.DEFINE_integer("step_smollm3_layers", 8, "step: SmolLM3-3B's layers kept "
                                    "(fp32 weights, moments and gradients of both: about 42 GB)")
_STEP_VOCAB = flags.DEFINE_integer("step_vocab", 1024, "step: each toy tokenizer's vocabulary")

DRY = dict(prompts=4, n=4, cap=32, vocab=300)
STEPS = 2
POOL_SLOTS = 64  # one device's share


def median_seconds(fn, reps: int = 3) -> float:
  """Median wall seconds of ``fn()`` (which blocks) after one warm-up call."""
  fn()
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return statistics.median(times)


def hash_reward(texts, golds):
  """1 for the responses whose SHA-256 starts with a byte under 32 (an eighth of them): a
  group of 8 fails whole about a third of the time, so groups are mixed or all-fail and
  a receiver's all-fail groups take the peer's rows. Deterministic."""
  del golds
  return np.array([hashlib.sha256(t.encode()).digest()[0] < 32 for t in texts], np.float32), None


def _sizes(dry: bool) -> dict:
  if dry:
    return dict(DRY)
  return dict(prompts=_STEP_PROMPTS.value, n=_STEP_N.value, cap=_STEP_CAP.value,
              vocab=_STEP_VOCAB.value)


def model_configs(dry: bool, toks: dict) -> dict:
  """{'a': SmolLM3-like, 'b': Qwen3-like} ModelConfigs at the toy tokenizers' vocabularies."""
  from graft_jax.models.config import ModelConfig  # pylint: disable=import-outside-toplevel
  if dry:
    a = ModelConfig(model_type="smollm3", vocab_size=0, hidden_size=48, intermediate_size=96,
                    num_layers=2, num_heads=4, num_kv_heads=2, head_dim=12,
                    tie_word_embeddings=True, use_rope_layers=(1, 0))
    b = ModelConfig(model_type="qwen3", vocab_size=0, hidden_size=64, intermediate_size=128,
                    num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, qk_norm=True,
                    tie_word_embeddings=True)
  else:
    full = ModelConfig.smollm3_3b()
    layers = _STEP_LAYERS.value
    a = dataclasses.replace(full, num_layers=layers, use_rope_layers=full.use_rope_layers[:layers])
    b = ModelConfig.qwen3_1p7b()
  out = {}
  for key, mc in (("a", a), ("b", b)):
    tok = toks[key]
    out[key] = dataclasses.replace(mc, vocab_size=len(tok), eos_token_ids=(tok.eos_token_id,),
                                   pad_token_id=tok.pad_token_id)
  return out


def write_models(root: pathlib.Path, dry: bool, problems) -> dict:
  """Two random-weight HF folders with the toy tokenizers; {key: (folder, ModelConfig)}."""
  from graft_jax.models import save_hf  # pylint: disable=import-outside-toplevel
  from graft_jax.models.decoder import init_model  # pylint: disable=import-outside-toplevel
  from graft_jax.toy.tokenizer import train_tokenizer  # pylint: disable=import-outside-toplevel
  texts = [p.problem + " " + p.answer for p in problems]
  vocab = _sizes(dry)["vocab"]
  toks = {"a": train_tokenizer(texts, "smollm3", vocab), "b": train_tokenizer(texts, "qwen3", vocab)}
  out = {}
  for i, (key, mc) in enumerate(model_configs(dry, toks).items()):
    model = init_model(mc, rngs=nnx.Rngs(i), param_dtype=jnp.bfloat16)
    out[key] = (save_hf(model, mc, toks[key], root / key), mc)
    del model
  return out


def step_config(workdir: pathlib.Path, folders: dict, dry: bool, mem_fraction: float):
  """The pair config's training settings at the check's sizes, GRAFT, the slot pool, no
  validation, no checkpoint, JAX's share of the device as this process was started with."""
  from configs import base  # pylint: disable=import-outside-toplevel
  from graft_jax.config import run_config as config_lib  # pylint: disable=import-outside-toplevel
  s = _sizes(dry)
  cd = config_lib.load_config("configs/pair_smollm3_qwen3.py:graft")
  with cd.unlocked():
    base.set_models(cd, [(str(folders["a"][0]), "smollm3_like"),
                         (str(folders["b"][0]), "qwen3_like")])
    cd.workdir = str(workdir)
    cd.data.source, cd.data.train_path = "synthetic", ""
    cd.data.synthetic.update(dict(families=("cadd", "cmul"), difficulty=2, num=4 * s["prompts"],
                                  seed=0))
    cd.prompts_per_step, cd.n, cd.max_response_len = s["prompts"], s["n"], s["cap"]
    cd.data.prompt_suffix = " Answer:"  # the toy's: the tokenizers were trained without MATH's
    # Dry: prompt + response within 128 tokens, the scorer's one length bucket.
    cd.max_prompt_len = 96 if dry else 128
    cd.total_steps, cd.eval.every_steps = STEPS, 0
    cd.rollout.update(dict(sampler="pool", pool_slots=8 if dry else POOL_SLOTS))
    cd.checkpoint.update(dict(every_steps=0, resume=False, export_hf=False))
    cd.xla_mem_fraction = mem_fraction  # the trainer keeps the share JAX started with
    cd.logging.update(dict(tensorboard=False, progress_bar=False, peer_log=False))
    if dry:
      cd.perf.update(dict(micro_batch_tokens=256, remat="none", attention_impl="dense"))
  return config_lib.from_config_dict(cd)


def measured_phases(rows, names) -> dict:
  """Per phase of `graft_jax.plan.phases.PHASE_TIMINGS`, the mean over ``rows`` of the
  trainer's seconds, summed over the models (the JAX samplers take turns)."""
  from graft_jax.plan import phases  # pylint: disable=import-outside-toplevel
  out = {}
  for phase in phases.STEP_PHASES:
    per_row = [sum(r.get(f"time/{pat.format(m=m)}", 0.0) for pat in phases.PHASE_TIMINGS[phase]
                   for m in (names if "{m}" in pat else names[:1])) for r in rows]
    out[phase] = statistics.mean(per_row)
  out["step"] = statistics.mean(r["time/step_s"] for r in rows)
  return out


def step_section(out: dict, *, dry: bool, peak_tflops: float, hbm_tbps: float,
                 mem_fraction: float) -> None:
  """A 2-step GRAFT run and the plan's prediction of it (module docstring); one line and
  ``out['step'] = {'error': ...}`` if it fails."""
  try:
    out["step"] = run_and_predict(out, dry, peak_tflops, hbm_tbps, mem_fraction)
    print_table(out["step"])
  except Exception as e:  # pylint: disable=broad-except
    out["step"] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
    print(f"step: failed: {out['step']['error']}", flush=True)
    traceback.print_exc(file=sys.stderr)


def run_and_predict(out: dict, dry: bool, peak_tflops: float, hbm_tbps: float,
                    mem_fraction: float) -> dict:
  from graft_jax import data  # pylint: disable=import-outside-toplevel
  from graft_jax.outputs import metrics_writer  # pylint: disable=import-outside-toplevel
  from graft_jax.train import setup  # pylint: disable=import-outside-toplevel

  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    root = pathlib.Path(tmp)
    # The tokenizers' training text: both families the run draws from.
    problems = [p for family in ("cadd", "cmul")
                for p in data.make_synthetic(family, 512, seed=0, difficulty=2)]
    folders = write_models(root / "models", dry, problems)
    cfg = step_config(root / "run", folders, dry, mem_fraction)
    trainer = setup.build_trainer(cfg, reward_fn=hash_reward)
    try:
      prompt_lengths = [len(p.prompt_ids(q.problem)) for p in trainer.policies.values()
                        for q in trainer.stream.problems]
      with metrics_writer.MetricsWriter(pathlib.Path(out.path).parent / "step",
                                        tensorboard=False, progress_bar=False) as writer:
        for step in range(STEPS):
          rows.append(writer.write(step, trainer.run_step()))
          out[f"step/row{step}"] = {k: v for k, v in rows[-1].items() if k.startswith("time/")}
          print(f"step {step + 1}: {rows[-1]['time/step_s']:.1f} s", flush=True)
      live = all(p.engine.decode_attention == "live" for p in trainer.policies.values())
    finally:
      trainer.close()
  names = list(trainer.policies)
  peak = (jax.devices()[0].memory_stats() or {}).get("peak_bytes_in_use")
  return {"measured": measured_phases(rows[1:], names),
          "predicted": predict(cfg, folders, rows, names, prompt_lengths, peak_tflops, hbm_tbps,
                               live),
          "live_decode": live, "compiles_step1": rows[0]["time/compiles"],
          "compile_s_step1": rows[0]["time/compile_s"], "peak_bytes": peak}


def predict(cfg, folders, rows, names, prompt_lengths, peak_tflops, hbm_tbps, live) -> dict:
  """The plan's per-phase seconds for this run, from its measured lengths and signal, with
  the pool's decode attention as the run chose it (``live``)."""
  from graft_jax.plan import phases, step_time  # pylint: disable=import-outside-toplevel
  from graft_jax.plan.lengths import ResponseLengths  # pylint: disable=import-outside-toplevel
  mean = statistics.mean(r[f"{m}/response_len"] for r in rows for m in names)
  rows_run = statistics.mean(r[f"{m}/update/rows_run"] for r in rows for m in names)
  offered = statistics.mean(r.get(f"{m}/exchange/peer_offered", 0) for r in rows for m in names)
  total = cfg.prompts_per_step * cfg.n
  # A random model stops with a constant chance per token: geometric lengths (shape 1).
  lengths = ResponseLengths(cfg.max_response_len, min(max(mean, 1.0), cfg.max_response_len - 1),
                            1.0)
  a = phases.Assumptions(lengths=lengths, prompt_mean=float(np.mean(prompt_lengths)),
                         prompt_longest=int(np.max(prompt_lengths)),
                         exchange_fraction=offered / total, signal_fraction=rows_run / total,
                         device_bytes=float((jax.devices()[0].memory_stats() or {}).get(
                             "bytes_limit", 80e9)))
  rates = dataclasses.replace(step_time.MEASURED_H200, peak_flops=peak_tflops * 1e12,
                              hbm_bytes_per_s=hbm_tbps * 1e12)
  models = {name: folders[key][1] for name, key in zip(names, "ab")}
  plan = phases.plan_engine(cfg, models, "jax", 1, rates, a, STEPS, live_decode=live)
  got = {p: plan.phase_seconds(p) for p in phases.STEP_PHASES}
  got["step"] = plan.step_seconds
  got["compile"] = plan.run_terms["compile"].seconds
  got["response_mean"], got["signal_fraction"] = lengths.expected(), rows_run / total
  return got


def print_table(got: dict) -> None:
  measured, predicted = got["measured"], got["predicted"]
  print(f"step: {STEPS} GRAFT steps, responses {predicted['response_mean']:.0f} tokens on "
        f"average, {predicted['signal_fraction']:.0%} of rows with a signal, the pool's decode "
        f"attention {'live-span' if got['live_decode'] else 'XLA whole-window'} in both; "
        f"step 2:")
  print(f"  {'phase':<12}{'measured s':>12}{'plan s':>12}{'ratio':>10}")
  for phase, value in measured.items():
    want = predicted[phase]
    print(f"  {phase:<12}{value:>12.3g}{want:>12.3g}"
          f"{value / want if want else float('inf'):>10.3g}")
  print(f"  step 1: {got['compiles_step1']} compilations, {got['compile_s_step1']:.1f} s "
        f"(plan: {predicted['compile']:.0f} s)")
  peak = got["peak_bytes"]
  print(f"  device peak memory: {'n/a' if peak is None else f'{peak / 2**30:.2f} GiB'}")


def sampler_window_section(out: dict, *, dry: bool, device_bytes=None) -> None:
  """Seconds per decode step of the same rows and live lengths at two cache windows; one
  line and ``out['sampler_window'] = {'error': ...}`` if it fails."""
  try:
    decode_at_two_windows(out, dry=dry, device_bytes=device_bytes)
  except Exception as e:  # pylint: disable=broad-except
    out["sampler_window"] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
    print(f"sampler_window: failed: {out['sampler_window']['error']}")
    traceback.print_exc(file=sys.stderr)


def decode_at_two_windows(out: dict, *, dry: bool, device_bytes=None) -> None:
  from graft_jax.models.config import ModelConfig  # pylint: disable=import-outside-toplevel
  from graft_jax.models.decoder import init_model  # pylint: disable=import-outside-toplevel
  from graft_jax.rollout.sampler import generate_padded  # pylint: disable=import-outside-toplevel

  if dry:
    cfg = ModelConfig(model_type="qwen3", vocab_size=512, hidden_size=64, intermediate_size=128,
                      num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, qk_norm=True,
                      tie_word_embeddings=True)
    prompts, n, prompt_len, new, windows = 2, 4, 8, 32, (64, 256)  # 16 + 48 and 16 + 240
  else:
    cfg = ModelConfig.qwen3_1p7b()
    prompts, n, prompt_len, new, windows = 16, 8, 16, 512, (1024, 4608)  # 512 + 512, 512 + 4,096
    if device_bytes:  # the larger window's KV in half the device's pool
      from graft_jax.plan import costs  # pylint: disable=import-outside-toplevel
      per_prompt = n * windows[1] * costs.kv_bytes_per_position(cfg, 2)
      prompts = int(max(1, min(prompts, device_bytes // 2 // per_prompt)))
  model = init_model(cfg, rngs=nnx.Rngs(0), param_dtype=jnp.bfloat16, dtype=jnp.bfloat16)
  model.set_memory_options(scan_layers=False, attention="auto")
  graphdef, state = nnx.split(model)
  # Every row: the same prompt_len real tokens left-padded to `width` slots, then `new`
  # decoded tokens; the windows differ only in the new-token slots allocated (max_new).
  width = 16 if dry else 512
  rng = np.random.default_rng(4)
  ids = np.zeros((prompts, width), np.int32)
  ids[:, -prompt_len:] = rng.integers(3, cfg.vocab_size, (prompts, prompt_len))
  mask = np.arange(width)[None].repeat(prompts, 0) >= width - prompt_len
  per_window = {}
  for window in windows:
    def call(steps, max_new=window - width):
      return jax.block_until_ready(generate_padded(
          graphdef, state, ids, mask, np.ones(prompts, bool), jax.random.key(0),
          jnp.int32(steps), jnp.float32(1.0), jnp.float32(1.0), n=n, max_new=max_new,
          eos_ids=(cfg.vocab_size + 1,), pad_id=0, greedy=False, top_k=0, use_top_p=False))
    # Prefill and one step taken off (``steps`` = 1): the difference is the decode loop.
    full, one = (median_seconds(lambda k=k: call(k)) for k in (new, 1))
    per_window[window] = (full - one) / (new - 1)
    out[f"sampler_window/{window}"] = {"seconds_per_step": per_window[window],
                                       "rows": prompts * n, "live_tokens": prompt_len + new,
                                       "slots": window}
    print(f"sampler_window: {prompts * n} rows, {new} decode steps, {window} slots: "
          f"{1e3 * per_window[window]:.2f} ms per step")
  small, large = windows
  out["sampler_window/ratio"] = per_window[large] / per_window[small]
  print(f"sampler_window: {large} / {small} slots: {out['sampler_window/ratio']:.2f}x the time "
        f"per step (the window's ratio {large / small:.2f}x; the live tokens' 1.00x)")
