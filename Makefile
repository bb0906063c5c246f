# The user-facing verbs. Each target sets up the virtual environment it needs, so a
# fresh clone needs only `make plan` or `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

STACK  ?= uae-prod
STACKS := uae-prod uae-dev smb-cpu onprem-ib
PRESET ?= tiny
NPROC  ?= 2

.PHONY: help setup plan plan-all review review-all audit train bench lint typecheck test clean

help: ## list the verbs
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 14

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch==2.13.0 is pinned in the workloads extra: pip takes the local CPU build.
	$(PY) -m pip install -q -e '.[workloads,dev]'
	@touch $@

setup: $(STAMP) ## create .venv with every dependency

plan: $(STAMP) ## offline plan of STACK (default uae-prod) -> build/plan/STACK.json
	@$(PY) -m stacks.offline_plan $(STACK)

plan-all: $(STAMP) ## offline plan of every shipped stack
	@for s in $(STACKS); do $(PY) -m stacks.offline_plan $$s || exit 1; done

review: $(STAMP) ## policy review of STACK's plan (or PLAN=file.json) -> build/review/NAME/
	@if [ -n "$(PLAN)" ]; then $(PY) -m policies.review --plan "$(PLAN)"; \
	else $(PY) -m stacks.offline_plan --quiet $(STACK) && $(PY) -m policies.review --plan build/plan/$(STACK).json; fi

review-all: $(STAMP) ## policy review of every shipped stack
	@for s in $(STACKS); do $(MAKE) --no-print-directory review STACK=$$s || exit 1; done

audit: $(STAMP) ## read-only residency audit of the AWS account (REGIONS=..., ALLOWED=...)
	@$(PY) -m policies.audit $(if $(REGIONS),--regions $(REGIONS)) $(if $(ALLOWED),--allowed-regions $(ALLOWED))

train: $(STAMP) ## short real training run of PRESET (default tiny) with NPROC (2) torchrun processes
	@$(VENV)/bin/torchrun --standalone --nproc_per_node=$(NPROC) -m workloads.train --preset $(PRESET) $(ARGS)

bench: $(STAMP) ## tokens/s, step time, MFU and fast-path speedup for the presets this machine can run
	@$(PY) -m workloads.bench $(ARGS)

lint: $(STAMP) ## ruff
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP) ## mypy strict over the code, reading the Pulumi SDKs' types
	$(VENV)/bin/mypy

test: lint typecheck ## static checks, then every test
	$(VENV)/bin/pytest $(ARGS)

clean: ## remove build outputs (keeps .venv)
	rm -rf build .pytest_cache .mypy_cache .ruff_cache

# --- GPU check (issue 15) -------------------------------------------------------------
# `make gpu-check` runs on a GPU machine that has only a preinstalled CUDA PyTorch: no
# install step, so it does not depend on $(STAMP). It uses .venv's Python where there is
# one, else python3 (or GPU_PYTHON=...). The pure-Python wheels it may need are fetched
# beforehand with `make gpu-wheels` on a machine that reaches the package index and travel
# with the working tree in the ignored build/gpu-wheels/.
GPU_PYTHON ?= $(if $(wildcard $(PY)),$(PY),python3)
GPU_WHEELS := build/gpu-wheels

.PHONY: gpu-check gpu-wheels

gpu-check: ## on a GPU: health, correctness, NCCL, bench -> BENCHMARKS.md (ARGS=--dry-run: plan only)
	@$(GPU_PYTHON) -m workloads.gpu_check --record $(ARGS)

gpu-wheels: $(STAMP) ## download the pure-Python wheels gpu-check carries to build/gpu-wheels/
	$(PY) -m pip download -q --no-deps --only-binary=:all: --dest $(GPU_WHEELS) \
		'nvidia-ml-py==13.615.71' 'prometheus-client==0.26.0'
