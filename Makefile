# Set-up and the two README jobs. Every target installs what it needs into .venv first.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install lint test test-slow report fig1 toy bench-synthetic bench-gan bench-gpu clean-venv

install: $(STAMP)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --upgrade "pip>=24"
	$(PY) -m pip install -e ".[test]"
	touch $(STAMP)

# ruff over the code (its rules: [tool.ruff] in pyproject.toml)
lint: $(STAMP)
	$(VENV)/bin/ruff check dadam3 tests scripts

# the linter, then the suite in $(WORKERS) pytest-xdist workers without the end-to-end tests marked slow
# (CI: 2 cores; the 20 slowest tests are listed at the end); WORKERS=0 runs it in one process
WORKERS ?= 2
test: lint
	$(PY) -m pytest -n $(WORKERS) --dist load --durations=20 -m "not slow"

# the end-to-end tests marked slow (each over ~20 s: whole runs, fresh clones, subprocess pipelines); CI runs both
test-slow: $(STAMP)
	$(PY) -m pytest -n $(WORKERS) --dist load --durations=20 -m slow

# results/REPORT.md and results/report/*.png from the committed run directories (dadam3/report/)
report: $(STAMP)
	$(PY) -m dadam3.report --results results

fig1: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" bash scripts/fig1_synthetic.sh

bench-synthetic: $(STAMP)
	$(PY) scripts/bench_synthetic.py

clean-venv:
	rm -rf $(VENV)

toy: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" bash scripts/toy_gaussians.sh

bench-gan: $(STAMP)
	$(PY) scripts/bench_gan.py

bench-gpu: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" bash scripts/gpu_benchmarks.sh results/gpu
