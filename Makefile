# Set-up and entry points. `make demo` and `make test` each work on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
EXTRAS ?= dev
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(EXTRAS)

.PHONY: install demo test test-fast clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
	touch $@

install: $(STAMP)

# the test suite also exercises the optional GUI (MiniWoB++), Ray, peft and datasets integrations
test test-fast: EXTRAS := dev,gui,data

demo: install
	$(VENV)/bin/tempering demo

test: install
	$(PY) -m pytest -q

test-fast: install
	$(PY) -m pytest -q -m "not slow"

clean:
	rm -rf $(VENV) runs .pytest_cache
