"""Execute a notebook headlessly with nbclient; any failing cell fails the test."""

import pathlib

import nbclient
import nbformat

COLABS = pathlib.Path(__file__).resolve().parents[2] / "colabs"


def execute(name: str, *, timeout_s: int = 600, replace: dict | None = None):
  nb = nbformat.read(COLABS / name, as_version=4)
  for cell in nb.cells:
    if cell.cell_type == "code":
      for old, new in (replace or {}).items():
        cell.source = cell.source.replace(old, new)
  client = nbclient.NotebookClient(nb, timeout=timeout_s, kernel_name="python3",
                                   resources={"metadata": {"path": str(COLABS)}})
  client.execute()
  return nb
