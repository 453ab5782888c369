"""The training run: set-up from a ``TrainConfig``, the step loop, logging, checkpoints and exact resume.

A run's key for step ``s`` is ``fold_in(key(seed), s)`` and its prompts are a
pure function of the stream position, so restoring (params, optimizer
states, position, the method's state) continues the same run exactly.

Nothing is acknowledged before it is durable: a step's peer logs and its
metrics row (validation included) are on disk before the checkpoint covering
the step commits, and a resumed run drops whatever an interrupted attempt
wrote after its checkpoint, then writes it again.

SIGTERM, SIGINT and SIGUSR1 stop a run cleanly (``graft_jax.preemption``):
the step in flight finishes (or, before its update or in a fresh run, is abandoned),
the last completed step is saved, and ``run`` raises ``preemption.Stopped``.
"""

from __future__ import annotations

import copy
import logging
import pathlib
import time

import jax
import numpy as np

from graft_jax import distributed, preemption
from graft_jax.config import checks as config_checks
from graft_jax.config import run_config as config_lib
from graft_jax.outputs import metrics_file, peer_log, progress, storage, workdir_runs
from graft_jax.train import methods, run_inputs
from graft_jax.outputs.checkpoint import Checkpointer
from graft_jax.train.data_stream import PromptStream
from graft_jax.outputs.metrics_writer import MetricsWriter
from graft_jax.train.policy import PoolSettings, make_policy
from graft_jax.train.step import train_step

log = logging.getLogger(__name__)


def _flat(state):
  return {str(i): leaf for i, leaf in enumerate(jax.tree.leaves(state))}


def _unflat(flat, like):
  leaves = [flat[str(i)] for i in range(len(flat))]
  return jax.tree.unflatten(jax.tree.structure(like), leaves)


def config_reward(cfg, pool=None):
  """The reward ``reward.kind`` names (``graft_jax.rewards.make_reward``), ``(texts, golds) ->
  (rewards, stats)``; math-verify runs on ``pool`` (default: the shared one)."""
  from graft_jax import rewards
  return rewards.make_reward(cfg.reward.kind, timeout_s=cfg.reward.timeout_s, pool=pool)


def make_reward_pool(cfg):
  """A verifier pool of ``reward.num_workers`` processes; None when ``reward.kind`` needs none."""
  from graft_jax import rewards
  if not rewards.uses_verifier_pool(cfg.reward.kind):
    return None
  return rewards.VerifierPool(cfg.reward.num_workers)


class Trainer:
  """Owns the policies, the prompt stream, the reward, and everything the run writes.

  Args:
    cfg: a validated ``TrainConfig``.
    problems: the training problems (objects with ``id``, ``problem``, ``answer``).
    models: ``{key: (decoder, tokenizer)}`` in the config's order
      (``config.policy_configs``: ``models``, or A then B). GRPO may have
      one; replay trains the first from the second's logs.
    reward_fn: ``(texts, golds) -> (rewards, stats)``; by default the one
      ``reward.kind`` names.
    mesh: optional device mesh; parameters and minibatches are sharded on it.
    validator: optional ``graft_jax.train.validation.Validator``; its held-out
      pass@1 goes into the step's metrics as ``<name>/eval/...`` when due.
    data_counts: what loading the problems set aside, by reason
      (``graft_jax.train.run_inputs``); written into every metrics row as
      ``data/...`` with the prompts skipped here for ``max_prompt_len``.
    reward_pool: a verifier pool the trainer owns and closes; without a
      ``reward_fn``, the math-verify reward runs on it (by default a new pool
      of ``reward.num_workers`` processes).
  """

  def __init__(self, cfg, problems, models: dict, reward_fn=None, mesh=None, validator=None,
               data_counts=None, reward_pool=None):
    self.cfg = cfg
    self.workdir = pathlib.Path(cfg.workdir)
    self.workdir.mkdir(parents=True, exist_ok=True)
    workdir_runs.claim(cfg)  # resume=False: refuses (or moves aside) another run here
    self._owned = []  # closed by close(), last first
    if reward_fn is None and reward_pool is None:
      reward_pool = make_reward_pool(cfg)
    if reward_pool is not None:
      self.own(reward_pool)
    self.reward_fn = config_reward(cfg, reward_pool) if reward_fn is None else reward_fn
    # Models come in the config's order; its names key logs, metrics and checkpoints.
    names = [m.name for m in config_checks.policy_configs(cfg)]
    if len(models) > len(names):
      raise ValueError(f"Trainer got {len(models)} models but the config names {len(names)} "
                       f"({', '.join(names)}); list them all in models")
    names = names[:len(models)]
    models = dict(zip(names, models.values()))
    self.method = methods.make(cfg)
    trained = self.method.trained(names)
    self.policies = {
        name: make_policy(name, models[name][0], models[name][1], cfg.optimizer,
                          cfg.data.prompt_suffix, keep_reference=self.method.keeps_reference,
                          mesh=mesh, sampler_streams=cfg.perf.sampler_streams,
                          pool=PoolSettings.from_config(cfg))
        for name in trained}
    self.data_counts = dict(data_counts or {})
    problems = self._within_prompt_limit(problems, validator)
    self.stream = PromptStream(problems, cfg.prompts_per_step, seed=cfg.seed,
                               shuffle=cfg.data.shuffle)
    self.method.start(names, self.reward_fn)  # HACPO's capability tracker, replay's log reader
    self.log_writers = {
        name: peer_log.PeerLogWriter(cfg.peer_log_dir, name,
                                     tokenizer_name=peer_log.tokenizer_label(p.tokenizer),
                                     vocab_hash=p.tokenizer_id)
        for name, p in self.policies.items()
    } if cfg.logging.peer_log and distributed.is_writer() else {}  # process 0 writes the logs
    self.checkpointer = Checkpointer(cfg.checkpoint_dir, every_steps=cfg.checkpoint.every_steps,
                                     keep=cfg.checkpoint.keep,
                                     async_save=cfg.checkpoint.async_save)
    self.step = 0
    self.validator = validator
    if cfg.checkpoint.resume:
      self._restore()
      self._drop_abandoned()
    if validator is not None:
      validator.resume(self.workdir / "metrics.jsonl", list(self.policies), before_step=self.step)

  def own(self, resource) -> None:
    """Hands the trainer something to close with it (a verifier pool, a vLLM engine)."""
    self._owned.append(resource)

  def _within_prompt_limit(self, problems, validator):
    """Training (and validation) problems whose prompt fits ``max_prompt_len`` in every
    policy's tokenizer, per ``data.too_long``; counts the skipped ones."""
    limit = dict(max_len=self.cfg.max_prompt_len, mode=self.cfg.data.too_long)
    problems, dropped = run_inputs.drop_too_long(
        problems, self.policies, source=run_inputs.source_of(self.cfg), **limit)
    self.data_counts["too_long"] = dropped
    run_inputs.require_batch(problems, self.cfg, self.data_counts)
    if validator is not None:
      for name, suite in validator.suite.items():
        validator.suite[name], dropped = run_inputs.drop_too_long(
            suite, self.policies, source=f"eval benchmark {name}",
            what="validation problems", **limit)
        if dropped:
          self.data_counts[f"eval_too_long/{name}"] = dropped
    return problems

  # -- checkpoints ---------------------------------------------------------

  def _state(self):
    return {name: _flat((p.params, p.opt_state)) for name, p in self.policies.items()}

  def _restore(self) -> None:
    got = self.checkpointer.restore_latest(self._state())
    if got is None:
      return
    state, meta = got
    for name, p in self.policies.items():
      params, opt_state = _unflat(state[name], (p.params, p.opt_state))
      p.set_params(params, opt_state)
    self.step = int(meta["step"])
    self.stream.position = int(meta["stream_position"])
    self.method.load_state_dict(meta.get("method") or {})
    log.info("resumed %s at step %d", self.workdir, self.step)

  def _drop_abandoned(self) -> None:
    """Removes the peer logs and metrics rows an interrupted attempt wrote for steps at or
    after the restored one; the steps run again and write them anew."""
    for w in self.log_writers.values():
      w.discard_after(self.step - 1 if self.step else None)
    path = self.workdir / "metrics.jsonl"
    if not distributed.is_writer():
      return
    gap = metrics_file.missing_steps(metrics_file.repair(path, first_step=self.step), self.step)
    if gap:
      log.warning("%s: no rows for steps %s, which the restored checkpoint covers (the file "
                  "was deleted or edited while the run was stopped); they cannot be "
                  "recovered", path, gap)

  def save(self, *, force: bool = False) -> bool:
    """A periodic save (asynchronous under ``checkpoint.async_save``: its writing overlaps
    the next step), or with `force` the last step's; `Checkpointer.steps` waits for the
    saves in flight, so a step whose save is still writing counts as saved."""
    if self.step in self.checkpointer.steps():
      return False
    meta = {"step": self.step, "stream_position": self.stream.position, "seed": self.cfg.seed,
            "method": self.method.state_dict(),
            "peer_log_cursor": {n: w.cursor for n, w in self.log_writers.items()}}
    return self.checkpointer.save(self.step, self._state(), meta, force=force)

  # -- the loop ------------------------------------------------------------

  def _log_rollouts(self, step: int, problems, rolls) -> None:
    for name, roll in rolls.items():
      if name in self.log_writers:
        try:
          self._write_log(name, step, problems, roll)
        except OSError as e:
          raise storage.as_storage_error(e, self.log_writers[name].dir) or e

  def _write_log(self, name: str, step: int, problems, roll) -> None:
    n, b = roll.n, roll.batch
    self.log_writers[name].write(
        step, prompt_ids=[problems[i // n].id for i in range(len(roll.texts))],
        prompts=[problems[i // n].problem for i in range(len(roll.texts))],
        responses=roll.texts, response_ids=roll.response_ids,
        logprobs=[b.logp_BxL[i, :len(ids)] for i, ids in enumerate(roll.response_ids)],
        rewards=roll.rewards_GxN.reshape(-1), advantages=roll.adv_GxN.reshape(-1),
        finished=b.finished_B, truncated=b.truncated_B, gate=roll.peer_gate)

  def run_step(self) -> dict:
    """One step: prompts, the method's step and its peer logs (``run`` then writes the
    metrics row and, when due, the checkpoint)."""
    epoch = self.stream.epoch_of(self.stream.position)
    problems = self.stream.next()
    key = jax.random.fold_in(jax.random.key(self.cfg.seed), self.step)
    t0 = time.perf_counter()
    metrics, rolls = train_step(self.cfg, self.policies, problems, self.reward_fn, self.step, key,
                                method=self.method, epoch=epoch)
    metrics["time"]["step_s"] = time.perf_counter() - t0
    metrics["epoch"] = epoch
    self._log_rollouts(self.step, problems, rolls)
    self.step += 1
    return metrics

  def run(self, num_steps: int | None = None, stop: preemption.StopSignals | None = None
          ) -> list[dict]:
    """Trains until ``num_steps`` (default: the config's) and saves the last step.

    A stop signal (``stop``, by default one entered here) ends it early: the
    last completed step is saved, then ``preemption.Stopped`` is raised.
    """
    total = num_steps or self.cfg.num_steps(len(self.stream.problems))
    out, aborted = [], []
    first, saved_s = self.step, 0.0
    with (stop or preemption.StopSignals()) as stop, \
         MetricsWriter(self.workdir, total_steps=total, initial_step=self.step,
                       tensorboard=self.cfg.logging.tensorboard,
                       progress_bar=self.cfg.logging.progress_bar,
                       wandb=self._wandb_settings(),
                       enabled=distributed.is_writer()) as writer:
      while self.step < total and not stop.agreed():  # every process stops at the same step
        step = self.step
        if step == first:  # jit compiles the sampler, log-probs and update on the first step
          progress.phase(f"step {step + 1}: rollouts, rewards and update; compiling them "
                         f"(first step only)…")
        metrics = self._step_unless_abandoned(stop, step == 0 and not self.checkpointer.steps())
        if metrics is None:
          break
        aborted = self._aborted_syncs()
        if self.validator is not None and not aborted and self.validator.due(step, total):
          progress.phase(f"validating after step {step + 1} (held-out pass@1)…")
          t0 = time.perf_counter()
          for name, m in self.validator.run(self.policies, step).items():
            # Wall-clock stamps go with the step's other timings, outside the run's results.
            for key in ("start_s", "end_s"):
              metrics["time"][f"{name}/eval_{key}"] = m.pop(key)
            metrics[name]["eval"] = m
          metrics["time"]["eval_s"] = time.perf_counter() - t0
        metrics["data"] = self.data_counts
        # What the save after the previous step held the run up (it comes after that
        # step's row, which must be durable first).
        metrics["time"]["checkpoint_s"] = saved_s
        out.append(writer.write(step, metrics))  # durable before the checkpoint covering it
        t0 = time.perf_counter()
        saved_s = time.perf_counter() - t0 if self.save() else 0.0
        if aborted:
          break
    self.save(force=True)
    self.checkpointer.wait()
    if aborted and not (stop.agreed_signum or stop.signum):
      raise type(aborted[0])(f"{aborted[0]}; checkpoint {self.step} saved; the same command "
                             f"resumes")
    if self.step < total:
      raise preemption.Stopped(stop.agreed_signum or stop.signum, self.step)
    if self.validator is not None:
      for name, (step, value) in self.validator.best().items():
        log.info("%s: best validation pass@1 %.4f after step %d", name, value, step + 1)
    return out

  def _aborted_syncs(self) -> list[Exception]:
    """Weight pushes of the step just run that were aborted (``VLLMEngine.sync_failure``):
    the step itself is complete, so the run saves it and stops rather than sample from a
    server on older weights."""
    return [e for e in (getattr(p.engine, "sync_failure", None)
                        for p in self.policies.values()) if e is not None]

  def _step_unless_abandoned(self, stop, fresh: bool) -> dict | None:
    """``run_step``, or None when a stop signal came before the step changed anything that
    cannot be put back: its parameters (replaced, or donated to the first optimizer step)
    and peer logs; its prompts and method state are put back for the rerun. A ``fresh`` run's
    first step stops anywhere but on the early warning (``Stopped``: nothing to save)."""
    step, position, state = self.step, self.stream.position, copy.deepcopy(self.method.state_dict())
    before = [(p.params, p.opt_state) for p in self.policies.values()]
    cursors = [w.cursor for w in self.log_writers.values()]
    def undoable():
      now = [(p.params, p.opt_state) for p in self.policies.values()]
      return (self.step == step and cursors == [w.cursor for w in self.log_writers.values()]
              and all(a is c and b is d for (a, b), (c, d) in zip(before, now))
              and not any(x.is_deleted() for x in jax.tree.leaves(before)
                          if isinstance(x, jax.Array)))
    try:
      with stop.abandonable(undoable, anywhere=fresh):
        return self.run_step()
    except preemption.StepAbandoned:
      if not undoable():
        raise preemption.Stopped(stop.signum, step, saved=False) from None
      self.step, self.stream.position = step, position
      self.method.load_state_dict(state)
      return None

  def _wandb_settings(self) -> dict | None:
    """`WandbLog`'s arguments from ``logging.wandb*``; None when it is off."""
    lc = self.cfg.logging
    if not lc.wandb:
      return None
    return dict(project=lc.wandb_project, entity=lc.wandb_entity, name=lc.wandb_name,
                mode=lc.wandb_mode, config=config_lib.to_dict(self.cfg))

  def export_hf(self, out_root, dtype: str = 'stored') -> dict:
    """Writes every trained policy as a Hugging Face folder ``out_root/<name>``, its
    weights as stored (``dtype='stored'``) or cast to ``dtype`` (e.g. 'bfloat16')."""
    from graft_jax.models import save_hf
    cast = None if dtype == 'stored' else jax.numpy.dtype(dtype)
    out = {}
    for name, p in self.policies.items():
      model = p.model
      out[name] = save_hf(model, model.cfg, p.tokenizer, pathlib.Path(out_root) / name,
                          dtype=cast)
    return out

  def close(self) -> None:
    """Closes the checkpointer, then what the trainer owns (``own``: its verifier pool, the
    vLLM engines ``build_trainer`` made). Other engines belong to whoever built them.

    Safe after a failed run: one resource failing to close does not keep the
    rest open, and the run's own error is the one reported.
    """
    self.checkpointer.close()
    while self._owned:
      resource = self._owned.pop()
      try:
        resource.close()
      except Exception as e:  # pylint: disable=broad-except
        log.warning("closing %s failed: %s", type(resource).__name__, e)
