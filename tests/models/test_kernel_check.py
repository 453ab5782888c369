"""The start-up kernel check: on a CPU it runs nothing unless forced; forced, each kernel
(Pallas's interpret mode, traced as for a GPU or a TPU) agrees with XLA's reference, and
a kernel made wrong by a scale factor, or one that raises, is one line naming the kernel
and the setting that turns it off."""

import dataclasses
import json

import pytest

from graft_jax import backends, cli
from graft_jax.config.errors import ConfigError
from graft_jax.config.run_config import TrainConfig
from graft_jax.models import kernel_check
from graft_jax.models.attention import attention
from graft_jax.models.config import ModelConfig

SHAPES = {(32, 2)}  # head_dim 32, 2 query heads per kv head: small, GQA


def cfg_with(**perf):
  cfg = TrainConfig()
  return dataclasses.replace(cfg, perf=dataclasses.replace(cfg.perf, **perf))


def scaled_attention(*args, **kw):
  return attention(*args, **kw) * 1.5


def scaled_decode(*args, **kw):
  out, blocks = backends.live_decode_attention(*args, **kw)
  return out * 1.5, blocks


def broken_decode(*args, **kw):
  raise RuntimeError("Mosaic failed to lower the kernel\nsecond line")


def test_on_a_cpu_nothing_is_checked_unless_forced():
  assert not kernel_check.custom_kernels_run()
  assert kernel_check.planned(cfg_with(), SHAPES) == []
  kernel_check.check(cfg_with(), shapes=SHAPES, decode=broken_decode)  # nothing runs
  assert [c.field for c in kernel_check.planned(cfg_with(), SHAPES, force=True)] == [
      "perf.decode_attention"]  # 'auto' attention is XLA's on a CPU


@pytest.mark.parametrize("platform,want", [
    # No CUDA GPU here to ask for cuDNN's packed layout: the door answers Pallas's kernel.
    ("gpu", ["live-span decode", "pallas attention on packed rows, forward",
             "pallas attention on packed rows, backward"]),
    ("tpu", ["live-span decode", "splash attention on padded rows",
             "splash attention on packed rows, forward",
             "splash attention on packed rows, backward"])])
def test_every_kernel_of_a_default_run_agrees_with_the_reference(platform, want):
  with backends.traced_for(platform):
    cases = kernel_check.planned(cfg_with(), SHAPES, force=True)
    assert [next(w for w in want if w in c.kernel) for c in cases] == want
    assert all("interpreted" in c.kernel for c in cases)
    assert [c.failure() for c in cases] == [None] * len(want)


def test_a_kernel_off_by_a_scale_is_one_line_naming_it_and_its_setting():
  with backends.traced_for("gpu"):
    with pytest.raises(ConfigError) as e:
      kernel_check.check(cfg_with(), shapes=SHAPES, force=True, decode=scaled_decode,
                         attend=scaled_attention)
  lines = str(e.value).splitlines()
  assert len(lines) == 3 and e.value.field == "perf.decode_attention"
  assert lines[0].startswith("the live-span decode kernel (on gpu, interpreted, head_dim 32")
  assert "disagrees with XLA's reference" in lines[0]
  assert lines[0].endswith("set perf.decode_attention='xla' to run without it")
  assert lines[1].endswith("set perf.attention_impl='blocked' to run without it")
  assert lines[2].endswith("set perf.packed_update=False to run without it")
  # The launcher's message: each failure on a line of its own.
  assert cli.one_line(e.value).startswith("config error: the live-span decode kernel")


def test_a_kernel_that_raises_is_named_with_its_first_line():
  with pytest.raises(ConfigError) as e:
    kernel_check.check(cfg_with(), shapes=SHAPES, force=True, decode=broken_decode)
  assert str(e.value) == (
      "the live-span decode kernel (on cpu, interpreted, head_dim 32, 2 query heads per kv "
      "head) failed to compile or run here (RuntimeError: Mosaic failed to lower the kernel); "
      "set perf.decode_attention='xla' to run without it")


def test_the_settings_named_turn_their_kernels_off():
  with backends.traced_for("tpu"):
    plan = lambda **perf: [c.kernel.split(" (")[0] for c in kernel_check.planned(
        cfg_with(**perf), SHAPES, force=True)]
    assert plan(decode_attention="xla", packed_update=False) == [
        "splash attention on padded rows", "splash attention on packed rows, forward"]
    assert plan(attention_impl="blocked") == ["the live-span decode kernel"]
    # Padded rows are trained through the kernel's backward when the update pads.
    padded = kernel_check.planned(cfg_with(packed_update=False), SHAPES, force=True)[1]
    assert padded.run.keywords["grad"] and padded.failure() is None
    cfg = cfg_with()
    assert kernel_check.planned(dataclasses.replace(cfg, engine="vllm"), SHAPES,
                                force=True)[0].kernel.startswith("splash")


def test_shapes_come_from_the_model_folders(tmp_path):
  for name, mc in (("a", ModelConfig.qwen3_1p7b()), ("b", ModelConfig.smollm3_3b())):
    (tmp_path / name).mkdir()
    (tmp_path / name / "config.json").write_text(json.dumps(mc.to_hf_config()))
  cfg = TrainConfig()
  cfg = dataclasses.replace(cfg, model_a=dataclasses.replace(cfg.model_a, path=str(tmp_path / "a")),
                            model_b=dataclasses.replace(cfg.model_b, path=str(tmp_path / "b")))
  assert kernel_check.model_shapes(cfg) == {(128, 2), (128, 4)}
  assert kernel_check.model_shapes(TrainConfig()) == {kernel_check.DEFAULT_SHAPE}


def test_a_row_of_more_sequences_than_cudnn_packs_checks_the_pallas_kernel():
  # Where the door picks cuDNN's packed layout, a row of MAX_SEGMENTS + 1 sequences runs
  # the Pallas kernel (`attention.packed_gpu_attention`): its case, interpreted here.
  seg = kernel_check.attention_rows(256, packed=True, segments=kernel_check.MAX_SEGMENTS + 1)
  assert int(seg[0].max()) == kernel_check.MAX_SEGMENTS + 1 and int(seg[1].max()) == 1
  with backends.traced_for("gpu"):
    err = kernel_check.attention_error("cudnn", packed=True, grad=True, head_dim=32, groups=2,
                                       dtype="bfloat16", segments=kernel_check.MAX_SEGMENTS + 1)
    wrong = kernel_check.attention_error("cudnn", packed=True, grad=False, head_dim=32,
                                         groups=2, dtype="bfloat16", attend=scaled_attention,
                                         segments=kernel_check.MAX_SEGMENTS + 1)
  assert err < kernel_check.TOLERANCE["bfloat16"] < wrong
