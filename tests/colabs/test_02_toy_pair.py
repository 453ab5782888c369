"""The toy-pair notebook, shortened: the tiny pair, 2 training steps per method."""

import pytest

from tests.colabs.run_notebook import execute

pytestmark = pytest.mark.slow


def test_notebook_shows_an_exchange_and_a_comparison():
  nb = execute("02_toy_pair.ipynb", timeout_s=1200,
               replace={"SHORT = False": "SHORT = True", "STEPS = 12": "STEPS = 2"})
  outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
  text = "".join(o.get("text", "") for o in outputs)
  assert "all-fail on" in text and "re-tokenization round-trips" in text
  assert "clip fraction on own tokens" in text
  assert "updated model  peer" in text and "Complementarity on held-out problems" in text
  images = [o for o in outputs if "image/png" in o.get("data", {})]
  assert len(images) >= 2
