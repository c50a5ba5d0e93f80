# zerolab: every entry point a user or CI needs. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
WORKERS ?= 2
PYTEST := $(BIN)/pytest -n $(WORKERS) --dist loadfile --no-loadscope-reorder

.PHONY: help test test-fast test-engine test-container lint dev lock docs setup demo gpu-kit gpu-check cluster-setup cluster-test

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

# The locks (zerolab/engine/locks.py says which environment installs which) are for Python 3.11 and
# later: pins.toml's numpy needs it.
LOCK := $(BIN)/uv pip compile --quiet --upgrade --universal --python-version 3.11 --custom-compile-command 'make lock'

$(BIN)/zerolab: pyproject.toml requirements/dev.txt
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "make dev: $(PYTHON) is older than Python 3.11, which requirements/dev.txt needs (pins.toml's numpy): make dev PYTHON=python3.11" >&2; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q --require-hashes -r requirements/dev.txt
	$(BIN)/pip install -q --no-deps -e .
	@touch $@

dev: $(BIN)/zerolab  ## the development environment (.venv): zerolab and its test tools, at requirements/dev.txt's versions

lock: dev  ## refresh requirements/ to the newest versions pyproject.toml's ranges and pins.toml allow (uv, from PyPI); then make dev and make test say whether the refresh is safe
	$(BIN)/python -m zerolab.engine.pins | $(LOCK) - -o requirements/engine.txt
	$(LOCK) pyproject.toml --extra dev --generate-hashes -c requirements/engine.txt -o requirements/dev.txt
	$(LOCK) pyproject.toml -c requirements/dev.txt -o requirements/zerolab.txt

lint: dev  ## ruff, the import layers (import-linter: pyproject.toml), shellcheck and hadolint
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	git ls-files -z '*.sh' .ci/run tools/summarize | xargs -0 -r $(BIN)/shellcheck
	$(BIN)/hadolint Dockerfile

test: lint  ## set up .venv, lint, and run every test, all three tiers, on WORKERS=2 pytest-xdist workers (tests/README.md: engine and cluster tests skip, with the reason, without the engine or the cluster); the 25 slowest are listed at the end
	$(PYTEST) --durations=25

test-fast: dev  ## the unit tier, tests/unit: every test that needs no engine (1503 tests, 47-90 s on 2 cores)
	$(PYTEST) tests/unit

test-engine: dev  ## the engine tier, tests/engine: the tests on the real engine (`make setup` first; they skip without it)
	$(PYTEST) tests/engine

test-container: dev  ## the container tier, tests/container/ (root; podman or docker, mmdebstrap: `.ci/run` installs them): build the image's CPU twin, then doctor, a recipe's wrapper and summarize with it (not part of `make test`)
	$(BIN)/pytest -v -s --durations=0 tests/container

cluster-setup:  ## as root on Debian or Ubuntu: the packages the two-node cluster tests start (slurm-wlm, munge, openssh-server, pdsh; the tests run their own daemons, in namespaces)
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge openssh-server pdsh

cluster-test: dev  ## the two-node cluster tests alone (root; `make cluster-setup` and `make setup` first): real SLURM, pdsh/ssh and torchrun across two network namespaces (docs/multinode.md)
	$(PYTEST) tests/cluster

docs: dev  ## regenerate the generated docs: recipe-reference.md (schema), summarize.md's columns, estimate.md's tables, resume.md's table
	$(BIN)/python -m zerolab.recipe.reference
	$(BIN)/python -m zerolab.summarize.columns
	$(BIN)/python -m zerolab.recipe.resumption
	$(BIN)/python benchmarks/estimate_calibration.py

setup: dev  ## the engine: a venv in ~/.cache/zerolab with the pins of zerolab/engine/pins.toml, Megatron-DeepSpeed at the pinned commit, its builds (on CUDA: apex, fused kernels) (ZEROLAB_ENGINE_SRC / ZEROLAB_APEX_SRC=local git dirs to clone from)
	$(BIN)/zerolab engine install

demo: setup  ## set up, then the CPU demo: one sweep over five ZeRO setups of a tiny GPT-2 (2 ranks), runs and summary in logs/sweeps/demo/
	$(BIN)/zerolab demo

gpu-kit: setup  ## on a machine with network access: DIR=folder [MACHINE=pip-freeze-of-the-GPU-machine.txt] [PYTHON_VERSION=3.12] [ARGS=--apex]: what an offline GPU machine needs for gpu-check
	@test -n "$(DIR)" || { echo "usage: make gpu-kit DIR=folder [MACHINE=freeze.txt] [PYTHON_VERSION=3.12] [ARGS=--apex]" >&2; exit 2; }
	$(BIN)/python -m zerolab.gpucheck.kit "$(DIR)" $(if $(MACHINE),--machine "$(MACHINE)") $(if $(PYTHON_VERSION),--python-version $(PYTHON_VERSION)) $(ARGS)

gpu-check:  ## on a GPU machine, with its own CUDA torch (PYTHON=python3): [KIT=folder] [RESULTS=folder] [ARGS=--dry-run|--only STEP|--budget S|--rehearse]: nothing compiled; the speed ladder, the peer, the seed setups, benchmarks/gpu.md, in 9 minutes (docs/speed.md)
	$(PYTHON) -m zerolab.gpucheck $(if $(KIT),--kit "$(KIT)") $(if $(RESULTS),--results "$(RESULTS)") $(ARGS)
