# `make run` and `make test` each create .venv (Python 3.11) and install what they need, once.
# The install profile is `gpu` where nvidia-smi finds a GPU, else `cpu`; override with PROFILE=.

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
PROFILE ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo cpu)
STAMP := $(VENV)/.installed-$(PROFILE)

.PHONY: run test test-deps lint install clean browser

install: $(STAMP)

$(STAMP): pyproject.toml constraints/$(PROFILE).txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints/$(PROFILE).txt -e '.[$(PROFILE),dev]'
	rm -f $(VENV)/.installed-*
	touch $@

run: $(STAMP)
	$(BIN)/cnnbench run

# The Slurm tests start a real one-node cluster (tests/slurm_cluster.py): Debian's slurm-wlm and
# munge, installed here where missing (as root, through apt-get).
test-deps:
	@command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null || \
	{ if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge; \
	  else echo "make test: the Slurm tests need slurm-wlm and munge: sudo apt-get install slurm-wlm munge" >&2; \
	    exit 1; fi; }

# Two pytest workers, a test file each at a time (module fixtures are built once): most tests wait on
# the processes they start (framework imports, servers, Slurm), so two fill a 2-core host's idle time.
TEST_WORKERS ?= 2

test: $(STAMP) browser test-deps
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

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
