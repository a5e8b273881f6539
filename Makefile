# Two commands for a newcomer: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.netparity-installed
EXTRAS ?= torch,mindspore,dev
PYTEST_ARGS ?=

.PHONY: demo test venv lint bench clean-venv

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt setup.py src/netparity/_fastvec.c
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[$(EXTRAS)]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/netparity demo

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/mypy src/netparity

bench: $(STAMP)
	$(BIN)/python benchmarks/stats_kernel.py
	$(BIN)/python benchmarks/capture_overhead.py
	$(BIN)/python benchmarks/align_speed.py
	$(BIN)/python benchmarks/compare_throughput.py

clean-venv:
	rm -rf $(VENV)
