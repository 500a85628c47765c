PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.ndebench-installed

.PHONY: install tex test test-fast quickstart docs clean

install: $(STAMP)

# Reinstall only when the packaging metadata changes; the install is editable, so code edits need none.
# constraints.txt holds the versions the suite was tested with (pyproject.toml only declares ranges).
# uv (put into the venv by pip, at the version in constraints.txt) downloads and unpacks the ~180 packages, about
# 6 GB with torch's CUDA libraries, in parallel: 40 s against pip's 143 s on the project's 2-core machine with
# empty caches (docs/install.md). --compile-bytecode, as pip does by default: without .pyc files every process
# compiles what it imports (where PYTHONDONTWRITEBYTECODE is set, importing torch, MLflow, Ray Tune and the rest
# took 19 s of CPU instead of 7 s in every process). uv reads its own settings (UV_INDEX, UV_DEFAULT_INDEX,
# UV_NATIVE_TLS), not pip.conf or PIP_*: where uv fails (an index only pip is set up for), pip installs instead;
# `make install INSTALLER=pip` uses pip alone.
INSTALLER ?= uv
PACKAGES := -c constraints.txt -e '.[test]'
PIP_INSTALL := $(BIN)/pip install --quiet $(PACKAGES)
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
ifeq ($(INSTALLER),pip)
	$(PIP_INSTALL)
else ifeq ($(INSTALLER),uv)
	$(BIN)/pip install --quiet -c constraints.txt uv && \
	  $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python $(PACKAGES) || \
	  { echo "make install: uv failed (above); installing with pip instead"; $(PIP_INSTALL); }
else
	$(error INSTALLER=$(INSTALLER): choose uv (the default) or pip)
endif
	touch $(STAMP)

# Two pytest-xdist workers, each taking whole files: most of the time goes to Ray and MLflow processes starting
# and waiting, so two files at a time roughly halve the wall time; a module's fixtures then run once. The files
# go out in tests/conftest.py's order, longest first (xdist's own reorder puts the files with most tests first).
XDIST := -n 2 --dist loadfile --no-loadscope-reorder
# pytest keeps its assertion-rewritten test modules in __pycache__ only where Python may write bytecode: where
# PYTHONDONTWRITEBYTECODE is set, each xdist worker rewrote all ~95 test modules at every start (collection 9.9 s
# against 7.0 s). The lanes allow it; the caches are git-ignored.
PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest
# pdflatex for tests/test_latex_tables.py, which compiles the report's .tex tables in a one- and a two-column
# article: Debian's texlive-latex-recommended (pdflatex and booktabs, about 100 MB) where it is missing and apt-get
# runs as root; elsewhere a line says how, and the test skips (fails under CI, or .ci/run's NDEBENCH_REQUIRE_TEX).
tex:
	@command -v pdflatex >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	  texlive-latex-recommended >/dev/null; } || \
	  echo "make: no pdflatex; apt-get install texlive-latex-recommended (as root) to run the LaTeX table test"

test: $(STAMP) tex
	$(BIN)/ruff check .
	$(PYTEST) -q $(XDIST) tests

# The same without the `system` tests (those that start Ray, MLflow servers or clusters, or run the package in
# another environment): the lane to run while working; `make test` (CI) still runs everything.
test-fast: $(STAMP) tex
	$(BIN)/ruff check .
	$(PYTEST) -q $(XDIST) -m "not system" tests

quickstart: $(STAMP)
	$(BIN)/ndebench run tune_configs/quickstart.yaml

# The documentation site (README.md links into docs/): a warning, such as a broken link, fails the build.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) mlflow.db mlartifacts ray_results reports site
