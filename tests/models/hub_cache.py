"""A Hugging Face cache folder laid out as huggingface_hub writes it, for the Hub tests.

``models--org--name/blobs/<git sha>`` holds each file once; ``snapshots/<commit>/``
links to the blobs; ``refs/main`` names the commit. huggingface_hub's own offline
lookup reads it, so a test exercises the real resolution.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def git_blob_sha(data: bytes) -> str:
  """The id git (and the Hub) gives a file's content."""
  return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def add_snapshot(hub_cache: Path, repo_id: str, folder: Path, *, ref: str = "main",
                 repo_type: str = "model") -> str:
  """Caches every file of ``folder`` as ``repo_id`` (a ``repo_type`` repo: model or dataset)
  at a commit named after its contents, with ``refs/<ref>`` pointing at it; returns the
  commit."""
  repo = hub_cache / f"{repo_type}s--{repo_id.replace('/', '--')}"
  files = sorted(p for p in folder.rglob("*") if p.is_file())
  commit = hashlib.sha1(b"".join(p.read_bytes() for p in files)).hexdigest()
  for p in files:
    data = p.read_bytes()
    # Weights and parquet go through LFS (blob named by sha256), small files by git sha1.
    blob = (hashlib.sha256(data).hexdigest() if p.suffix in (".safetensors", ".parquet")
            else git_blob_sha(data))
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "blobs" / blob).write_bytes(data)
    link = repo / "snapshots" / commit / p.relative_to(folder)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(repo / "blobs" / blob, link.parent))
  (repo / "refs").mkdir(parents=True, exist_ok=True)
  (repo / "refs" / ref).write_text(commit)  # no newline, as huggingface_hub writes it
  return commit
