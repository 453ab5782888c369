"""Models named by Hugging Face Hub id (``org/name``): a local folder through huggingface_hub's cache.

The first run downloads the weights and tokenizer once; later runs reuse the
cache, offline too (``HF_HUB_OFFLINE=1``, or no network). The commit a run
resolved replaces its ``revision`` in the run's config, so config.json says which
weights it trained, and a resume of that run keeps them even if the branch moved.
A local folder is used as it is.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pathlib
import re

from graft_jax.config.errors import PathError

# What the trainer, its tokenizer and vLLM read; the rest of a repo (other weight
# formats, images, READMEs) is never downloaded.
MODEL_FILES = ("config.json", "generation_config.json", "*.safetensors",
               "model.safetensors.index.json", "tokenizer*", "special_tokens_map.json",
               "added_tokens.json", "vocab.json", "merges.txt", "*.model", "chat_template*",
               "*.jinja")
log = logging.getLogger(__name__)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


class HubError(ValueError):
  """A Hub id could not be resolved to a local folder; the message is one line."""


@dataclasses.dataclass(frozen=True)
class Resolved:
  """Where a model's files are: ``folder``; ``repo_id`` and ``commit`` when it came from the Hub."""
  folder: str
  repo_id: str | None = None
  commit: str | None = None


def is_hub_id(path: str) -> bool:
  """``path`` names a Hub repo: ``org/name``, and no local file or folder of that name."""
  return bool(_HUB_ID.match(path or "")) and not os.path.exists(path)


def resolve(path: str, revision: str = "", *, repo_type: str = "model",
            allow_patterns=MODEL_FILES) -> Resolved:
  """The local folder of ``path`` (a folder, or a Hub id at ``revision``: branch, tag or
  commit; default its main branch), downloading what is not cached yet: the files
  matching ``allow_patterns`` of the ``repo_type`` repo ('model' or 'dataset').

  Raises:
    HubError: one line for an unknown id or revision, a gated or private repo without
      a token, a cache with nothing (or part) of it while the Hub is out of reach.
  """
  if not is_hub_id(path):
    return Resolved(path)
  import huggingface_hub  # deferred: only Hub ids need it
  from huggingface_hub import errors
  at = f"{path}@{revision}" if revision else path
  # A Hub id is also what a mistyped relative folder looks like.
  here = f"no folder {path!r} here, and " if repo_type == "model" else ""
  try:
    folder = huggingface_hub.snapshot_download(path, revision=revision or None,
                                               repo_type=repo_type,
                                               allow_patterns=list(allow_patterns))
  except errors.GatedRepoError:
    page = f"https://huggingface.co/{'datasets/' if repo_type == 'dataset' else ''}{path}"
    raise HubError(f"{path} is gated: accept its terms on {page} and "
                   f"log in (hf auth login, or HF_TOKEN)") from None
  except errors.RepositoryNotFoundError:
    raise HubError(f"{here}no {repo_type} {path} on the Hub (a typo, or a private repo: log in with "
                   f"hf auth login, or HF_TOKEN)") from None
  except errors.RevisionNotFoundError:
    raise HubError(f"{path} has no revision {revision!r} (a branch, tag or commit)") from None
  except errors.IncompleteSnapshotError:
    raise HubError(f"{at}: the Hugging Face cache holds only part of it and the Hub is out "
                   f"of reach; rerun with network access to finish the download") from None
  except errors.LocalEntryNotFoundError as e:
    raise HubError(f"{here}{at} is not in the Hugging Face cache ({_cache_dir()}) and the Hub is "
                   f"out of reach ({_why_offline(e.__cause__)}); run once with network access "
                   f"to download it") from None
  except errors.HfHubHTTPError as e:
    raise HubError(f"{at}: the Hub refused the download: {_first_line(e)}") from None
  commit = pathlib.Path(folder).name  # the cache's snapshots/<commit>
  return Resolved(folder, path, commit if _COMMIT.match(commit) else None)


def resolve_models(cfg, fields=None):
  """``cfg`` with each model named by Hub id replaced by its local snapshot folder and
  its ``revision`` by the commit resolved; before anything checks or loads a model.

  A run that resumes (``checkpoint.resume`` and a config.json in its workdir) and names
  no revision keeps the commit it started with.

  Raises:
    PathError: naming the field (``model_a.path``) and what is wrong, in one line.
  """
  from graft_jax.config import checks  # the config package imports the models
  stored = _stored_models(cfg)
  out = {}
  for field, m in checks.policy_fields(cfg) if fields is None else fields:
    path = m.path
    if not is_hub_id(path):
      continue
    revision = m.revision or stored.get((field, path), "")
    got = resolve_field(f"{field}.path", path, revision)
    out[field] = dataclasses.replace(m, path=got.folder, revision=got.commit or revision)
    log.info("%s: %s at commit %s (%s)", field, path, got.commit, got.folder)
  if not out:
    return cfg
  if cfg.models:
    models = tuple(out.get(f"models[{i}]", m) for i, m in enumerate(cfg.models))
    return dataclasses.replace(cfg, models=models)
  return dataclasses.replace(cfg, **out)


def repo_of(path: str) -> str | None:
  """The Hub id whose cached snapshot ``path`` is, or None for any other folder."""
  parts = pathlib.Path(path).parts
  if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
    return parts[-3][len("models--"):].replace("--", "/")
  return None


def resolve_field(field: str, path: str, revision: str = "") -> Resolved:
  """`resolve`, its error a ``PathError`` naming ``field`` (a config field or a flag)."""
  try:
    return resolve(path, revision)
  except HubError as e:
    raise PathError(field, str(e)) from None


def describe(path: str, revision: str = "") -> str:
  """``org/name@commit`` for a folder of the Hub cache, else the folder itself."""
  repo = repo_of(path)
  return f"{repo}@{revision or pathlib.Path(path).name}" if repo else path


def _stored_models(cfg) -> dict:
  """``{(field, Hub id): commit}`` of the run this one resumes, from its config.json."""
  config = pathlib.Path(cfg.workdir, "config.json")
  if not (cfg.checkpoint.resume and config.is_file()):
    return {}
  try:
    stored = json.loads(config.read_text(encoding="utf-8"))
  except (OSError, ValueError):
    return {}  # the resume check itself names an unreadable config
  pairs = [(f"models[{i}]", m) for i, m in enumerate(stored.get("models") or ())]
  pairs = pairs or [(f, stored.get(f) or {}) for f in ("model_a", "model_b")]
  out = {}
  for field, m in pairs:
    repo = repo_of(m.get("path", ""))
    if repo and m.get("revision"):
      out[(field, repo)] = m["revision"]
  return out


def _cache_dir() -> str:
  from huggingface_hub import constants
  return constants.HF_HUB_CACHE


def _why_offline(cause: BaseException | None) -> str:
  """Why huggingface_hub fell back to the cache: offline mode, the Hub's own error (a
  5xx), or no connection."""
  from huggingface_hub import constants, errors
  if constants.HF_HUB_OFFLINE:
    return "HF_HUB_OFFLINE is set"
  if isinstance(cause, errors.HfHubHTTPError):
    return f"it answered {_first_line(cause)}"
  return "no network"


def _first_line(e: Exception) -> str:
  return (str(e).strip().splitlines() or [type(e).__name__])[0]
