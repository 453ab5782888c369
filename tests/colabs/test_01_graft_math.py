from tests.colabs.run_notebook import execute


def test_notebook_runs_and_shows_the_tie():
  nb = execute("01_graft_math.ipynb")
  text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
  assert "A takes [0 1 2]" in text
  images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if "image/png" in o.get("data", {})]
  assert len(images) >= 3
