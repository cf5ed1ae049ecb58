# `make run` and `make test` each create .venv (Python 3.11) and install what they need, once.
# The install profile is `gpu` where nvidia-smi finds a GPU, else `cpu`; override with PROFILE=.

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
PROFILE ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo cpu)
STAMP := $(VENV)/.installed-$(PROFILE)

.PHONY: run test lint install clean browser

install: $(STAMP)

$(STAMP): pyproject.toml constraints/$(PROFILE).txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints/$(PROFILE).txt -e '.[$(PROFILE),dev]'
	rm -f $(VENV)/.installed-*
	touch $@

run: $(STAMP)
	$(BIN)/cnnbench run

test: $(STAMP) browser
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

# the report page test renders index.html in headless Chromium (Debian's chromium package)
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium; \
	  else sudo -n apt-get update -qq && sudo -n apt-get install -y -qq chromium; fi; } \
	  || echo "make: could not install chromium; tests/test_report_page.py needs it" >&2

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV)
