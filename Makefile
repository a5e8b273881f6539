# Two commands for a newcomer: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.netparity-installed
EXTRAS ?= torch,mindspore,dev
PYTEST_ARGS ?= --durations=25

.PHONY: demo test verdicts-isa venv lint bench clean-venv

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

# Verdicts must not move with the CPU's vector width or thread count (issue 28): the fast
# verdict tests again under PyTorch's portable and AVX2 kernels, on 1 and 2 threads (the main
# run covers the machine's own). Called from .ci/run after `make test`.
ISA_TESTS ?= tests/workflow/test_replay.py tests/compare/test_noise_mode.py tests/workflow/test_finer_candidate.py \
	tests/corpus/test_tree_organisation.py tests/compare/test_leaf_replay.py tests/compare/test_leaf_replay_back.py \
	"tests/compare/test_leaf_replay_mindspore.py::test_each_cell_kind_replays_mindspores_own_output" \
	"tests/workflow/test_step.py::test_bug_is_named_in_the_right_phase_and_place[clean]"
verdicts-isa: $(STAMP)
	ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 -p no:cacheprovider $(ISA_TESTS)
	ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=2 $(BIN)/python -m pytest -q -n 2 -p no:cacheprovider $(ISA_TESTS)

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
