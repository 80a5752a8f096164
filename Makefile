# The README's two commands: `make roofline` (the main job) and `make test` (the quick tests, about a minute on 2 cores);
# `make test-all` runs the thorough checks `make test` leaves out (marked slow, 5 to 8 minutes on 2 cores;
# .ci/run runs make lint, make test, then make test-all); `make test-kernels` the kernels' compile with every template
# instantiation built optimized and checked for register spills (test-all checks spills on each tile config's
# heaviest variants: tests/test_kernels_compile.py), minutes of ptxas.
# Each creates .venv when missing and installs perflab into it; quick when already set up.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PERFLAB := $(VENV)/bin/perflab
NOTEBOOKS := roofline problem1 correctness convergence scaling kernels usc precision
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: roofline notebooks test test-all test-kernels gpu-test lint clean-venv

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(VENV)/.installed-dev: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

$(VENV)/.installed-notebooks: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[notebooks]'
	touch $@

roofline: $(VENV)/.installed-notebooks
	$(PY) -m perflab.backend  # on a machine with NVIDIA GPUs: the CuPy its driver takes, so the main job measures them
	$(PERFLAB) notebook roofline $(ROOFLINE_ARGS)
	$(PERFLAB) report
	@echo "outputs in this machine's run folder, runs/<machine key>/ (git-ignored): roofline.csv, notebooks/roofline.ipynb (executed), figures/, report.pdf"

notebooks: $(VENV)/.installed-notebooks
	for nb in $(NOTEBOOKS); do $(PERFLAB) notebook $$nb || exit 1; done
	$(PERFLAB) report

# PYTEST_ARGS: more pytest options (.ci/run passes --durations=10 to make test and make test-all). The package's
# bytecode is written once a session by tests/conftest.py, not in every MPI rank (where PYTHONDONTWRITEBYTECODE is set).
# The quick tests run in a worker a core (pytest-xdist, at most 4): short and independent, they fill two cores. The
# thorough ones run in one process: their MPI ranks and engines poll their cores, and the main job measures a machine
# whose other core one program holds on purpose (docs/DECISIONS.md, D66).
test: $(VENV)/.installed-dev
	$(PY) -m pytest -n auto --maxprocesses 4 $(PYTEST_ARGS)

test-all: $(VENV)/.installed-dev
	$(PY) -m pytest -m slow $(PYTEST_ARGS)

test-kernels: $(VENV)/.installed-dev
	PERFLAB_SPILL_CHECK=all $(PY) -m pytest -m slow tests/test_kernels_compile.py $(PYTEST_ARGS)

gpu-test: $(VENV)/.installed-dev
	$(PY) -m perflab compile
	$(PY) -m pytest -m gpu

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check perflab tests scripts

clean-venv:
	rm -rf $(VENV)
