"""The shipped pairs (the default and the friction regime): current, intact, used without
training, and rebuilt from their recipe."""

import hashlib
import pathlib
import subprocess
import sys

import pytest

from graft_jax import toy
from graft_jax.data import synthetic_columns as columns
from graft_jax.models import load_tokenizer
from graft_jax.toy import pair as pair_lib

ROOT = pathlib.Path(__file__).resolve().parents[2]
STALE = "the shipped toy pair is stale: run python launch/make_toy_pair.py --ship"


@pytest.mark.parametrize("regime", sorted(toy.REGIMES))
def test_shipped_pair_matches_the_current_recipe_and_its_files(regime):
  cfg = toy.REGIMES[regime].config(0)
  shipped = pair_lib.shipped_dir(cfg)
  record = pair_lib.read_record(shipped)
  assert record is not None, f"no {shipped / pair_lib.BUILD_FILE}"
  stale = STALE + ("" if regime == "default" else f" --regime {regime}")
  assert record["key"] == toy.cache_key(cfg), stale
  files = {str(f.relative_to(shipped)): hashlib.sha256(f.read_bytes()).hexdigest()
           for d in pair_lib.FOLDERS for f in sorted((shipped / d).iterdir())}
  assert files == record["files"]
  # Small enough to commit (the limit: a few MB).
  assert sum((shipped / f).stat().st_size for f in files) < 4e6


def test_default_pair_is_copied_not_trained(tmp_path, monkeypatch):
  def fail(*args, **kwargs):
    raise AssertionError("the shipped pair must be copied, not trained")

  monkeypatch.setattr(pair_lib, "train_sft", fail)
  got = toy.ensure_toy_pair(tmp_path / "pair", toy.default_config())
  assert not got.built and got.key == toy.cache_key(toy.default_config())
  for d in pair_lib.FOLDERS:
    for f in (pair_lib.PREBUILT / d).iterdir():
      assert (tmp_path / "pair" / d / f.name).read_bytes() == f.read_bytes()
  assert toy.ensure_toy_pair(tmp_path / "pair", toy.default_config()).record == got.record


def test_each_strategy_is_one_token_in_both_tokenizers():
  # The choice of procedure must cost one token, as the warm start's priors assume.
  for folder in pair_lib.FOLDERS:
    tok = load_tokenizer(pair_lib.PREBUILT / folder)
    for family, words in columns.WORDS.items():
      prefix = tok.encode(" Answer: carry", add_special_tokens=False)
      ids = [tok.encode(f" Answer: carry {w}:", add_special_tokens=False) for w in words]
      shown = (folder, family, [tok.convert_ids_to_tokens(i) for i in ids])
      # The word is one token, with ":" after it or merged into it ("Ġtens", ":" or " tens:").
      assert all(i[:len(prefix)] == prefix and len(i) - len(prefix) in (1, 2) for i in ids), shown
      if all(len(i) - len(prefix) == 2 for i in ids):
        assert ids[0][-1] == ids[1][-1], shown
      assert ids[0][len(prefix)] != ids[1][len(prefix)], shown


@pytest.mark.slow
def test_make_toy_pair_rebuilds_the_shipped_pair():
  # Several CPU minutes: both models' full warm start.
  proc = subprocess.run([sys.executable, "launch/make_toy_pair.py", "--check"], cwd=ROOT,
                        capture_output=True, text=True, timeout=3000)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
  assert "reproduced" in proc.stdout and "NOT reproduced" not in proc.stdout
