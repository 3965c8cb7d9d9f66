# The two commands the README starts with: `make demo` and `make test`.
VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
PIP     := $(PY) -m pip install -q -c constraints.txt
STAMP   := $(VENV)/.ddpnet-installed

.PHONY: setup system-deps bytecode demo test lint typecheck unit clean gpu-check

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) torch==2.13.0
	$(PIP) -e '.[test]'
	touch $@

system-deps:
	bash scripts/install-system-deps.sh

# ddpnet's own modules compiled once: with PYTHONDONTWRITEBYTECODE=1 (as on our VMs) every
# process the demo and the tests start (each lab node, each CLI run) would compile ~110
# modules again (~0.15 s of CPU each time); stale files are ignored by mtime.
bytecode: setup
	$(PY) -m compileall -q src >/dev/null

demo: setup system-deps bytecode
	$(VENV)/bin/ddpnet check --local 4 --report report.html

lint: setup
	$(VENV)/bin/ruff check src tests $(wildcard benchmarks)
	$(VENV)/bin/mypy

test: setup system-deps lint bytecode
	$(VENV)/bin/pytest -q --durations=30

# The GPU path measured on one CUDA GPU (docs/gpu-check.md; no setup: a GPU node may have
# its own torch and no network): one JSON summary in
# benchmarks/results/gpu_check.json; one line and exit 0 where torch sees no CUDA device.
gpu-check:
	bash scripts/gpu-check.sh

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
