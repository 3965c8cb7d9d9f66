# The two commands the README starts with: `make demo` and `make test`.
VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
PIP     := $(PY) -m pip install -q -c constraints.txt
STAMP   := $(VENV)/.ddpnet-installed

.PHONY: setup deepspeed-ops system-deps bytecode test-bytecode demo test suite test-suite test-fast lint typecheck unit clean gpu-check

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) torch==2.13.0
	$(PIP) -e '.[test]'
	$(MAKE) --no-print-directory deepspeed-ops
	touch $@

# DeepSpeed's CPU accelerator compiles its shared-memory collective op at a job's first
# init_distributed (~35 CPU-s, cached under ~/.cache/torch_extensions): built once here, beside
# apt, not inside a test's ranks on a busy machine (tests/watch/test_trainer_deepspeed_lab.py)
deepspeed-ops:
	$(PY) -c "from deepspeed.accelerator import get_accelerator as a; \
	a().create_op_builder('ShareMemCommBuilder').load()" >/dev/null

system-deps:
	bash scripts/install-system-deps.sh

# ddpnet's own modules compiled once: with PYTHONDONTWRITEBYTECODE=1 (as on our VMs) every
# process the demo and the tests start (each lab node, each CLI run) would compile ~110
# modules again (~0.15 s of CPU each time); stale files are ignored by mtime.
bytecode: setup
	$(PY) -m compileall -q src >/dev/null

# The test modules' assertion rewriting cached once (~7 s of CPU a collection, in each of the
# six pytest processes a run starts): pytest writes that cache only where bytecode is
# written, so its runs clear PYTHONDONTWRITEBYTECODE.
test-bytecode: bytecode
	$(PYTEST) --collect-only >/dev/null

demo: setup system-deps bytecode
	$(VENV)/bin/ddpnet check --local 4 --report report.html

lint: setup
	$(VENV)/bin/ruff check src tests $(wildcard benchmarks)
	$(VENV)/bin/mypy

# Both cores at each stage: pip beside apt (neither needs the other); then ruff and mypy
# beside the suite (mypy cold is ~25 s on one core while the collection takes ~8 s): a lint
# failure fails `make test` once the suite is done (`make lint` alone for it first).
test:
	$(MAKE) -j2 --no-print-directory setup system-deps
	$(MAKE) -j2 --no-print-directory lint suite

suite: test-bytecode
	$(MAKE) --no-print-directory test-suite

# The whole suite in two runs (docs/testing.md): every test not marked solo on WORKERS xdist workers,
# a module at a time each (a module shares its lab or cluster), the longest recorded modules
# first (--no-loadscope-reorder keeps that order: xdist would sort by test count); then the
# solo ones (a rate, a CPU share or a race measured) alone on the machine.
# TESTS narrows both runs to some paths (benchmarks/loaded_suite.sh); with none of them solo,
# the second run's "no tests ran" (pytest's exit 5) is no failure.
PYTEST := PYTHONDONTWRITEBYTECODE= $(VENV)/bin/pytest -q
TESTS  ?=
# 5 on 2 cores: a fifth module fills the cores while others wait on a SLURM job, a provoked
# timeout or a threshold (docs/testing.md: the cores' idle share at 4 and 5 workers)
WORKERS ?= 5
test-suite:
	$(PYTEST) -n $(WORKERS) --dist loadfile --no-loadscope-reorder -m "not solo" --durations=20 $(TESTS)
	$(PYTEST) -m solo --durations=10 $(TESTS) || [ $$? -eq 5 ]

# The inner loop, under 2 minutes: no root, namespace, daemon or slow test (tests/conftest.py).
test-fast: setup bytecode
	$(PYTEST) -n 2 --fast

# The GPU path measured on one CUDA GPU (docs/gpu-check.md; no setup: a GPU node may have
# its own torch and no network): one JSON summary in
# benchmarks/results/gpu_check.json; one line and exit 0 where torch sees no CUDA device.
gpu-check:
	bash scripts/gpu-check.sh

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
