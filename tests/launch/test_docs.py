"""The docs match the code: the layout table, no citations of files outside the repo, the colabs' install cell."""

import json
import os
import pathlib
import re

from tests.launch.conftest import REPO

TEXT_SUFFIXES = {".py", ".md", ".ipynb", ".toml", ".sh", ".txt", ".cfg", ".yaml", ".yml"}
SKIP_DIRS = {".git", ".venv", ".venv-vllm", ".venv-vllm-gpu", "runs", ".pytest_cache", ".hypothesis"}


def repo_text_files():
  for root, dirs, files in os.walk(REPO):
    dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
    for name in files:
      path = pathlib.Path(root, name)
      if path.suffix in TEXT_SUFFIXES:
        yield path.relative_to(REPO), path


def test_no_file_cites_a_design_document_outside_the_repo():
  needle = re.compile(r"DESIGN(\.md| ?§)")
  bad = [str(rel) for rel, path in repo_text_files()
         if rel != pathlib.Path(__file__).relative_to(REPO)
         and needle.search(path.read_text(encoding="utf-8", errors="replace"))]
  assert bad == []


def test_readme_layout_lists_every_package():
  readme = (REPO / "README.md").read_text()
  table = readme[readme.index("## Layout"):readme.index("\n## ", readme.index("## Layout") + 3)]
  listed = set(re.findall(r"^\| `([^`]+)` \|", table, re.M))
  packages = {f"graft_jax/{p.parent.name}/" for p in (REPO / "graft_jax").glob("*/__init__.py")}
  modules = {f"graft_jax/{p.name}" for p in (REPO / "graft_jax").glob("*.py")
             if p.name != "__init__.py"}
  assert packages | modules <= listed, sorted(packages | modules - listed)


def test_colabs_start_with_an_install_cell_and_state_their_runtime():
  for path in sorted((REPO / "colabs").glob("*.ipynb")):
    cells = json.loads(path.read_text())["cells"]
    assert "**Runtime:**" in "".join(cells[0]["source"]), path.name
    first_code = next("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert '"git", "clone"' in first_code and '"pip", "install", "-q", "-e"' in first_code, path.name
    assert 'if "google.colab" in sys.modules' in first_code, path.name
