# xdscore developer tasks. Every target creates the virtualenv it needs from pyproject.toml.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
BENCH_ARGS ?=
NODE_CLIENT := tests/integration/node

.PHONY: venv compiled pure node demo test lint typecheck docs unit unit-pure integration test-deep bench format records clean

## An editable install holds the sources (XDSCORE_PURE=1 spares its build environment the
## compile's requirements); `make compiled` builds the compiled modules in place.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	XDSCORE_PURE=1 $(PY) -m pip install --quiet -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

## The modules pyproject.toml lists under [tool.xdscore] compiled, compiled with mypyc as a
## user's install compiles them: hatch_build.py builds the sdist and the compiled wheel from
## it into build/dist (which the integration tests reuse: DIST) and puts the wheel's extension
## modules beside their sources; then it compiles the compiled-tools in place. Rebuilt when
## any source changes. `make pure` removes the build.
TOOLS := $(shell $(PYTHON) -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['tool']['xdscore']['compiled-tools']))")
DIST := build/dist

$(VENV)/.compiled: $(VENV)/.installed hatch_build.py $(shell find xdscore -name '*.py') $(shell find stubs -name '*.pyi') $(TOOLS)
	rm -f *__mypyc*.so
	find xdscore benchmarks -name '*.so' -delete
	$(PY) hatch_build.py > build-mypyc.log 2>&1 || (tail -40 build-mypyc.log; exit 1)
	# (A tool's unchanged module is copied from build/ with its old time: the tests compare
	# the build's time with the sources'.)
	find xdscore benchmarks -name '*.so' -exec touch {} +
	touch $@

compiled: $(VENV)/.compiled

pure:
	rm -f $(VENV)/.compiled *__mypyc*.so
	rm -rf $(DIST)
	find xdscore benchmarks -name '*.so' -delete

## gRPC's Node.js xDS client for the integration tests, exactly as package-lock.json pins it.
$(NODE_CLIENT)/node_modules/.installed: $(NODE_CLIENT)/package.json $(NODE_CLIENT)/package-lock.json
	cd $(NODE_CLIENT) && npm ci --no-audit --no-fund --ignore-scripts
	touch $@

node: $(NODE_CLIENT)/node_modules/.installed

## A control plane, a real Envoy and a backend: traffic, then a live config edit.
demo: venv compiled
	$(PY) examples/demo.py

## The whole suite: lint, types, the docs site, unit, property and integration tests (real
## Envoy, real gRPC clients in Python and Node.js) on the compiled build, then the unit and
## property tests again on the pure build (XDSCORE_PURE=1: the sources are loaded).
test: venv compiled node lint typecheck docs
	XDSCORE_COMPILED=1 XDSCORE_DIST=$(DIST) $(PY) -m pytest $(PYTEST_ARGS)
	XDSCORE_PURE=1 $(PY) -m pytest tests/unit tests/property $(PYTEST_ARGS)

lint: venv
	$(PY) -m ruff check xdscore tests examples benchmarks hatch_build.py
	$(VENV)/bin/lint-imports
	$(PY) -m ruff format --check xdscore tests examples benchmarks hatch_build.py

## The library, and the test helpers other test modules build on.
typecheck: venv
	$(VENV)/bin/mypy --strict xdscore hatch_build.py tests/recordgen.py tests/factories.py tests/property/_invariants.py tests/property/_model.py tests/integration/_envoy_support.py tests/integration/_delta_support.py tests/integration/_client_process.py tests/fault/_clients.py tests/tls_support.py tests/etcd_support.py

## The documentation site (mkdocs.yml) into build/site; a broken link or anchor fails it.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

unit: venv compiled
	XDSCORE_COMPILED=1 $(PY) -m pytest tests/unit tests/property $(PYTEST_ARGS)

## The unit and property tests on the pure build, with the compiled modules in place.
unit-pure: venv
	XDSCORE_PURE=1 $(PY) -m pytest tests/unit tests/property $(PYTEST_ARGS)

integration: venv compiled node
	XDSCORE_COMPILED=1 XDSCORE_DIST=$(DIST) $(PY) -m pytest tests/integration tests/fault $(PYTEST_ARGS)

## Property tests with the deep hypothesis profile (long; not run in CI).
test-deep: venv
	HYPOTHESIS_PROFILE=deep $(PY) -m pytest tests/property $(PYTEST_ARGS)

## The side-by-side benchmark matrix (xdscore and, if its binary is beside the repository,
## go-control-plane) into docs/benchmarks.md; e.g. BENCH_ARGS=--quick, or "--peer PATH".
bench: venv compiled
	$(PY) benchmarks/run.py --matrix $(BENCH_ARGS)

## The record classes' generated code (__slots__, _fields, __init__, evolve), written again
## from the fields each declares (tests/recordgen.py; tests/unit/test_recordgen.py checks it).
records: venv
	$(PY) -m tests.recordgen

format: venv
	$(PY) -m ruff format xdscore tests examples benchmarks hatch_build.py
	$(PY) -m ruff check --fix xdscore tests examples benchmarks hatch_build.py

clean: pure
	rm -rf $(VENV) $(NODE_CLIENT)/node_modules .pytest_cache .mypy_cache .ruff_cache .hypothesis
