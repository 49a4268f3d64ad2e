# Every target installs what it needs first: on a fresh machine `make run` and
# `make test` are the only two commands required.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
BENCH_STAMP := $(VENV)/.bench-installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# Bun and TypeBox for the TypeScript tools (runner/_discovery/bun.py pins their versions): installed once per pin.
BUN_DIR := $(CURDIR)/.cache/bun
BUN_EXE := $(BUN_DIR)/node_modules/bun/bin/bun.exe
BUN_STAMP := $(BUN_DIR)/.installed-$(shell grep -E '^(BUN|TYPEBOX|ZOD|ARKTYPE)_VERSION' runner/_discovery/bun.py | cksum | cut -d' ' -f1)

.PHONY: setup bun node-mcp run test stress check docs lint fuzz bench conformance wheel clean import-tree

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "xcsh-run needs Python 3.11+, found " + sys.version.split()[0]'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,ray]'
	@# Where PYTHONDONTWRITEBYTECODE is set, nothing would ever cache the host's own
	@# modules: compile them once, or every cold `xcsh-run` compiles them again.
	$(BIN)/python -m compileall -q runner worker
	rm -f $(VENV)/.installed-*
	touch $@

setup: $(STAMP)

## Bun and TypeBox from the npm registry into .cache/bun (needs npm); the targets that run tools use it.
$(BUN_STAMP): $(STAMP)
	$(BIN)/xcsh-run install-bun --prefix $(BUN_DIR)
	rm -f $(BUN_DIR)/.installed-*
	touch $@

bun: $(BUN_STAMP)

## The MCP conformance suite, the official TypeScript SDK client and the Node 22 they run on, from the npm
## registry into .cache/conformance (needs npm; about 240 MB, once per pin in tests/conformance/package-lock.json).
node-mcp: $(STAMP)
	$(BIN)/python tests/conformance/run.py --install-only

run test stress bench: export XCSH_RUN_BUN := $(BUN_EXE)

## The bundled examples: count the Python files tracked in this repository, with the Python tool and
## with the original design's TypeScript one (in a Bun worker).
run: $(STAMP) $(BUN_STAMP)
	$(BIN)/xcsh-run repo_stats --args '{"glob":"*.py"}'
	$(BIN)/xcsh-run repo_stats_ts --args '{"glob":"*.py"}'

## Lint, type-check, build the reference docs, then every test (the fuzz suite's quick profile included),
## then the CLI's tests again with every `xcsh-run` they start going through one daemon.
test: check docs $(BUN_STAMP) node-mcp
	$(BIN)/python -m pytest
	@# `env`, not a shell assignment: make then runs the command itself, not through sh, and the CLI's
	@# shell detection (--show-completion) finds the shell that started make, as in the first run.
	env XCSH_RUN_TEST_DAEMON=1 $(BIN)/python -m pytest tests/cli -q

## The load, sweep, fault and stress tests (marker `stress`) in their long versions (`make test` runs them
## short); extra flags: make stress STRESS_ARGS='-k load -x'.
stress: $(STAMP) $(BUN_STAMP)
	@# Each of these tests sets its own timeout; faulthandler's 110 s dump would only be noise here.
	XCSH_RUN_STRESS=1 $(BIN)/python -m pytest -m stress -o faulthandler_timeout=0 $(STRESS_ARGS)

## The source folders as the one package they make when installed (runner/ is `xcsh_run`, worker/ is
## `xcsh_run.worker`), as links, for the tools that read module names from folders (mypy, mkdocstrings).
import-tree:
	@rm -rf .cache/import-tree && mkdir -p .cache/import-tree/xcsh_run
	@for f in runner/*; do ln -s ../../../$$f .cache/import-tree/xcsh_run/; done
	@ln -s ../../../worker .cache/import-tree/xcsh_run/worker

check: $(STAMP) import-tree
	$(BIN)/ruff format --check runner worker tests fuzz examples bench
	$(BIN)/ruff check runner worker tests fuzz examples bench
	$(BIN)/mypy

## The reference (authoring API, runners, CLI) generated from the docstrings and the CLI's --help, into
## .cache/site (open .cache/site/index.html); --strict turns every docstring or link warning into a failure,
## and the built pages are checked for what it lets through (docs/reference/_site_check.py).
docs: $(STAMP) import-tree
	@# Not --quiet: it stops warnings from being logged, so --strict would count none. Without
	@# XCSH_RUN_FORKSERVER: the reference shows forkserver's default as a user's environment has it.
	env -u XCSH_RUN_FORKSERVER $(BIN)/mkdocs build --strict

lint: $(STAMP)
	$(BIN)/ruff format runner worker tests fuzz examples
	$(BIN)/ruff check --fix runner worker tests fuzz examples

## The long fuzz campaign.
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=long $(BIN)/python -m pytest fuzz -q

## xcsh-run and its peers side by side (about 3 to 5 minutes); extra flags: make bench BENCH_ARGS='--help'.
$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
	rm -f $(VENV)/.bench-installed-*
	touch $@

bench: $(BENCH_STAMP) $(BUN_STAMP)
	$(BIN)/python -m bench.run $(BENCH_ARGS)

## The MCP conformance suite's requirement sets for 2025-11-25 and 2026-07-28 against `xcsh-run serve
## --http`, one row per scenario, known failures in tests/conformance/expected-failures/REV.yaml.
## Installs the suite and the Node 22 it needs from the npm registry into .cache/conformance the first
## time (about 240 MB); extra flags: make conformance CONFORMANCE_ARGS='--revision 2026-07-28 --scenario tools-list --verbose'.
conformance: $(STAMP)
	$(BIN)/python tests/conformance/run.py $(CONFORMANCE_ARGS)

## A wheel of xcsh-run in dist/, to install anywhere: pip install dist/xcsh_run-*.whl (docs/install.md).
## Built with the venv's setuptools (no build isolation): no network needed.
wheel: $(STAMP)
	rm -rf dist/xcsh_run-*.whl build
	$(BIN)/python -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation -w dist .
	rm -rf build
	@ls dist/xcsh_run-*.whl

clean:
	rm -rf .cache/conformance .cache/bun $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis *.egg-info build dist
