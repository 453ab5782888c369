"""The checksums of a checkpoint's files, written into its folder after it commits.

Orbax restores a checkpoint whose bytes changed on disk without complaint (a
flipped byte in a parameter is a different parameter), so each committed step
gets ``graft_manifest.json``: every other file's size and sha256, written
atomically, last. `verify` compares the folder with it before a restore.
"""

from __future__ import annotations

import json
import pathlib

from graft_jax.atomic_file import file_sha256, write_atomically

MANIFEST = "graft_manifest.json"


def _files(step_dir: pathlib.Path) -> list[str]:
  return sorted(str(p.relative_to(step_dir)) for p in step_dir.rglob("*")
                if p.is_file() and p.name != MANIFEST)


def write(step_dir) -> None:
  """Records the size and sha256 of every file in ``step_dir`` (compact JSON: a changed byte
  anywhere in the manifest itself changes what it says, so it is caught too)."""
  step_dir = pathlib.Path(step_dir)
  files = {name: [(step_dir / name).stat().st_size, file_sha256(step_dir / name)]
           for name in _files(step_dir)}
  write_atomically(step_dir / MANIFEST, json.dumps({"files": files}, separators=(",", ":"),
                                                   sort_keys=True))


def has_manifest(step_dir) -> bool:
  return (pathlib.Path(step_dir) / MANIFEST).is_file()


def verify(step_dir) -> str | None:
  """None when ``step_dir`` matches its manifest, else what differs (one phrase): a file
  changed, missing or added, or a manifest that cannot be read."""
  step_dir = pathlib.Path(step_dir)
  try:
    files = json.loads((step_dir / MANIFEST).read_bytes())["files"]
    names = _files(step_dir)
    if sorted(files) != names:
      extra = sorted(set(names) - set(files)) or sorted(set(files) - set(names))
      return f"its files differ from its manifest ({extra[0]} added or missing)"
    for name in names:
      size, digest = files[name]
      path = step_dir / name
      if path.stat().st_size != size:
        return f"{name} is {path.stat().st_size} bytes, {size} when saved"
      if file_sha256(path) != digest:
        return f"{name} changed since it was saved (sha256 differs)"
  except (OSError, ValueError, KeyError, TypeError) as e:
    return f"its manifest cannot be read ({type(e).__name__}: {e})"
  return None
