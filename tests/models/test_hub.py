"""Models by Hub id: huggingface_hub's own cache lookup and error classes, offline.

The cache is a folder laid out as huggingface_hub writes it (``hub_cache``) holding
a tiny model saved by transformers. huggingface_hub reads HF_HOME and HF_HUB_OFFLINE
once, at import: in process the fixture sets both the variables and the constants
they became; the launcher test sets only the variables, in a fresh process.

A gated repo, an unknown id, an unknown revision and a failing Hub (a 500) are answers
only the Hub gives.
They come here from a local server that answers as the Hub does (its status codes
and X-Error-Code headers), so huggingface_hub's own mapping of a response to its
exception classes runs; that the Hub still sends those headers cannot be checked
offline.
"""

import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

import hub_cache
import pytest
import tiny_hf
from huggingface_hub import constants

from graft_jax.config import run_config as config_lib
from graft_jax.config.errors import PathError
from graft_jax.models import hub, load_hf
from graft_jax.outputs import progress

ROOT = Path(__file__).resolve().parents[2]
REPO = "tiny-org/tiny-qwen3"


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
  folder = tmp_path_factory.mktemp("tiny_qwen3")
  tiny_hf.save_hf_model("qwen3", folder)
  tiny_hf.make_tokenizer(folder)
  return folder


@pytest.fixture
def offline(tmp_path, monkeypatch):
  """An empty HF_HOME, offline; returns its hub cache folder."""
  cache = tmp_path / "hf_home" / "hub"
  cache.mkdir(parents=True)
  monkeypatch.setenv("HF_HOME", str(cache.parent))
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
  monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
  return cache


def test_a_cached_id_resolves_offline_to_its_snapshot_and_commit(offline, tiny_folder):
  commit = hub_cache.add_snapshot(offline, REPO, tiny_folder)
  got = hub.resolve(REPO)
  assert got == hub.Resolved(str(offline / f"models--tiny-org--tiny-qwen3/snapshots/{commit}"),
                             REPO, commit)
  assert hub.resolve(REPO, commit).folder == got.folder  # pinned by commit
  assert hub.describe(got.folder) == f"{REPO}@{commit}"
  model, cfg = load_hf(REPO)  # through the snapshot's links to the blobs
  assert cfg.num_layers == 2 and model.cfg == load_hf(tiny_folder)[0].cfg


def test_a_local_folder_is_used_as_it_is(offline, tiny_folder):
  assert hub.resolve(str(tiny_folder)) == hub.Resolved(str(tiny_folder))
  assert not hub.is_hub_id(str(tiny_folder)) and hub.is_hub_id(REPO)
  assert not hub.is_hub_id("./a/b") and not hub.is_hub_id("a/b/c")


def _one_line(excinfo) -> str:
  text = str(excinfo.value)
  assert "\n" not in text
  return text


def test_nothing_cached_and_offline_is_one_line(offline):
  with pytest.raises(hub.HubError) as e:
    hub.resolve(REPO)
  assert _one_line(e) == (f"no folder '{REPO}' here, and {REPO} is not in the Hugging Face cache ({offline}) and the Hub is "
                          "out of reach (HF_HUB_OFFLINE is set); run once with network access "
                          "to download it")


def test_an_uncached_revision_offline_is_one_line(offline, tiny_folder):
  hub_cache.add_snapshot(offline, REPO, tiny_folder)
  with pytest.raises(hub.HubError, match=rf"^no folder '{REPO}' here, and {REPO}@v2 is not in the Hugging Face cache") as e:
    hub.resolve(REPO, "v2")
  _one_line(e)


def test_a_partial_snapshot_offline_is_one_line(offline, tiny_folder):
  """huggingface_hub knows a snapshot is partial from the file listing it cached."""
  from huggingface_hub._tree_cache import TreeCacheEntry, write_tree_cache
  commit = hub_cache.add_snapshot(offline, REPO, tiny_folder)
  repo = offline / "models--tiny-org--tiny-qwen3"
  names = [p.name for p in tiny_folder.iterdir()]
  entries = {n: TreeCacheEntry(size=1, blob_id="0" * 40) for n in names}
  write_tree_cache(str(repo), commit, entries)
  assert hub.resolve(REPO).commit == commit  # complete
  (repo / "snapshots" / commit / "model.safetensors").unlink()
  with pytest.raises(hub.HubError, match=rf"^{REPO}: the Hugging Face cache holds only part") as e:
    hub.resolve(REPO)
  _one_line(e)


class _HubAnswers(http.server.BaseHTTPRequestHandler):
  """Answers a model's info request as the Hub does for the repo named in the path."""

  def do_GET(self):  # noqa: N802 (http.server's name)
    code, error = {"gated": (401, "GatedRepo"), "missing": (401, "RepoNotFound"),
                   "revision": (404, "RevisionNotFound"), "down": (500, "")
                   }[self.path.split("/")[4]]
    self.send_response(code)
    if error:
      self.send_header("X-Error-Code", error)
    self.send_header("Content-Length", "0")
    self.end_headers()

  def log_message(self, *args):
    pass


@pytest.fixture
def hub_server(tmp_path, monkeypatch):
  monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
  monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HubAnswers)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.server_port}")
  yield
  server.shutdown()


@pytest.mark.parametrize("repo, revision, want", [
    ("org/gated", "", "org/gated is gated: accept its terms on https://huggingface.co/org/gated "
                      "and log in (hf auth login, or HF_TOKEN)"),
    ("org/missing", "", "no folder 'org/missing' here, and no model org/missing on the Hub (a typo, or a private repo: log in "
                        "with hf auth login, or HF_TOKEN)"),
    ("org/revision", "v9", "org/revision has no revision 'v9' (a branch, tag or commit)"),
    ("org/down", "", "no folder 'org/down' here, and org/down is not in the Hugging Face cache "
                     "({cache}) and the Hub is out of reach (it answered Server error '500 "
                     "Internal Server Error' for url '{url}/api/models/org/down/revision/main'); "
                     "run once with network access to download it"),
], ids=["gated", "unknown id", "unknown revision", "the Hub failing"])
def test_the_hubs_refusals_are_one_line(hub_server, repo, revision, want):
  with pytest.raises(hub.HubError) as e:
    hub.resolve(repo, revision)
  assert _one_line(e) == want.format(url=constants.ENDPOINT, cache=constants.HF_HUB_CACHE)


def test_a_run_records_the_commit_it_resolved_and_a_resume_keeps_it(offline, tiny_folder,
                                                                    tmp_path):
  first = hub_cache.add_snapshot(offline, REPO, tiny_folder)
  cd = config_lib.config_dict()
  cd.model_a.path, cd.model_b.path = REPO, str(tiny_folder)
  cd.workdir = str(tmp_path / "run")
  cfg = hub.resolve_models(config_lib.from_config_dict(cd))
  assert (cfg.model_a.path, cfg.model_a.revision) == (hub.resolve(REPO).folder, first)
  assert (cfg.model_b.path, cfg.model_b.revision) == (str(tiny_folder), "")
  stored = json.loads(config_lib.write_run_config(cfg).read_text())
  assert stored["model_a"]["revision"] == first
  assert (f"{cfg.workdir}/config.json", f"the resolved config (weights: model_a {REPO}@{first})"
          ) in progress.run_outputs(cfg)
  # The branch moves on; the resumed run keeps the weights it started with, a new one
  # (or one naming its revision) takes the branch's.
  tokenizer = tiny_folder / "tokenizer.json"
  moved = tmp_path / "moved"
  moved.mkdir()
  for p in tiny_folder.iterdir():
    (moved / p.name).write_bytes(p.read_bytes() + (b" " if p == tokenizer else b""))
  second = hub_cache.add_snapshot(offline, REPO, moved)
  assert second != first
  assert hub.resolve_models(config_lib.from_config_dict(cd)).model_a.revision == first
  cd.checkpoint.resume = False
  assert hub.resolve_models(config_lib.from_config_dict(cd)).model_a.revision == second


def test_a_bad_id_names_the_field(offline):
  cd = config_lib.config_dict()
  cd.models = [{"path": "org/absent", "name": "a"}, {"path": REPO, "name": "b"}]
  with pytest.raises(PathError, match=r"^models\[0\]\.path: no folder 'org/absent' here, and org/absent is not in"):
    hub.resolve_models(config_lib.from_config_dict(cd))


def test_the_launcher_stops_in_one_line_before_any_model_loads(tmp_path):
  """HF_HOME and HF_HUB_OFFLINE as a user sets them, read by a fresh process."""
  env = {"PATH": "/usr/bin:/bin", "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1",
         "JAX_PLATFORMS": "cpu"}
  done = subprocess.run(
      [sys.executable, "launch/train.py", "--config=configs/toy.py:graft",
       f"--workdir={tmp_path / 'run'}", f"--config.model_a.path={REPO}"],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert done.returncode != 0
  lines = done.stderr.strip().splitlines()
  assert lines[-1].endswith(
      f"model_a.path: no folder '{REPO}' here, and {REPO} is not in the Hugging Face cache ({tmp_path / 'hf_home' / 'hub'}) "
      "and the Hub is out of reach (HF_HUB_OFFLINE is set); run once with network access to "
      "download it"), done.stderr[-3000:]
  assert "Traceback" not in done.stderr and not (tmp_path / "run" / "config.json").exists()
