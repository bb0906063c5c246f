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
	$(PY) -m pip install -q -e '.[workloads,lifecycle,dev]'
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

# --- model lifecycle (docs/lifecycle.md): tracking, registry, export, CPU inference ---
TRACK_PORT   ?= 5000
TRACKING_URI ?= http://127.0.0.1:$(TRACK_PORT)
.PHONY: track register export bench-infer

track: $(STAMP) ## local MLflow tracking server + registry on 127.0.0.1:TRACK_PORT (5000), store in build/mlflow
	@$(PY) -m workloads.tracking.server --port $(TRACK_PORT)

register: $(STAMP) ## register run RUN=<id>'s final checkpoint with its ONNX export (TRACKING_URI=...)
	@$(PY) -m workloads.tracking.register "$(RUN)" --tracking-uri $(TRACKING_URI) $(ARGS)

export: $(STAMP) ## CHECKPOINT=<dir> -> ONNX fp32 + int8 + model card in build/export/NAME (or OUT=)
	@test -n "$(CHECKPOINT)" || { echo "export: give CHECKPOINT=<checkpoint dir>" >&2; exit 2; }
	@$(PY) -m workloads.inference.export "$(CHECKPOINT)" $(if $(OUT),--out "$(OUT)") $(ARGS)

bench-infer: $(STAMP) ## CPU inference: PyTorch eager vs ONNX Runtime fp32 vs int8 (latency, tokens/s, RSS)
	@$(PY) -m workloads.inference.bench $(ARGS)

clean: ## remove build outputs (keeps .venv)
	rm -rf build .pytest_cache .mypy_cache .ruff_cache
