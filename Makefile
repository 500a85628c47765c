PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.ndebench-installed

.PHONY: install test quickstart clean

install: $(STAMP)

# Reinstall only when the packaging metadata changes; the install is editable, so code edits need none.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q tests

quickstart: $(STAMP)
	$(BIN)/ndebench run tune_configs/quickstart.yaml

clean:
	rm -rf $(VENV) mlflow.db mlartifacts ray_results reports
