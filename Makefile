# `make run` and `make test` each create .venv (Python 3.11) and install what they need, once.
# The install profile is `gpu` where nvidia-smi finds a GPU, else `cpu`; override with PROFILE=.

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
PROFILE ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo cpu)
STAMP := $(VENV)/.installed-$(PROFILE)

.PHONY: run test lint install clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints/$(PROFILE).txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints/$(PROFILE).txt -e '.[$(PROFILE),dev]'
	rm -f $(VENV)/.installed-*
	touch $@

run: $(STAMP)
	$(BIN)/cnnbench run

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV)
