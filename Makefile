# The two promised commands: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit clean stubs sysdeps libc4p lab

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip==24.3.1
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# First the offline planner (ECMP vs c4p on an embedded fabric), then the live controller.
demo: $(STAMP)
	$(BIN)/python -m c4p.demos.plan
	$(BIN)/python -m c4p.demos.service

# The Linux fabric lab (root; FRR for BGP): plans realized by a real kernel, static and BGP.
lab: $(STAMP) sysdeps
	$(BIN)/c4p lab demo --routing both --json lab-demo.json

# Regenerate the gRPC stubs in c4p/api/v1 from proto/ (tests fail if they drift).
stubs: $(STAMP)
	$(BIN)/python -m c4p.api.generate

lint: $(STAMP)
	$(BIN)/ruff check topology solver southbound c4p tests scripts
	$(BIN)/ruff format --check topology solver southbound c4p tests scripts

typecheck: $(STAMP)
	$(BIN)/mypy

# The C library for collective libraries (libc4p/build: libc4p.so.1, libc4p.a, the C test
# driver and, where <infiniband/verbs.h> exists, the RDMA example). Its tests run in `unit`.
libc4p:
	$(MAKE) --no-print-directory -C libc4p

unit: $(STAMP) libc4p
	$(BIN)/pytest

# Debian packages for the real-world tests (netns lab, FRR, lldpd, snmpd, etcd, libibverbs):
# installed when running as root, else listed (and the tests that need them skip).
sysdeps:
	@scripts/system-deps

# Each step runs even if an earlier one fails, and the target fails if any did.
test: $(STAMP) sysdeps
	@status=0; \
	$(MAKE) --no-print-directory lint || status=1; \
	$(MAKE) --no-print-directory typecheck || status=1; \
	$(MAKE) --no-print-directory unit || status=1; \
	exit $$status

clean:
	$(MAKE) --no-print-directory -C libc4p clean
	rm -rf $(VENV) build *.egg-info .mypy_cache .pytest_cache .ruff_cache
