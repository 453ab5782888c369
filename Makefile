# The README's two commands: `make demo` (main job) and `make test` (whole suite).
# Both create or reuse the project's virtual environment in .venv.
PY ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test venv clean-venv

$(STAMP): pyproject.toml
	@test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q torch==2.13.0
	$(VENV)/bin/python -m pip install -q -e '.[test,notebooks]'
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/python launch/demo.py

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q tests

clean-venv:
	rm -rf $(VENV)
