# One venv in .venv/ with the versions in constraints.txt (one lock for Python 3.11, 3.12, 3.13).
# Another Python in another venv: `make test PYTHON=python3.13 VENV=.venv-3.13` (what .ci/run does).
# A user who already has a CUDA torch: `make install VENV_ARGS=--system-site-packages`
# (the venv then sees that torch and does not install one).
PYTHON ?= python3
VENV ?= .venv
VENV_ARGS ?=
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check
STAMP := $(VENV)/.installed
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: install demo lint test coverage benchmark clean

# elmo_plugin listed in allennlp's global plugins file (registering imports the whole plugin, some
# seconds: only where the file does not list it yet)
install: $(STAMP)
	@grep -qsx elmo_plugin $(HOME)/.allennlp/plugins || $(BIN)/python -m elmo_plugin.commands.register_plugin

$(STAMP): constraints.txt setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV_ARGS) $(VENV)
	@$(BIN)/python -c "import sys; v = sys.version_info[:2]; \
		v < (3, 11) and sys.exit('$(VENV) has Python %d.%d; constraints.txt needs 3.11, 3.12 or 3.13: rm -rf $(VENV) and make install PYTHON=python3.11' % v); \
		v > (3, 13) and print('warning: $(VENV) has Python %d.%d; constraints.txt is tested on 3.11, 3.12 and 3.13' % v)"
	$(BIN)/python -c "import torch, torchvision" 2>/dev/null || \
		$(PIP) install -q -c constraints.txt torch torchvision
	grep -vE '^(torch|torchvision)==' constraints.txt > $(VENV)/lock-without-torch.txt
	$(PIP) install -q --no-deps -r $(VENV)/lock-without-torch.txt
	$(PIP) install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

demo: install
	bash scripts/demo.sh

# Lint, format and type checks (settings in pyproject.toml): all three run, any finding fails.
lint: install
	@status=0; for check in "ruff check ." "ruff format --check ." "mypy"; do \
		echo "$(BIN)/$$check"; $(BIN)/$$check || status=1; \
	done; exit $$status

# The suite runs in a random order (pytest-randomly); `make test TEST_SEED=N` repeats order N.
# It runs in TEST_WORKERS processes side by side (pytest-xdist; each test on one thread): one per
# core, at most 4 (each holds its own warm `allennlp` server), the tests marked slow first, handed
# out 16 at a time at most, so that the workers end together. It ends with its 15 slowest tests,
# so the suite's cost shows in every log.
ifndef TEST_SEED
TEST_SEED := $(shell od -An -N2 -tu2 /dev/urandom | tr -d ' ')
endif
TEST_WORKERS ?= $(shell n=$$(nproc); echo $$(( n < 4 ? n : 4 )))

test: install
	@echo "make test: random test order --randomly-seed=$(TEST_SEED) (repeat it: make test TEST_SEED=$(TEST_SEED)), $(TEST_WORKERS) workers"
	$(BIN)/python -m pytest tests -q -rs --randomly-seed=$(TEST_SEED) -n $(TEST_WORKERS) --maxschedchunk=16 --durations=15

# The suite as `make test` runs it, with line coverage of elmo_plugin (settings in pyproject.toml,
# the `allennlp` processes tests start included), then the report per file. Every process's data
# file goes here, whatever its working directory (a test's folder must show only its outputs).
coverage: install
	@echo "make coverage: random test order --randomly-seed=$(TEST_SEED), $(TEST_WORKERS) workers"
	COVERAGE_FILE=$(CURDIR)/.coverage $(BIN)/python -m pytest tests -q -rs --randomly-seed=$(TEST_SEED) -n $(TEST_WORKERS) --maxschedchunk=16 --cov --cov-report=term

benchmark: install
	$(BIN)/python -m benchmarks.run_all

clean:
	rm -rf $(VENV) build *.egg-info demo_output .coverage .coverage.*
